"""The circuit breaker: closed, open, half-open.

:class:`CircuitBreaker` is the public face of the state machine
(``breaker_core.py``, where every decision is made): its readings (state,
statistics, retry-after, idleness), its configuration and listeners, and the
hand-over of a call to the call path. It never imports OpenTelemetry: telemetry
subscribes to its transitions. The clock is injected (a zero-argument callable
returning monotonic seconds), so every time-based rule is testable without
sleeping. The configuration (``CircuitBreakerConfig``, the presets) lives in
``breaker_config.py``, the shared vocabulary (states, permits, listeners, the
storage interface) in ``breaker_state.py``; both are importable from here.
"""

from __future__ import annotations

import itertools
import os
import threading
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
from otel_breaker.breaker_core import REJECTED_PROBE, StateMachine, _plain  # noqa: F401
from otel_breaker.breaker_state import (  # noqa: F401 - importable from here
    _ALL_BREAKERS,
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
from otel_breaker.classify import FAILURE, IGNORED, SUCCESS  # noqa: F401 - importable from here

_CLOSED = State.CLOSED
_OPEN = State.OPEN
_HALF_OPEN = State.HALF_OPEN


class CircuitBreaker(StateMachine):
    """A per-tool circuit breaker.

    ``call``/``acall`` run a function through it (and it works as a decorator);
    ``try_acquire`` and ``on_success``/``on_failure``/``on_ignored`` are the halves
    for code that runs the call itself. ``storage`` shares its state with other processes
    (see :class:`BreakerStorage`); without one the state lives in this object.
    ``unguarded=True`` makes a breaker that admits and counts every call and never
    moves a state (where a full registry counts the tools it cannot guard).
    """

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
        super().__init__(
            name,
            config,
            clock=clock,
            agent_name=agent_name,
            session_id=session_id,
            storage=storage,
            unguarded=unguarded,
        )
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
        return _call_path.run(self, fn, args, kwargs)

    async def acall(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` (a coroutine function or a plain one) through the breaker."""
        return await _call_path.arun(self, fn, args, kwargs)

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Use the breaker as a decorator on sync and async functions."""
        return _call_path.decorate(self, fn)


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


# The call path (``call_path.py``) runs every call a breaker is handed. It sits above
# this layer, so this is the one place the package imports upward, inside a function
# (the import-linter contracts name it): the first breaker created loads it, so a
# breaker's calls import nothing. A call never waits on the import system, whose
# locks a thread may hold when the process forks.
_call_path: Any = None


def _reach_the_call_path() -> None:
    """Load the call path (once, when the first breaker is created)."""
    global _call_path
    from otel_breaker import call_path

    _call_path = call_path
