"""The circuit breaker state machine: closed, open, half-open.

This module is the pure state machine. It never imports OpenTelemetry: telemetry
subscribes to its transitions, so the machine stays fast and easy to test. The
clock is injected (a zero-argument callable returning monotonic seconds), so
every time-based rule is testable without sleeping.

The hot path (closed state) is two short critical sections on plain integers:
``acquire`` hands out a *permit* (the breaker's generation number, bumped on
every transition) and ``record`` reports the outcome with it. A permit from an
older generation still counts in the statistics but never moves the state: a
slow call admitted before the breaker opened can never pass as a probe.
"""

from __future__ import annotations

import enum
import itertools
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any, NamedTuple, Protocol

from otel_breaker.classify import FAILURE, IGNORED, SUCCESS
from otel_breaker.toolcall import ToolCall

logger = logging.getLogger("otel_breaker")

Clock = Callable[[], float]

#: ``acquire`` result: the call must not run.
REJECTED = -1
#: ``acquire`` result in observe mode: the call runs, but enforce mode would
#: have rejected it, so its outcome must not move the state.
SHADOW = -2


class State(str, enum.Enum):
    """Breaker states; the values are the ``otel_breaker.state`` attribute values."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"

    def __str__(self) -> str:
        return self.value


_CLOSED = State.CLOSED
_OPEN = State.OPEN
_HALF_OPEN = State.HALF_OPEN

MODES = ("enforce", "observe")

#: How long a half-open probe holds its slot when the breaker has no ``timeout``:
#: a probe that hangs forever must not keep the breaker half-open for good
#: (the shared store uses the same limit).
PROBE_LEASE_SECONDS = 60.0

#: Starting points from the agent circuit breaker pattern's table. No preset sets
#: a per-call timeout (the default, None, applies): a slow tool is not a broken
#: tool, so a timeout is only ever switched on explicitly (``timeout=``,
#: ``OTEL_BREAKER_TIMEOUT``, a per-tool override), and a preset never clears one.
PRESETS: dict[str, dict[str, Any]] = {
    "fast_api": {"failure_threshold": 3, "recovery_timeout": 30.0},
    "slow_tool": {"failure_threshold": 2, "recovery_timeout": 120.0},
    "code_executor": {"failure_threshold": 2, "recovery_timeout": 60.0},
}


@dataclass(frozen=True)
class CircuitBreakerConfig:
    """How one breaker decides. Defaults are the ones agent users already know.

    Every option is documented in docs/python-api.md with its default. ``timeout`` is
    None by default: a healthy tool that takes long (a 45 s compile or scrape)
    must never count as a failure unless the user asked for a per-call timeout.
    """

    failure_threshold: int = 5
    recovery_timeout: float = 60.0
    success_threshold: int = 2
    timeout: float | None = None
    monitor_window: float = 300.0
    graceful_degradation: bool = True
    failure_rate_threshold: float | None = None
    minimum_calls: int = 20
    half_open_max_calls: int = 1
    backoff_multiplier: float = 1.0
    max_recovery_timeout: float = 600.0
    ignore_exceptions: tuple[type[BaseException], ...] = ()
    record_exceptions: tuple[type[BaseException], ...] = ()
    is_failure: Callable[[BaseException], bool] | None = field(default=None, compare=False)
    is_failure_result: Callable[[Any], bool] | None = field(default=None, compare=False)
    mode: str = "enforce"
    enable_health_check: bool = True
    health_check_interval: float = 30.0
    health_check: Callable[[], bool | Awaitable[bool]] | None = field(default=None, compare=False)
    fallbacks: tuple[str, ...] = ()
    high_stakes: bool = False
    count_model_retry: bool = False
    """Count a tool's "ask the model again" signal (PydanticAI ``ModelRetry``) as a failure."""
    slow_call_seconds: float | None = None
    """A call that takes longer than this is slow (resilience4j's
    ``slowCallDurationThreshold``). None (the default): a slow call is never counted."""
    slow_call_rate: float | None = None
    """Open once this share of the calls in ``monitor_window`` (at least ``minimum_calls``)
    was slow (resilience4j's ``slowCallRateThreshold``); None with ``slow_call_seconds``
    set means 1.0, every call slow."""
    loop_limit: int = 3
    """The loop guard: how many times an identical call may end in a counted way
    (``loop_count``) before the next identical one is not run (``loops.py``)."""
    loop_action: str = "reject"
    """What the loop guard does then: ``reject`` (answer the model), ``stop`` (raise
    ``ToolLoopError`` to the caller of the run) or ``warn`` (count it, change nothing)."""
    loop_count: tuple[str, ...] = ("mistakes",)
    """What ends an identical call in a counted way: ``mistakes`` (arguments the tool
    rejects, an unknown tool), ``failures``, ``retries`` (``ModelRetry`` and the like)."""

    def __post_init__(self) -> None:
        kinds = self.loop_count
        if isinstance(kinds, str):  # "mistakes,failures" (also + or | between names)
            kinds = tuple(k.strip() for k in kinds.replace("+", ",").replace("|", ",").split(",") if k.strip())
        if not isinstance(kinds, tuple):
            try:
                kinds = tuple(kinds)
            except TypeError:
                pass
        object.__setattr__(self, "loop_count", kinds)
        problems = list(_config_problems(self))
        if problems:
            raise ValueError("invalid CircuitBreakerConfig: " + "; ".join(problems))
        # Accept lists from users, store tuples so configs stay hashable-ish.
        for name in ("ignore_exceptions", "record_exceptions", "fallbacks"):
            value = getattr(self, name)
            if not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> CircuitBreakerConfig:
        """A config from the pattern's table (``fast_api``, ``slow_tool``, ``code_executor``)."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    def with_changes(self, **changes: Any) -> CircuitBreakerConfig:
        """A copy with some options changed (validated like a new config)."""
        return replace(self, **changes)

    def cooldown(self, reopenings: int) -> float:
        """Seconds to stay open after ``reopenings`` failed probes in a row."""
        base = self.recovery_timeout
        if reopenings <= 0 or self.backoff_multiplier == 1.0:
            return base
        try:
            grown = base * self.backoff_multiplier**reopenings
        except OverflowError:  # after very many failed probes in a row
            grown = math.inf
        return max(base, min(grown, self.max_recovery_timeout))


CONFIG_FIELDS = tuple(f.name for f in fields(CircuitBreakerConfig))

#: What the loop guard may do once an identical call repeats (``loop_action``).
LOOP_ACTIONS = ("reject", "stop", "warn")
#: What may count toward the loop guard (``loop_count``).
LOOP_COUNT_KINDS = ("mistakes", "failures", "retries")

#: Upper bounds of accepted options: beyond them a value is a typo, not a policy.
MAX_COUNT = 10**9
MAX_SECONDS = 366 * 86400.0
MAX_MULTIPLIER = 100.0
#: Shortest health-check interval and failure-rate window (a 0 would spin).
MIN_INTERVAL = 0.001


def _config_problems(c: CircuitBreakerConfig):
    def positive_int(name: str) -> None:
        value = getattr(c, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            problems.append(f"{name}={value!r} (must be an integer >= 1)")

    def non_negative(name: str, allow_none: bool = False) -> None:
        value = getattr(c, name)
        if value is None and allow_none:
            return
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            problems.append(f"{name}={value!r} (must be a number >= 0)")

    problems: list[str] = []
    for name in ("failure_threshold", "success_threshold", "minimum_calls", "half_open_max_calls"):
        positive_int(name)
    for name in ("recovery_timeout", "max_recovery_timeout"):
        non_negative(name)
    non_negative("timeout", allow_none=True)
    interval = c.health_check_interval
    if isinstance(interval, bool) or not isinstance(interval, int | float) or not interval >= MIN_INTERVAL:
        problems.append(f"health_check_interval={interval!r} (must be a number >= {MIN_INTERVAL:g} seconds)")
    if isinstance(c.monitor_window, bool) or not isinstance(c.monitor_window, int | float) or not c.monitor_window > 0:
        problems.append(f"monitor_window={c.monitor_window!r} (must be a number > 0)")
    elif c.monitor_window < MIN_INTERVAL:
        problems.append(f"monitor_window={c.monitor_window!r} (must be >= {MIN_INTERVAL:g} seconds)")
    rate = c.failure_rate_threshold
    if rate is not None and (not isinstance(rate, int | float) or not 0 < rate <= 1):
        problems.append(f"failure_rate_threshold={rate!r} (must be in (0, 1] or None)")
    multiplier = c.backoff_multiplier
    if isinstance(multiplier, bool) or not isinstance(multiplier, int | float) or not 1 <= multiplier <= MAX_MULTIPLIER:
        problems.append(f"backoff_multiplier={multiplier!r} (must be between 1 and {MAX_MULTIPLIER:g})")
    # Values that parse but make no sense: named like every other bad value.
    for name in ("failure_threshold", "success_threshold", "minimum_calls", "half_open_max_calls"):
        value = getattr(c, name)
        if isinstance(value, int) and value > MAX_COUNT:
            problems.append(f"{name}={value!r} (must be at most {MAX_COUNT:,})")
    for name in (
        "recovery_timeout",
        "max_recovery_timeout",
        "timeout",
        "monitor_window",
        "health_check_interval",
        "slow_call_seconds",
    ):
        value = getattr(c, name)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > MAX_SECONDS:
            problems.append(f"{name}={value!r} (must be at most {MAX_SECONDS:g} seconds, a year)")
    if (
        isinstance(c.backoff_multiplier, int | float)
        and c.backoff_multiplier > 1
        and isinstance(c.max_recovery_timeout, int | float)
        and isinstance(c.recovery_timeout, int | float)
        and c.max_recovery_timeout < c.recovery_timeout
    ):
        problems.append(
            f"max_recovery_timeout={c.max_recovery_timeout!r} (must be >= recovery_timeout={c.recovery_timeout!r}: "
            f"with backoff_multiplier={c.backoff_multiplier!r} the cooldown could never grow)"
        )
    if c.mode not in MODES:
        problems.append(f"mode={c.mode!r} (must be one of {', '.join(MODES)})")
    non_negative("slow_call_seconds", allow_none=True)
    slow_rate = c.slow_call_rate
    if slow_rate is not None and (
        isinstance(slow_rate, bool) or not isinstance(slow_rate, int | float) or not 0 < slow_rate <= 1
    ):
        problems.append(f"slow_call_rate={slow_rate!r} (must be in (0, 1] or None)")
    positive_int("loop_limit")
    if isinstance(c.loop_limit, int) and c.loop_limit > MAX_COUNT:
        problems.append(f"loop_limit={c.loop_limit!r} (must be at most {MAX_COUNT:,})")
    if c.loop_action not in LOOP_ACTIONS:
        problems.append(f"loop_action={c.loop_action!r} (must be one of {', '.join(LOOP_ACTIONS)})")
    kinds = c.loop_count
    if not isinstance(kinds, tuple) or not all(k in LOOP_COUNT_KINDS for k in kinds):
        problems.append(f"loop_count={kinds!r} (must be a subset of {', '.join(LOOP_COUNT_KINDS)})")
    yield from problems


class StateChange(NamedTuple):
    """One transition, as delivered to listeners."""

    breaker: CircuitBreaker
    from_state: State
    to_state: State
    reason: str
    at: float


@dataclass(frozen=True)
class BreakerStats:
    """A consistent snapshot of a breaker's counters (since its last reset)."""

    state: State
    failure_count: int
    success_count: int
    ignored_count: int
    total_requests: int
    rejected_requests: int
    consecutive_failures: int
    opened_count: int
    last_state_change: float | None


class CircuitOpenError(Exception):
    """Raised instead of running a tool whose breaker is open.

    Only when ``graceful_degradation=False``; otherwise callers get an error
    result they can hand to the model.
    """

    def __init__(self, tool: str, state: State, retry_after: float | None, message: str | None = None):
        self.tool = tool
        self.state = state
        self.retry_after = retry_after
        super().__init__(message or f"Tool '{tool}' circuit breaker {state.value} - too many recent failures")


class _FailureWindow:
    """Calls and failures over the last ``monitor_window`` seconds, in 10 buckets.

    Only maintained when a failure-rate threshold is configured.
    """

    __slots__ = ("_calls", "_epochs", "_failures", "_width")
    BUCKETS = 10

    def __init__(self, window: float) -> None:
        self._width = window / self.BUCKETS
        self._epochs = [-1] * self.BUCKETS
        self._calls = [0] * self.BUCKETS
        self._failures = [0] * self.BUCKETS

    def add(self, now: float, failed: bool) -> None:
        epoch = int(now // self._width)
        slot = epoch % self.BUCKETS
        if self._epochs[slot] != epoch:
            self._epochs[slot] = epoch
            self._calls[slot] = 0
            self._failures[slot] = 0
        self._calls[slot] += 1
        if failed:
            self._failures[slot] += 1

    def totals(self, now: float) -> tuple[int, int]:
        oldest = int(now // self._width) - self.BUCKETS + 1
        calls = failures = 0
        for slot, epoch in enumerate(self._epochs):
            if epoch >= oldest:
                calls += self._calls[slot]
                failures += self._failures[slot]
        return calls, failures

    def clear(self) -> None:
        self._epochs = [-1] * self.BUCKETS


StateListener = Callable[[StateChange], None]

# Listeners for every breaker (telemetry, health checks, shared stores).
_GLOBAL_LISTENERS: list[StateListener] = []
# Every live breaker, so ``reset_all`` reaches breakers held outside a registry.
_ALL_BREAKERS: weakref.WeakSet[CircuitBreaker] = weakref.WeakSet()


def add_global_listener(listener: StateListener) -> None:
    """Subscribe to the transitions of every breaker in the process."""
    if listener not in _GLOBAL_LISTENERS:
        _GLOBAL_LISTENERS.append(listener)


def remove_global_listener(listener: StateListener) -> None:
    if listener in _GLOBAL_LISTENERS:
        _GLOBAL_LISTENERS.remove(listener)


#: Called as ``listener(breaker, from_state, to_state)`` when a breaker follows a
#: change another process made in a shared store. That process counted the
#: transition; these listeners only tell this process's log where the breaker lives.
FollowListener = Callable[["CircuitBreaker", State, State], None]
_FOLLOW_LISTENERS: list[FollowListener] = []


def add_follow_listener(listener: FollowListener) -> None:
    """Subscribe to changes breakers follow from a shared store (telemetry does)."""
    if listener not in _FOLLOW_LISTENERS:
        _FOLLOW_LISTENERS.append(listener)


def notify_followed(breaker: CircuitBreaker, from_state: State, to_state: State) -> None:
    """Tell the follow listeners a shared store moved ``breaker``; a failing listener is logged."""
    if from_state is to_state:
        return
    for listener in _FOLLOW_LISTENERS:
        try:
            listener(breaker, from_state, to_state)
        except Exception:
            logger.exception("otel-breaker: follow listener %r failed", listener)


def all_breakers() -> list[CircuitBreaker]:
    """Every breaker alive in this process, registered or not."""
    return list(_ALL_BREAKERS)


class CachedRejection(NamedTuple):
    """A rejection's graceful result, reused while ``valid_from <= clock() < valid_until``
    (the whole seconds of ``retry_after`` hold), for the same caller and generation.
    ``rejection.rejection_result`` fills it; :meth:`CircuitBreaker.call` reads it inline."""

    valid_from: float
    valid_until: float
    call: ToolCall | None
    generation: int
    result: dict[str, Any]


class CachedSpanAttributes(NamedTuple):
    """A tool span's name and fixed attributes for one shape of call (``key``: tool,
    framework, tool type, agent name, source), built once by telemetry and reused
    while ``settings`` (the settings object the upstream label was read from) is
    the current one. :meth:`Telemetry.start <otel_breaker.telemetry.Telemetry.start>`
    fills and reads it."""

    key: tuple[str, str, str, str | None, str | None]
    settings: object
    name: str
    attributes: dict[str, Any]


Permit = int | tuple[int, int]


class BreakerStorage(Protocol):
    """Where a breaker's state is shared with other processes (the Redis store).

    Without one (``storage=None``) the state lives in the breaker's own fields:
    the in-memory storage, the fastest place, with the lock-free closed and open
    paths. A shared storage keeps the breaker as the one owner of the entry
    points (``acquire``/``record``, manual control) and runs each decision on the
    shared state, mirroring the answer into those same fields, so ``stats``,
    ``state`` and telemetry read one place whatever the storage. Every method
    that talks to the shared state answers None/False when it is unusable: the
    breaker then decides with its in-memory state machine, and a tool call never
    waits on a broken server.
    """

    #: True when decisions may await an asyncio client (the breaker's ``awaits_store``).
    awaits: bool
    #: Half-open with every probe slot held elsewhere (``retry_after`` is then short, not 0).
    probe_busy: bool

    def configure(self, breaker: CircuitBreaker) -> None:
        """The breaker's configuration changed (and at creation): the shared rules use it."""

    def acquire(self, breaker: CircuitBreaker) -> Permit | None:
        """Admission when the mirror is not enough to admit locally; None: decide in memory."""

    async def aacquire(self, breaker: CircuitBreaker) -> Permit | None:
        """``acquire`` without blocking the event loop on the server."""

    def record(self, breaker: CircuitBreaker, permit: Permit, outcome: int) -> bool:
        """Every outcome goes to the shared state (other processes count it); False: record in memory."""

    async def arecord(self, breaker: CircuitBreaker, permit: Permit, outcome: int) -> bool:
        """``record`` without blocking the event loop on the server."""

    def refresh(self, breaker: CircuitBreaker) -> bool:
        """Read the shared state into the breaker now (the CLI and the failover tests ask)."""

    def force_open(self, breaker: CircuitBreaker, duration: float | None) -> bool:
        """Manual open for every process sharing the state."""

    def force_close(self, breaker: CircuitBreaker) -> bool:
        """Manual close for every process sharing the state."""

    def reset(self, breaker: CircuitBreaker) -> bool:
        """A fresh closed breaker for every process sharing the state."""

    def health_check_passed(self, breaker: CircuitBreaker) -> bool | None:
        """A passing health check moves the shared open state to half-open; None: unusable."""

    def recent_failure_rate(self, breaker: CircuitBreaker) -> float | None:
        """The shared window's failure ratio (every process's calls); None: unusable."""

    def close(self, breaker: CircuitBreaker) -> None:
        """The registry dropped the breaker: stop following the shared state for it."""


class CircuitBreaker:
    """A per-tool circuit breaker.

    ``call``/``acall`` run a function through it (and it works as a decorator);
    ``acquire``/``record`` are the two halves for code that runs the call itself.
    ``storage`` shares its state with other processes (see :class:`BreakerStorage`);
    without one the state lives in this object.
    """

    #: Where the tool runs (an MCP server), set by the registry for tools that have one.
    source: str | None = None
    #: The code behind a local tool (``module:qualname``), set by the registry when known.
    origin: str | None = None
    #: True when decisions may wait on a store with an asyncio client (``aacquire``/``arecord``).
    awaits_store = False
    #: False for breakers whose state lives elsewhere: every call then takes acquire/record.
    quick_path = True

    def __init__(
        self,
        name: str,
        config: CircuitBreakerConfig | None = None,
        *,
        clock: Clock | None = None,
        agent_name: str | None = None,
        session_id: str | None = None,
        storage: BreakerStorage | None = None,
    ) -> None:
        self.name = name
        self.agent_name = agent_name
        self.session_id = session_id
        self._config = config or CircuitBreakerConfig()
        self._clock: Clock = clock or time.monotonic
        self._lock = threading.Lock()
        self._storage = storage
        # Closed-state admission needs no storage round trip: always in memory; with a
        # shared storage only while its mirror is known closed, proven healthy and watched.
        self._local_admit = storage is None
        if storage is not None:
            self.awaits_store = storage.awaits
        self._listeners: list[StateListener] = []
        self._state = _CLOSED
        self._generation = 0
        self._consecutive = 0
        self._open_until = 0.0
        self._reopenings = 0
        self._probe_leases: dict[int, float] = {}
        self._next_lease = 0
        self._probe_successes = 0
        self._window = _FailureWindow(self._config.monitor_window) if self._config.failure_rate_threshold else None
        #: Calls and slow calls over ``monitor_window``, when ``slow_call_seconds`` is set.
        self._slow_window: _FailureWindow | None = None
        self._simple = self._quick_path_allowed()
        self._quiet_rejection = self._quiet_rejection_allowed()
        # Lifetime counters: monotonic, read by telemetry at collection time.
        # Requests and successes are counted on the lock-free closed-state path
        # with itertools.count, whose next() is atomic; the rest under the lock.
        self._request_counter = itertools.count()
        self._success_counter = itertools.count()
        self._failures = 0
        self._ignored = 0
        self._rejected_open_counter = itertools.count()
        self._rejected_half_open = 0
        self._observe = self._config.mode == "observe"
        self._opened_count = 0
        self._last_change: float | None = None
        # ``stats`` reports counts since the last reset by subtracting this.
        self._baseline = (0, 0, 0, 0, 0, 0)
        #: Set when a registry pruned this breaker and folded its counts away.
        self.retired = False
        #: Telemetry's attribute sets for this breaker's duration records, by ``error.type``.
        self.telemetry_cache: dict[str | None, dict[str, Any]] | None = None
        #: The call path's ToolCall for calls made without one (``breaker.call``, the decorator).
        self.call_cache: ToolCall | None = None
        #: The graceful result of a rejection while it stays true (see :class:`CachedRejection`).
        self.rejection_cache: CachedRejection | None = None
        #: The tool span's name and fixed attributes (see :class:`CachedSpanAttributes`).
        self.span_cache: CachedSpanAttributes | None = None
        if storage is not None:
            storage.configure(self)
        _ALL_BREAKERS.add(self)

    # -- introspection ---------------------------------------------------

    def __repr__(self) -> str:
        shared = "" if self._storage is None else f" {self._storage!r}"
        return f"<CircuitBreaker {self.name!r} {self._state.value}{shared}>"

    @property
    def config(self) -> CircuitBreakerConfig:
        return self._config

    @property
    def storage(self) -> BreakerStorage | None:
        """The shared storage this breaker delegates to; None when its state is in memory."""
        return self._storage

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def state(self) -> State:
        """The current state. Reading it past an open breaker's cooldown moves
        the breaker to half-open (ready for a probe), so dashboards never show
        an idle tool as open after its cooldown."""
        state = self._state
        if state is _OPEN and self._clock() >= self._open_until:
            with self._lock:
                change = None
                if self._state is _OPEN and self._clock() >= self._open_until:
                    change = self._transition(_HALF_OPEN, "cooldown_elapsed", self._clock())
                state = self._state
            if change is not None:
                self._emit(change)
        return state

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def retry_after(self) -> float:
        """Seconds until a probe is allowed: 0 when closed or half-open with a
        free probe slot, ``inf`` while forced open."""
        with self._lock:
            return self._retry_after_locked(self._clock())

    def peek_retry_after(self) -> float:
        """``retry_after`` without taking the lock, for the rejection hot path
        (a value a moment stale is fine there)."""
        return self._retry_after_locked(self._clock())

    def _retry_after_locked(self, now: float) -> float:
        if self._state is _OPEN:
            return max(0.0, self._open_until - now)
        if self._state is _HALF_OPEN and (
            len(self._probe_leases) >= self._config.half_open_max_calls
            or (self._storage is not None and self._storage.probe_busy)
        ):
            return min(1.0, self._config.recovery_timeout)
        return 0.0

    @property
    def _requests(self) -> int:
        return _counter_value(self._request_counter)

    @property
    def _rejected_open(self) -> int:
        return _counter_value(self._rejected_open_counter)

    @property
    def _successes(self) -> int:
        return _counter_value(self._success_counter)

    @property
    def stats(self) -> BreakerStats:
        self.state  # noqa: B018 - applies an elapsed cooldown first
        with self._lock:
            s, f, i, r, rej, opened = self._baseline
            return BreakerStats(
                state=self._state,
                failure_count=self._failures - f,
                success_count=self._successes - s,
                ignored_count=self._ignored - i,
                total_requests=self._requests - r,
                rejected_requests=self._rejected_open + self._rejected_half_open - rej,
                consecutive_failures=self._consecutive,
                opened_count=self._opened_count - opened,
                last_state_change=self._last_change,
            )

    def lifetime_counts(self) -> tuple[int, int, int, int, int]:
        """(successes, failures, ignored, rejected while open, rejected while half-open),
        never reset: what telemetry exports as monotonic counters."""
        return (self._successes, self._failures, self._ignored, self._rejected_open, self._rejected_half_open)

    def recent_failure_rate(self) -> float | None:
        """Failure ratio over ``monitor_window`` when a rate threshold is configured."""
        if self._storage is not None and self._config.failure_rate_threshold:
            rate = self._storage.recent_failure_rate(self)
            if rate is not None:
                return rate
        if self._window is None:
            return None
        with self._lock:
            calls, failures = self._window.totals(self._clock())
        return failures / calls if calls else 0.0

    # -- configuration and listeners -------------------------------------

    def configure(self, config: CircuitBreakerConfig) -> None:
        """Apply a new configuration; the current state is kept."""
        with self._lock:
            self._config = config
            self._observe = config.mode == "observe"
            if config.failure_rate_threshold and self._window is None:
                self._window = _FailureWindow(config.monitor_window)
            elif not config.failure_rate_threshold:
                self._window = None
            self._simple = self._quick_path_allowed()
        self._quiet_rejection = self._quiet_rejection_allowed()
        if self._storage is not None:
            self._storage.configure(self)

    def close(self) -> None:
        """Stop following shared state (the registry calls this when it drops a breaker)."""
        if self._storage is not None:
            self._storage.close(self)

    def refresh(self) -> State:
        """Read the shared state now (one round trip with a shared storage) and return the state."""
        if self._storage is not None:
            self._storage.refresh(self)
            return self._state
        return self.state

    def _quiet_rejection_allowed(self) -> bool:
        """Whether :meth:`call` may answer a rejection itself: a graceful result, no
        escalation gate, enforce mode (observe mode runs the call)."""
        c = self._config
        return (
            self.quick_path
            and self._storage is None
            and c.graceful_degradation
            and not c.high_stakes
            and c.mode == "enforce"
        )

    def _quick_path_allowed(self) -> bool:
        """Whether :meth:`call`'s quick path may decide for this breaker's configuration."""
        c = self._config
        return (
            self.quick_path
            and self._storage is None
            and self._window is None
            and c.timeout is None
            and c.slow_call_seconds is None
            and c.is_failure_result is None
        )

    def on_state_change(self, callback: StateListener) -> StateListener:
        """Call ``callback(change)`` after every transition of this breaker.

        Returns the callback, so it can be used as a decorator.
        """
        self._listeners.append(callback)
        return callback

    # -- the two halves of a guarded call ----------------------------------

    def acquire(self) -> int | tuple[int, int]:
        """Ask to run one call.

        Returns a permit to pass to :meth:`record`, or ``REJECTED`` (the call
        must not run), or ``SHADOW`` in observe mode for a call enforce mode
        would have rejected.
        """
        permit = self._generation
        state = self._state
        if state is _CLOSED and self._local_admit:
            # Lock-free: a transition racing with this read leaves ``permit`` at
            # the older generation, whose outcome then only counts in stats.
            next(self._request_counter)
            return permit
        storage = self._storage
        if storage is not None:
            shared = storage.acquire(self)
            if shared is not None:
                return shared
        elif state is _OPEN and self._clock() < self._open_until:
            next(self._request_counter)
            next(self._rejected_open_counter)
            return SHADOW if self._observe else REJECTED
        return self._acquire_locked()

    async def aacquire(self) -> int | tuple[int, int]:
        """``acquire`` that awaits a shared storage's asyncio client instead of blocking."""
        storage = self._storage
        if storage is None or (self._state is _CLOSED and self._local_admit):
            return self.acquire()
        shared = await storage.aacquire(self)
        return self._acquire_locked() if shared is None else shared

    def _acquire_locked(self) -> int | tuple[int, int]:
        with self._lock:
            permit, change = self._acquire_slow()
        if change is not None:
            self._emit(change)
        return permit

    def _acquire_slow(self) -> tuple[int | tuple[int, int], StateChange | None]:
        """Admission under the lock, from the state found under the lock: the
        state read without it may be stale (the breaker may have closed since)."""
        now = self._clock()
        next(self._request_counter)
        change = None
        state = self._state
        if state is _CLOSED:
            return self._generation, None
        if state is _OPEN:
            if now < self._open_until:
                next(self._rejected_open_counter)
                return (SHADOW if self._observe else REJECTED), None
            change = self._transition(_HALF_OPEN, "cooldown_elapsed", now)
        # half-open: hand out probe leases; reclaim leases of probes that hung
        leases = self._probe_leases
        timeout = self._config.timeout
        lease_limit = PROBE_LEASE_SECONDS if timeout is None else timeout
        if leases:
            for lease, started in list(leases.items()):
                if now - started > lease_limit:
                    del leases[lease]
        if len(leases) < self._config.half_open_max_calls:
            self._next_lease += 1
            leases[self._next_lease] = now
            return (self._generation, self._next_lease), change
        self._rejected_half_open += 1
        return (SHADOW if self._observe else REJECTED), change

    def record(self, permit: int | tuple[int, int], outcome: int) -> None:
        """Report the outcome (``SUCCESS``/``FAILURE``/``IGNORED``) of a call
        that ``acquire`` let through."""
        if (
            outcome == SUCCESS
            and permit == self._generation
            and self._window is None
            and not self._consecutive
            and self._storage is None
        ):
            # Closed, current generation, no failure streak to clear: the common
            # case needs no lock. (A failure racing with it takes the lock and
            # reads as having happened after this success.)
            next(self._success_counter)
            return
        if self._storage is not None and self._storage.record(self, permit, outcome):
            return
        self._record_locked(permit, outcome)

    def observe(self, outcome: int) -> None:
        """Count a call that already ran, learned after the fact (a foreign tool
        span): its admission and its outcome together, so the breaker's books
        balance (it can become idle and be evicted like any other). In the closed
        state the outcome counts toward opening; while open or half-open it only
        updates statistics (it was no probe)."""
        permit = self._generation if self.state is _CLOSED else SHADOW
        next(self._request_counter)
        self.record(permit, outcome)

    async def arecord(self, permit: int | tuple[int, int], outcome: int) -> None:
        """``record`` that awaits a shared storage's asyncio client instead of blocking."""
        storage = self._storage
        if storage is None:
            self.record(permit, outcome)
        elif not await storage.arecord(self, permit, outcome):
            self._record_locked(permit, outcome)

    def _record_locked(self, permit: int | tuple[int, int], outcome: int) -> None:
        with self._lock:
            change = self._record_slow(permit, outcome)
        if change is not None:
            self._emit(change)

    def _record_slow(self, permit: int | tuple[int, int], outcome: int) -> StateChange | None:
        if outcome == SUCCESS:
            next(self._success_counter)
        elif outcome == FAILURE:
            self._failures += 1
        else:
            self._ignored += 1
        state = self._state
        if isinstance(permit, tuple):
            generation, lease = permit
            if state is not _HALF_OPEN or generation != self._generation:
                return None
            if self._probe_leases.pop(lease, None) is None:
                return None  # the lease expired: a late answer is not a probe result
            if outcome == SUCCESS:
                self._probe_successes += 1
                if self._probe_successes >= self._config.success_threshold:
                    return self._transition(_CLOSED, "probe_succeeded", self._clock())
            elif outcome == FAILURE:
                self._reopenings += 1
                return self._open(self._clock(), "probe_failed")
            return None
        if permit != self._generation or state is not _CLOSED or outcome == IGNORED:
            return None
        if outcome == SUCCESS:
            self._consecutive = 0
            if self._window is not None:
                self._window.add(self._clock(), False)
            return None
        now = self._clock()
        self._consecutive += 1
        if self._consecutive >= self._config.failure_threshold:
            return self._open(now, f"consecutive_failures={self._consecutive}")
        window = self._window
        if window is not None:
            window.add(now, True)
            calls, failures = window.totals(now)
            rate = failures / calls
            if calls >= self._config.minimum_calls and rate >= self._config.failure_rate_threshold:
                return self._open(now, f"failure_rate={rate:.2f}")
        return None

    # -- transitions -------------------------------------------------------

    def _open(self, now: float, reason: str, until: float | None = None) -> StateChange | None:
        self._open_until = now + self._config.cooldown(self._reopenings) if until is None else until
        self._opened_count += 1
        return self._transition(_OPEN, reason, now)

    def _transition(self, to: State, reason: str, now: float) -> StateChange | None:
        """Move to ``to`` (lock held). Returns the change to emit after unlocking."""
        previous = self._state
        self._state = to
        self._generation += 1
        self._probe_leases.clear()
        self._probe_successes = 0
        self._last_change = now
        if to is _CLOSED:
            self._consecutive = 0
            self._reopenings = 0
            if self._window is not None:
                self._window.clear()
            if self._slow_window is not None:
                self._slow_window.clear()
        if previous is to:
            return None
        return StateChange(self, previous, to, reason, now)

    def _emit(self, change: StateChange) -> None:
        for listener in (*self._listeners, *_GLOBAL_LISTENERS):
            try:
                listener(change)
            except Exception:
                logger.exception("otel-breaker: state listener %r failed", listener)

    def _change(self, apply: Callable[[float], StateChange | None]) -> None:
        with self._lock:
            change = apply(self._clock())
        if change is not None:
            self._emit(change)

    # -- manual control ----------------------------------------------------

    def force_open(self, duration: float | None = None) -> None:
        """Open now. Stays open until ``force_close``/``reset`` unless ``duration`` is given."""
        if self._storage is not None and self._storage.force_open(self, duration):
            return
        self._change(lambda now: self._open(now, "manual", math.inf if duration is None else now + duration))

    def record_duration(self, seconds: float) -> None:
        """A closed-state call's duration, for the slow-call rule (resilience4j's):
        with ``slow_call_seconds`` set, once at least ``minimum_calls`` calls were made in
        ``monitor_window`` and the share of them slower than it reaches ``slow_call_rate``,
        the breaker opens. Unset, nothing happens: a slow tool is not a broken tool."""
        config = self._config
        threshold = config.slow_call_seconds
        if threshold is None or self._state is not _CLOSED:
            return
        rate_limit = 1.0 if config.slow_call_rate is None else config.slow_call_rate

        def apply(now: float) -> StateChange | None:
            if self._state is not _CLOSED:
                return None
            window = self._slow_window
            if window is None:
                window = self._slow_window = _FailureWindow(config.monitor_window)
            window.add(now, seconds > threshold)
            calls, slow = window.totals(now)
            rate = slow / calls if calls else 0.0
            if calls >= config.minimum_calls and rate >= rate_limit:
                return self._open(now, f"slow_call_rate={rate:.2f}")
            return None

        self._change(apply)

    def open_for(self, seconds: float, reason: str = "retry_after") -> float:
        """Open now for ``seconds`` (a service's retry hint), capped at ``max_recovery_timeout``.

        The service knows when it will answer again, so its hint replaces the
        cooldown (a half-open probe waits for it) unless the breaker is held open
        by hand. Returns the seconds applied (0 when ``seconds`` is not positive).
        """
        try:
            duration = min(float(seconds), self._config.max_recovery_timeout)
        except (TypeError, ValueError):
            return 0.0
        if not duration > 0:  # also NaN
            return 0.0
        if self._storage is not None and self._storage.force_open(self, duration):
            return duration

        def apply(now: float) -> StateChange | None:
            if self._state is _OPEN and self._open_until == math.inf:
                return None
            return self._open(now, reason, now + duration)

        self._change(apply)
        return duration

    def force_close(self) -> None:
        """Close now, clearing the failure streak."""
        if self._storage is not None and self._storage.force_close(self):
            return
        self._change(lambda now: self._transition(_CLOSED, "manual", now))

    def reset(self) -> None:
        """Back to a fresh closed breaker: state, streaks and ``stats`` start over.

        Telemetry counters stay monotonic (they read lifetime counts).
        """

        def baseline() -> None:
            self._baseline = (
                self._successes,
                self._failures,
                self._ignored,
                self._requests,
                self._rejected_open + self._rejected_half_open,
                self._opened_count,
            )

        if self._storage is not None:
            with self._lock:
                baseline()
            if self._storage.reset(self):
                return

        def apply(now: float) -> StateChange | None:
            baseline()
            change = self._transition(_CLOSED, "reset", now)
            self._last_change = None if change is None else now
            return change

        self._change(apply)

    def health_check_passed(self) -> bool:
        """A passing health check moves an open breaker to half-open early.

        Returns True when it did. A manually forced open breaker stays open.
        """
        if self._storage is not None:
            shared = self._storage.health_check_passed(self)
            if shared is not None:
                return shared
        moved = False

        def apply(now: float) -> StateChange | None:
            nonlocal moved
            if self._state is not _OPEN or self._open_until == math.inf:
                return None
            if now >= self._open_until:
                # the cooldown is already over (a read would have moved it): not the check's doing
                return self._transition(_HALF_OPEN, "cooldown_elapsed", now)
            moved = True
            return self._transition(_HALF_OPEN, "health_check_passed", now)

        self._change(apply)
        return moved

    # -- running calls -------------------------------------------------------

    def call(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` through the breaker (the same path ``@guard`` takes).

        The quick path below is :meth:`acquire` and :meth:`record` for the one
        case that needs neither a lock nor a clock: closed, no failure streak,
        no window, no timeout, no result validator, and nobody watching (no
        telemetry provider). Anything else takes the guard's full path.
        """
        permit = self._generation  # generation first, then state: as in acquire
        state = self._state
        try:
            # nobody watching: unwatched(), inlined (a subscript, cheaper than .get;
            # a slot whose name was deleted raises KeyError: the general path then)
            quiet = _w1[_k1] is None and _w2[_k2] is None and _w3[_k3] is None and _w4[_k4] is None
        except KeyError:
            quiet = False
        if state is _CLOSED and quiet and self._simple and not self._consecutive:
            next(self._request_counter)
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                _after_raise(self, permit, exc)
                raise
            if permit == self._generation and not self._consecutive:
                next(self._success_counter)
            else:
                self.record(permit, SUCCESS)
            return result
        if state is _OPEN and quiet and self._quiet_rejection:
            now = self._clock()
            if now < self._open_until:
                # acquire's open branch; the graceful result from the guard's one cache
                # (its check inlined: valid while the generation and whole seconds hold).
                next(self._request_counter)
                next(self._rejected_open_counter)
                cached = self.rejection_cache
                if (
                    cached is not None
                    and cached[0] <= now < cached[1]
                    and cached[2] is None
                    and cached[3] == self._generation
                ):
                    return cached[4].copy()
                return _rejection(self, None)
        return _run_sync(self, fn, args, kwargs)

    async def acall(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` (a coroutine function or a plain one) through the breaker."""
        return await _run_async(self, fn, args, kwargs)

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Use the breaker as a decorator on sync and async functions."""
        return _decorate(self, fn)


def decorated(breaker: CircuitBreaker, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` behind ``breaker``: the decorator's wrapper.

    :meth:`CircuitBreaker.call`'s quick path inline, so a healthy call does not
    pay for handing ``*args, **kwargs`` on to ``call``; every other case (a
    watcher, a streak, a timeout, not closed) goes through ``call`` itself.
    """

    def guarded(*args: Any, **kwargs: Any) -> Any:
        permit = breaker._generation  # generation first, then state: as in acquire
        try:
            quiet = _w1[_k1] is None and _w2[_k2] is None and _w3[_k3] is None and _w4[_k4] is None
        except KeyError:
            quiet = False
        if quiet and breaker._state is _CLOSED and breaker._simple and not breaker._consecutive:
            next(breaker._request_counter)
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                _after_raise(breaker, permit, exc)
                raise
            if permit == breaker._generation and not breaker._consecutive:
                next(breaker._success_counter)
            else:
                breaker.record(permit, SUCCESS)
            return result
        return breaker.call(fn, *args, **kwargs)

    return guarded


def kept_decorated(
    kept: list[Any],
    fn: Callable[..., Any],
    session_of: Callable[[], str | None],
    look_up: Callable[..., Any],
    settings_holder: Any,
) -> Callable[..., Any]:
    """``fn`` behind the breaker in ``kept[0]``: ``@guard``'s wrapper.

    While the kept breaker is there, not retired (a cleared or pruned registry
    retires it) and no session scope is active, a healthy call takes
    :func:`decorated`'s inline quick path; otherwise ``look_up(*args, **kwargs)``
    asks the registry (and decides whether to keep its answer). The kept breaker
    also holds only while ``settings_holder._settings`` (the settings module,
    passed in: this layer does not import it) is the object ``look_up`` stored in
    ``kept[1]``: replaced settings may group the tool behind an upstream.
    """

    def guarded(*args: Any, **kwargs: Any) -> Any:
        breaker = kept[0]
        if breaker is None or breaker.retired or settings_holder._settings is not kept[1] or session_of() is not None:
            return look_up(*args, **kwargs)
        permit = breaker._generation
        try:
            quiet = _w1[_k1] is None and _w2[_k2] is None and _w3[_k3] is None and _w4[_k4] is None
        except KeyError:
            quiet = False
        if quiet and breaker._state is _CLOSED and breaker._simple and not breaker._consecutive:
            next(breaker._request_counter)
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                _after_raise(breaker, permit, exc)
                raise
            if permit == breaker._generation and not breaker._consecutive:
                next(breaker._success_counter)
            else:
                breaker.record(permit, SUCCESS)
            return result
        return breaker.call(fn, *args, **kwargs)

    return guarded


def _reinit_after_fork() -> None:
    """In a forked child only the forking thread exists: a lock another thread
    held at the fork stays held forever, and probe leases of calls in flight in
    other threads are never given back. Give every breaker a fresh lock and
    free its probe slots."""
    for breaker in list(_ALL_BREAKERS):
        breaker._lock = threading.Lock()
        breaker._probe_leases.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)


def _counter_value(counter: itertools.count) -> int:
    """The next value an ``itertools.count`` would return, i.e. how many it gave."""
    return int(repr(counter)[6:-1])


def _not_loaded(*args: Any) -> Any:  # pragma: no cover - replaced when guard imports
    raise RuntimeError("otel_breaker.guard is not loaded")


# The full call path lives in otel_breaker.guard, which installs it here.
_run_sync: Callable[..., Any] = _not_loaded
_run_async: Callable[..., Any] = _not_loaded
_decorate: Callable[..., Any] = _not_loaded
#: ``_after_raise(breaker, permit, exc)``: classify and record a call that raised.
_after_raise: Callable[[CircuitBreaker, Any, BaseException], None] = _not_loaded
#: ``_rejection(breaker, call)``: the graceful result of a call the open breaker rejected.
_rejection: Callable[[CircuitBreaker, ToolCall | None], dict[str, Any]] = _not_loaded


def install_runner(
    run_sync: Callable[..., Any],
    run_async: Callable[..., Any],
    decorate: Callable[..., Any],
    after_raise: Callable[[CircuitBreaker, Any, BaseException], None],
    rejection: Callable[[CircuitBreaker, ToolCall | None], dict[str, Any]],
) -> None:
    global _run_sync, _run_async, _decorate, _after_raise, _rejection
    _run_sync, _run_async, _decorate, _after_raise, _rejection = run_sync, run_async, decorate, after_raise, rejection


# -- who watches calls -------------------------------------------------------------

#: Where a watcher of calls (a telemetry provider) is registered when one exists:
#: while every slot holds None, nobody watches and :meth:`CircuitBreaker.call`
#: may take its quick path. Telemetry registers its slots with
#: :func:`watch_slots`; the breaker itself never imports OpenTelemetry. Four
#: fixed slots, read inline, because they are read on every call.
_UNUSED: dict[str, Any] = {"": None}
_w1: dict[str, Any] = _UNUSED
_w2: dict[str, Any] = _UNUSED
_w3: dict[str, Any] = _UNUSED
_w4: dict[str, Any] = _UNUSED
_k1 = _k2 = _k3 = _k4 = ""


def watch_slots(*slots: tuple[dict[str, Any], str]) -> None:
    """Register up to four (namespace, name) slots, each holding a watcher when one exists."""
    global _w1, _w2, _w3, _w4, _k1, _k2, _k3, _k4
    if len(slots) > 4:
        raise ValueError("at most four watch slots")
    padded = [*slots, *[(_UNUSED, "")] * (4 - len(slots))]
    (_w1, _k1), (_w2, _k2), (_w3, _k3), (_w4, _k4) = padded


def unwatched() -> bool:
    """True while no watcher is registered in any slot."""
    return _w1.get(_k1) is None and _w2.get(_k2) is None and _w3.get(_k3) is None and _w4.get(_k4) is None
