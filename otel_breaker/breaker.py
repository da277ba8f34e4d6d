"""The circuit breaker: closed, open, half-open, in one class.

:class:`CircuitBreaker` has the shape of resilience4j's state machine: ``try_acquire``
hands out a *permit* (the generation number, bumped on every transition) and
``on_success``/``on_failure``/``on_ignored`` report the outcome with it. Every decision
is made here, once; the lock-free closed branch is the first lines of ``try_acquire``
and ``on_success``. A permit from an older generation still counts in the statistics
but never moves the state: a slow call admitted before the breaker opened can never
pass as a probe. The class also holds the breaker's readings (state, statistics,
retry-after, idleness), its configuration and listeners, and hands a call over to the
call path.

State lives in the object or behind a :class:`~otel_breaker.breaker_state.BreakerStorage`
(the Redis store), which answers with :class:`~otel_breaker.breaker_state.Snapshot`
values applied by :meth:`CircuitBreaker.apply_snapshot`. The breaker never imports
OpenTelemetry: telemetry subscribes to its transitions. The clock is injected (a
zero-argument callable returning monotonic seconds), so every time-based rule is
testable without sleeping. The configuration (``CircuitBreakerConfig``, the presets)
lives in ``breaker_config.py``, the shared vocabulary (states, permits, listeners, the
storage interface) in ``breaker_state.py``; both are importable from here.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from otel_breaker.breaker_config import (  # noqa: F401 - importable from here
    CONFIG_FIELDS,
    LOOP_ACTIONS,
    LOOP_COUNT_KINDS,
    MODES,
    PRESETS,
    PROBE_LEASE_SECONDS,
    CircuitBreakerConfig,
)
from otel_breaker.breaker_state import (  # noqa: F401 - importable from here
    ALL_BREAKERS,
    REJECTED,
    SHADOW,
    BreakerStats,
    BreakerStorage,
    CircuitOpenError,
    Clock,
    FailureWindow,
    Permit,
    Snapshot,
    State,
    StateChange,
    StateListener,
    add_follow_listener,
    add_global_listener,
    all_breakers,
    notify_followed,
    remove_global_listener,
)
from otel_breaker.classify import FAILURE, IGNORED, SUCCESS
from otel_breaker.listeners import GLOBAL_LISTENERS
from otel_breaker.loglines import logger

_CLOSED = State.CLOSED
_OPEN = State.OPEN
_HALF_OPEN = State.HALF_OPEN
_INF = math.inf

#: A storage's answer to ``admit``: rejected while half-open (every probe slot taken).
REJECTED_PROBE = -3


def _plain(config: CircuitBreakerConfig) -> bool:
    """Whether a call needs no clock and no look at a success: no per-call timeout, no
    slow-call rule, no result validator, and a loop guard that counts only the model's
    mistakes (which only an adapter reports). The call path then takes the short form of
    its steps (``call_path.py``). Retries below the model keep it: they follow a failure,
    which goes on through the whole sequence (their window then starts as the first
    attempt ends)."""
    return (
        config.timeout is None
        and config.slow_call_seconds is None
        and config.is_failure_result is None
        and set(config.loop_count) <= {"mistakes"}
    )


class CircuitBreaker:
    """A per-tool circuit breaker.

    ``call``/``acall`` run a function through it (and it works as a decorator);
    ``try_acquire`` and ``on_success``/``on_failure``/``on_ignored`` are the halves
    for code that runs the call itself. ``storage`` shares its state with other processes
    (see :class:`BreakerStorage`); without one the state lives in this object.
    ``unguarded=True`` makes a breaker that admits and counts every call and never
    moves a state (where a full registry counts the tools it cannot guard).
    """

    #: Where the tool runs (an MCP server), set by the registry for tools that have one.
    source: str | None = None
    #: The code behind a local tool (``module:qualname``), set by the registry when known.
    origin: str | None = None
    #: True when decisions may wait on a store with an asyncio client (``atry_acquire``).
    awaits_store = False

    def __init__(
        self,
        name: str,
        config: CircuitBreakerConfig | None = None,
        *,
        clock: Clock | None = None,
        agent_name: str | None = None,
        session_id: str | None = None,
        storage: BreakerStorage | None = None,
        unguarded: bool = False,
    ) -> None:
        self.name = name
        self.agent_name = agent_name
        self.session_id = session_id
        # Read by everyone, written only by the machine (``configure``), plain attributes
        # because the call path reads them on every call:
        #: how this breaker decides;
        self.config = config or CircuitBreakerConfig()
        #: monotonic seconds (injected for tests and simulations);
        self.clock: Clock = clock or time.monotonic
        self._lock = threading.Lock()
        self._storage = storage
        self._unguarded = unguarded
        # Closed-state admission needs no storage round trip: always in memory; with a
        # shared storage only while its mirror is known closed, proven healthy and watched.
        self._local_admit = storage is None
        #: Version of the shared state last applied (see :class:`Snapshot`).
        self._shared_version = -1
        if storage is not None:
            self.awaits_store = storage.awaits
        self._listeners: list[StateListener] = []
        self._state = _CLOSED
        #: bumped on every transition: a permit is the generation it was handed out in.
        self.generation = 0
        self._consecutive = 0
        self._open_until = 0.0
        self._reopenings = 0
        self._probe_leases: dict[int, float] = {}
        self._next_lease = 0
        self._probe_successes = 0
        rate = self.config.failure_rate_threshold
        self._window = FailureWindow(self.config.monitor_window) if rate and not unguarded else None
        #: Calls and slow calls over ``monitor_window``, when ``slow_call_seconds`` is set.
        self._slow_window: FailureWindow | None = None
        #: A call needs no clock and no look at its result (see :func:`_plain`).
        self.plain = _plain(self.config)
        # Lifetime counters: monotonic, read by telemetry at collection time.
        # Requests and successes are counted on the lock-free closed-state path
        # with itertools.count, whose next() is atomic; the rest under the lock.
        self._request_counter = itertools.count()
        self._success_counter = itertools.count()
        self._failures = 0
        self._ignored = 0
        self._rejected_open_counter = itertools.count()
        self._rejected_half_open = 0
        self._observe = self.config.mode == "observe"
        self._opened_count = 0
        self._last_change: float | None = None
        # ``stats`` reports counts since the last reset by subtracting this.
        self._baseline = (0, 0, 0, 0, 0, 0)
        #: Set when a registry pruned this breaker and folded its counts away.
        self.retired = False
        # Per-breaker caches of the layers above, each owned and typed by its module:
        #: telemetry: attribute sets of duration records, by ``error.type``.
        self.telemetry_cache: Any = None
        #: the call path: the ToolCall of calls made without one (``breaker.call``, decorators).
        self.call_cache: Any = None
        #: rejection: the graceful result of a rejection while it stays true.
        self.rejection_cache: Any = None
        #: telemetry: the tool span's name and fixed attributes.
        self.span_cache: Any = None
        #: retry_policy: the retries made over the budget's window (made on the first retry).
        self.retry_budget: Any = None
        if storage is not None:
            storage.configure(self)
        ALL_BREAKERS.add(self)
        if _call_path is None:  # the first breaker: the call path loads now, never during a call
            _reach_the_call_path()

    # -- introspection ---------------------------------------------------

    def __repr__(self) -> str:
        shared = "" if self._storage is None else f" {self._storage!r}"
        return f"<CircuitBreaker {self.name!r} {self._state.value}{shared}>"

    @property
    def storage(self) -> BreakerStorage | None:
        """The shared storage this breaker delegates to; None when its state is in memory."""
        return self._storage

    @property
    def state(self) -> State:
        """The current state. Reading it past an open breaker's cooldown moves
        the breaker to half-open (ready for a probe), so dashboards never show
        an idle tool as open after its cooldown."""
        state = self._state
        if state is _OPEN and self.clock() >= self._open_until:
            with self._lock:
                change = None
                if self._state is _OPEN and self.clock() >= self._open_until:
                    change = self._transition(_HALF_OPEN, "cooldown_elapsed", self.clock())
                state = self._state
            if change is not None:
                self._emit(change)
        return state

    @property
    def shared_version(self) -> int:
        """The version of the shared state last applied (-1: none, or no storage)."""
        return self._shared_version

    @property
    def retry_after(self) -> float:
        """Seconds until a probe is allowed: 0 when closed or half-open with a
        free probe slot, ``inf`` while forced open."""
        with self._lock:
            return self._retry_after_locked(self.clock())

    def peek_retry_after(self) -> float:
        """``retry_after`` without taking the lock, for the rejection hot path
        (a value a moment stale is fine there)."""
        return self._retry_after_locked(self.clock())

    def _retry_after_locked(self, now: float) -> float:
        if self._state is _OPEN:
            return max(0.0, self._open_until - now)
        if self._state is _HALF_OPEN and (
            len(self._probe_leases) >= self.config.half_open_max_calls
            or (self._storage is not None and self._storage.probe_busy)
        ):
            return min(1.0, self.config.recovery_timeout)
        return 0.0

    def peek_state(self) -> State:
        """The state as stored, without applying an elapsed cooldown (hot paths read it)."""
        return self._state

    @property
    def requests(self) -> int:
        """Calls asked for since the breaker was made (lifetime, never reset)."""
        return _counter_value(self._request_counter)

    _requests = requests

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

    def is_idle(self) -> bool:
        """Whether a new breaker would decide exactly as this one does: closed, no
        failure streak, no failures in its window and no call in flight. A registry
        at its cap evicts only idle breakers."""
        requests = self.requests  # first: a call admitted after this read cannot make it look idle
        if self._state is not _CLOSED or self._consecutive:
            return False
        window = self._window
        if window is not None and window.totals(self.clock())[1]:
            return False
        return requests == sum(self.lifetime_counts())

    def recent_failure_rate(self) -> float | None:
        """Failure ratio over ``monitor_window`` when a rate threshold is configured."""
        if self._storage is not None and self.config.failure_rate_threshold:
            rate = self._storage.recent_failure_rate(self)
            if rate is not None:
                return rate
        if self._window is None:
            return None
        with self._lock:
            calls, failures = self._window.totals(self.clock())
        return failures / calls if calls else 0.0

    # -- configuration and listeners -------------------------------------

    def configure(self, config: CircuitBreakerConfig) -> None:
        """Apply a new configuration; the current state is kept."""
        with self._lock:
            self.config = config
            self._observe = config.mode == "observe"
            if config.failure_rate_threshold and self._window is None and not self._unguarded:
                self._window = FailureWindow(config.monitor_window)
            elif not config.failure_rate_threshold:
                self._window = None
        self.plain = _plain(config)
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

    def on_state_change(self, callback: StateListener) -> StateListener:
        """Call ``callback(change)`` after every transition of this breaker.

        Returns the callback, so it can be used as a decorator.
        """
        self._listeners.append(callback)
        return callback

    # -- running calls: the call path's ------------------------------------------

    def call(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` through the breaker (the call path, as every guarded call)."""
        return _call_path.drive(self, fn, args, kwargs)

    async def acall(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` (a coroutine function or a plain one) through the breaker."""
        return await _call_path.adrive(self, fn, args, kwargs)

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Use the breaker as a decorator on sync and async functions."""
        return _call_path.decorate(self, fn)

    # -- the state machine: admission and outcomes -----------------------------

    def try_acquire(self, ask: bool = True) -> Permit:
        """Ask to run one call.

        Returns a permit to pass to :meth:`on_success`/:meth:`on_failure`/
        :meth:`on_ignored`, or ``REJECTED`` (the call must not run), or ``SHADOW``
        in observe mode for a call enforce mode would have rejected. With
        ``ask=False`` a storage is not asked: None then means the storage must be
        (:meth:`atry_acquire` awaits it).
        """
        permit = self.generation  # generation first, then state
        state = self._state
        if state is _CLOSED and self._local_admit:
            # Lock-free: a transition racing with this read leaves ``permit`` at
            # the older generation, whose outcome then only counts in stats.
            next(self._request_counter)
            return permit
        storage = self._storage
        if state is _OPEN:
            until = self._open_until
            if self.clock() < until and (storage is None or storage.may_reject_locally(until == _INF)):
                # Open, cooldown running (and, with a storage, a mirror it trusts):
                # rejected without the lock or a round trip.
                next(self._request_counter)
                next(self._rejected_open_counter)
                return SHADOW if self._observe else REJECTED
        if storage is not None:
            if not ask:
                return None  # type: ignore[return-value]
            shared = storage.admit(self)
            if shared is not None:
                return self._count_admission(shared)
        return self._acquire_locked()

    async def atry_acquire(self) -> Permit:
        """``try_acquire`` that awaits a shared storage's asyncio client instead of blocking."""
        permit = self.try_acquire(not self.awaits_store)
        if permit is not None:
            return permit
        shared = await self._storage.aadmit(self)  # type: ignore[union-attr]
        if shared is not None:
            return self._count_admission(shared)
        return self._acquire_locked()

    def _count_admission(self, permit: Permit) -> Permit:
        """Count a storage's admission (applied to this breaker already)."""
        next(self._request_counter)
        if permit == REJECTED:
            next(self._rejected_open_counter)
        elif permit == REJECTED_PROBE:
            with self._lock:
                self._rejected_half_open += 1
        else:
            return permit
        return SHADOW if self._observe else REJECTED

    def _acquire_locked(self) -> Permit:
        next(self._request_counter)
        with self._lock:
            permit, change = self._acquire_slow()
        if change is not None:
            self._emit(change)
        return permit

    def _acquire_slow(self) -> tuple[int | tuple[int, int], StateChange | None]:
        """Admission under the lock, from the state found under the lock: the
        state read without it may be stale (the breaker may have closed since)."""
        now = self.clock()
        change = None
        state = self._state
        if state is _CLOSED:
            return self.generation, None
        if state is _OPEN:
            if now < self._open_until:
                next(self._rejected_open_counter)
                return (SHADOW if self._observe else REJECTED), None
            change = self._transition(_HALF_OPEN, "cooldown_elapsed", now)
        # half-open: hand out probe leases; reclaim leases of probes that hung
        leases = self._probe_leases
        timeout = self.config.timeout
        lease_limit = PROBE_LEASE_SECONDS if timeout is None else timeout
        if leases:
            for lease, started in list(leases.items()):
                if now - started > lease_limit:
                    del leases[lease]
        if len(leases) < self.config.half_open_max_calls:
            self._next_lease += 1
            leases[self._next_lease] = now
            return (self.generation, self._next_lease), change
        self._rejected_half_open += 1
        return (SHADOW if self._observe else REJECTED), change

    def on_success(self, permit: Permit) -> None:
        """The call ``permit`` admitted succeeded."""
        if permit == self.generation and self._window is None and not self._consecutive and self._storage is None:
            # Closed, current generation, no failure streak to clear: the common
            # case needs no lock. (A failure racing with it takes the lock and
            # reads as having happened after this success.)
            next(self._success_counter)
            return
        self._settle(permit, SUCCESS)

    def on_failure(self, permit: Permit) -> None:
        """The call ``permit`` admitted failed (it counts toward opening)."""
        self._settle(permit, FAILURE)

    def on_ignored(self, permit: Permit) -> None:
        """The call ``permit`` admitted ended in a way that says nothing of the tool's health."""
        self._settle(permit, IGNORED)

    def on_outcome(self, permit: Permit, outcome: int) -> None:
        """Report ``outcome`` (``SUCCESS``/``FAILURE``/``IGNORED``) of an admitted call."""
        if outcome == SUCCESS:
            self.on_success(permit)
        else:
            self._settle(permit, outcome)

    async def aon_outcome(self, permit: Permit, outcome: int) -> None:
        """``on_outcome`` that awaits a shared storage's asyncio client instead of blocking."""
        storage = self._storage
        if storage is None or not self.awaits_store:
            self.on_outcome(permit, outcome)
        elif await storage.asettle(self, permit, outcome):
            self._count_outcome(outcome)
        else:
            self._settle_locked(permit, outcome)

    def observe(self, outcome: int) -> None:
        """Count a call that already ran, learned after the fact (a foreign tool
        span): its admission and its outcome together, so the breaker's books
        balance (it can become idle and be evicted like any other). In the closed
        state the outcome counts toward opening; while open or half-open it only
        updates statistics (it was no probe)."""
        storage = self._storage
        if storage is not None:
            storage.refresh(self)  # the shared generation and state: the outcome is judged on them
        permit = self.generation if self.state is _CLOSED else SHADOW
        next(self._request_counter)
        self.on_outcome(permit, outcome)

    def _settle(self, permit: Permit, outcome: int) -> None:
        storage = self._storage
        if storage is not None and storage.settle(self, permit, outcome):
            self._count_outcome(outcome)
            return
        self._settle_locked(permit, outcome)

    def _count_outcome(self, outcome: int) -> None:
        """Count an outcome a storage decided on (this process's calls, for telemetry)."""
        if outcome == SUCCESS:
            next(self._success_counter)
            return
        with self._lock:
            if outcome == FAILURE:
                self._failures += 1
            else:
                self._ignored += 1

    def _settle_locked(self, permit: Permit, outcome: int) -> None:
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
        if self._unguarded:
            return None  # counted, never judged: the overflow of a full registry
        if state is not _CLOSED and outcome != IGNORED:
            # Outside the closed state the streak decides nothing (closing clears it), so it
            # stays what it is shown as: the failures since the last success.
            self._consecutive = 0 if outcome == SUCCESS else self._consecutive + 1
        if isinstance(permit, tuple):
            generation, lease = permit
            if state is not _HALF_OPEN or generation != self.generation:
                return None
            if self._probe_leases.pop(lease, None) is None:
                return None  # the lease expired: a late answer is not a probe result
            if outcome == SUCCESS:
                self._probe_successes += 1
                if self._probe_successes >= self.config.success_threshold:
                    return self._transition(_CLOSED, "probe_succeeded", self.clock())
            elif outcome == FAILURE:
                self._reopenings += 1
                return self._open(self.clock(), "probe_failed")
            return None
        if permit != self.generation or state is not _CLOSED or outcome == IGNORED:
            return None
        if outcome == SUCCESS:
            self._consecutive = 0
            if self._window is not None:
                self._window.add(self.clock(), False)
            return None
        now = self.clock()
        self._consecutive += 1
        if self._consecutive >= self.config.failure_threshold:
            return self._open(now, f"consecutive_failures={self._consecutive}")
        window = self._window
        if window is not None:
            window.add(now, True)
            calls, failures = window.totals(now)
            rate = failures / calls
            if calls >= self.config.minimum_calls and rate >= self.config.failure_rate_threshold:
                return self._open(now, f"failure_rate={rate:.2f}")
        return None

    # -- shared state ------------------------------------------------------------

    def apply_snapshot(self, snapshot: Snapshot) -> bool:
        """Take the shared state a storage read (see :class:`Snapshot`). Returns
        whether it was mirrored (False: an older version than the one held)."""
        with self._lock:
            before = self._state
            now = self.clock()
            change = None
            if snapshot.changed is not None:
                change = StateChange(self, snapshot.changed[0], snapshot.state, snapshot.changed[1], now)
                if snapshot.state is _OPEN:
                    self._opened_count += 1
            held = self._shared_version
            applied = snapshot.version > held or (snapshot.version == held and not snapshot.newer_only)
            if applied:
                self._shared_version = snapshot.version
                self.generation = snapshot.generation
                state = snapshot.state
                if state is not self._state:
                    self._last_change = now
                    self._state = state
                    self._probe_leases.clear()
                    self._probe_successes = 0
                self._consecutive = snapshot.consecutive
                if state is _OPEN:
                    self._open_until = _INF if snapshot.retry_ms < 0 else now + snapshot.retry_ms / 1000.0
                self._local_admit = snapshot.local_admit
            after = self._state
        if change is not None:
            self._emit(change)
        elif snapshot.follow:
            notify_followed(self, before, after)
        return applied

    def distrust_mirror(self) -> None:
        """The shared state may have moved unseen (a feed gap, an outage): ask the storage next time."""
        self._local_admit = False

    # -- transitions -------------------------------------------------------

    def _open(self, now: float, reason: str, until: float | None = None) -> StateChange | None:
        self._open_until = now + self.config.cooldown(self._reopenings) if until is None else until
        self._opened_count += 1
        return self._transition(_OPEN, reason, now)

    def _transition(self, to: State, reason: str, now: float) -> StateChange | None:
        """Move to ``to`` (lock held). Returns the change to emit after unlocking."""
        previous = self._state
        self._state = to
        self.generation += 1
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
        for listener in (*self._listeners, *GLOBAL_LISTENERS):
            try:
                listener(change)
            except Exception:
                logger.exception("otel-breaker: state listener %r failed", listener)

    def _change(self, apply: Callable[[float], StateChange | None]) -> None:
        with self._lock:
            change = apply(self.clock())
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
        config = self.config
        threshold = config.slow_call_seconds
        if threshold is None or self._state is not _CLOSED:
            return
        rate_limit = 1.0 if config.slow_call_rate is None else config.slow_call_rate
        shared = self._storage
        tripped: list[bool] = []

        def apply(now: float) -> StateChange | None:
            if self._state is not _CLOSED:
                return None
            window = self._slow_window
            if window is None:
                window = self._slow_window = FailureWindow(config.monitor_window)
            window.add(now, seconds > threshold)
            calls, slow = window.totals(now)
            rate = slow / calls if calls else 0.0
            if calls >= config.minimum_calls and rate >= rate_limit:
                if shared is not None:  # each worker judges its own calls; the opening is everyone's
                    tripped.append(True)
                    window.clear()
                    return None
                return self._open(now, f"slow_call_rate={rate:.2f}")
            return None

        self._change(apply)
        if tripped and not shared.force_open(self, config.cooldown(self._reopenings), "slow_call_rate"):  # type: ignore[union-attr]
            self._change(lambda now: self._open(now, "slow_call_rate") if self._state is _CLOSED else None)

    def open_for(self, seconds: float, reason: str = "retry_after") -> float:
        """Open now for ``seconds`` (a service's retry hint), capped at ``max_recovery_timeout``.

        The service knows when it will answer again, so its hint replaces the
        cooldown (a half-open probe waits for it) unless the breaker is held open
        by hand. Returns the seconds applied (0 when ``seconds`` is not positive).
        """
        try:
            duration = min(float(seconds), self.config.max_recovery_timeout)
        except (TypeError, ValueError):
            return 0.0
        if not duration > 0:  # also NaN
            return 0.0
        if self._storage is not None and self._storage.force_open(self, duration, "retry_after"):
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


def _reinit_after_fork() -> None:
    """In a forked child only the forking thread exists: a lock another thread
    held at the fork stays held forever, and probe leases of calls in flight in
    other threads are never given back. Give every breaker a fresh lock and
    free its probe slots."""
    for breaker in list(ALL_BREAKERS):
        breaker._lock = threading.Lock()
        breaker._probe_leases.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)


def _counter_value(counter: itertools.count) -> int:
    """The next value an ``itertools.count`` would return, i.e. how many it gave."""
    return int(repr(counter)[6:-1])


# The call path (``call_path.py``) runs every call a breaker is handed. It sits above
# this layer, so this is the one place the package imports upward, inside a function
# (the import-linter contracts name it): the first breaker created loads it, so a
# breaker's calls import nothing. A call never waits on the import system, whose
# locks a thread may hold when the process forks.
_call_path: Any = None


def _reach_the_call_path() -> None:
    """Load the call path (once, when the first breaker is created): its ``DIRECT``
    path drives the calls made on a breaker itself."""
    global _call_path
    from otel_breaker.call_path import DIRECT

    _call_path = DIRECT
