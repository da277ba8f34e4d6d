"""What the state machine speaks in: states, transitions, permits, listeners, storage.

The vocabulary shared by the machine (``breaker.py``), the stores that hold its
state elsewhere (``store/``) and everything that listens to it. No decisions
live here; they are all in :class:`otel_breaker.breaker.CircuitBreaker`.
"""

from __future__ import annotations

import enum
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from otel_breaker.listeners import (  # noqa: F401 - importable from here, as from the state machine
    FOLLOW_LISTENERS,
    add_follow_listener,
    add_global_listener,
    remove_global_listener,
)
from otel_breaker.loglines import logger

Clock = Callable[[], float]

#: ``try_acquire`` result: the call must not run.
REJECTED = -1
#: ``try_acquire`` result in observe mode: the call runs, but enforce mode would
#: have rejected it, so its outcome must not move the state.
SHADOW = -2

#: What ``try_acquire`` hands out: the generation (closed) or (generation, probe lease)
#: (half-open), or ``REJECTED``/``SHADOW``.
Permit = int | tuple[int, int]


class State(str, enum.Enum):
    """Breaker states; the values are the ``otel_breaker.state`` attribute values."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"

    def __str__(self) -> str:
        return self.value


class StateChange(NamedTuple):
    """One transition, as delivered to listeners."""

    breaker: Any
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


class FailureWindow:
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

#: Every live breaker, so ``reset_all`` reaches breakers held outside a registry (and the
#: fork handler gives each a fresh lock).
ALL_BREAKERS: weakref.WeakSet[Any] = weakref.WeakSet()


#: See :data:`otel_breaker.listeners.FOLLOW_LISTENERS`.
FollowListener = Callable[[Any, State, State], None]


def notify_followed(breaker: Any, from_state: State, to_state: State) -> None:
    """Tell the follow listeners a shared store moved ``breaker``; a failing listener is logged."""
    if from_state is to_state:
        return
    for listener in FOLLOW_LISTENERS:
        try:
            listener(breaker, from_state, to_state)
        except Exception:
            logger.exception("otel-breaker: follow listener %r failed", listener)


def all_breakers() -> list[Any]:
    """Every breaker alive in this process, registered or not."""
    return list(ALL_BREAKERS)


class Snapshot(NamedTuple):
    """The shared state a storage read (a script reply, a change heard on a feed),
    for :meth:`CircuitBreaker.apply_snapshot <otel_breaker.breaker.CircuitBreaker.apply_snapshot>`.

    ``version`` orders snapshots (replies and the feed race): an older one is not
    mirrored, and with ``newer_only`` neither is an equal one. ``retry_ms`` is how
    long an open state lasts (negative: until closed by hand). ``local_admit``: the
    machine may admit closed-state calls without asking the storage. ``changed``
    (from-state, reason) is a transition this process caused (it is counted and
    emitted as this breaker's own); ``follow`` tells the follow listeners about a
    state it shows that this process did not cause."""

    version: int
    generation: int
    state: State
    retry_ms: int
    consecutive: int
    local_admit: bool
    changed: tuple[State, str] | None = None
    follow: bool = True
    newer_only: bool = False


class BreakerStorage(Protocol):
    """Where a breaker's state is shared with other processes (the Redis store).

    Without one (``storage=None``) the state lives in the breaker's own fields,
    with the lock-free closed and open paths. A shared storage decides on the
    shared state and hands each answer back as a :class:`Snapshot`, which the
    breaker applies to its own fields (``stats``, ``state`` and telemetry read one
    place whatever the storage). The breaker counts every call and outcome itself.
    Every method answers None/False when the shared state is unusable: the
    breaker then decides in memory, and a tool call never waits on a broken server.
    """

    #: True when decisions may await an asyncio client (the breaker's ``awaits_store``).
    awaits: bool
    #: Half-open with every probe slot held elsewhere (``retry_after`` is then short, not 0).
    probe_busy: bool

    def configure(self, breaker: Any) -> None:
        """The breaker's configuration changed (and at creation): the shared rules use it."""

    def may_reject_locally(self, forced: bool) -> bool:
        """Whether the mirrored open state may reject without a round trip (``forced``: held open by hand)."""

    def admit(self, breaker: Any) -> Permit | None:
        """Admission by the shared state: a permit or ``REJECTED``; None: decide in memory."""

    async def aadmit(self, breaker: Any) -> Permit | None:
        """``admit`` without blocking the event loop on the server."""

    def settle(self, breaker: Any, permit: Permit, outcome: int) -> bool:
        """Every outcome goes to the shared state (other processes count it); False: settle in memory."""

    async def asettle(self, breaker: Any, permit: Permit, outcome: int) -> bool:
        """``settle`` without blocking the event loop on the server."""

    def refresh(self, breaker: Any) -> bool:
        """Read the shared state into the breaker now (the CLI and the failover tests ask)."""

    def force_open(self, breaker: Any, duration: float | None, reason: str = "manual") -> bool:
        """Open for every process sharing the state: by hand (``manual``), or for a rule one
        worker judged from its own calls (``retry_after``, ``slow_call_rate``)."""

    def force_close(self, breaker: Any) -> bool:
        """Manual close for every process sharing the state."""

    def reset(self, breaker: Any) -> bool:
        """A fresh closed breaker for every process sharing the state."""

    def health_check_passed(self, breaker: Any) -> bool | None:
        """A passing health check moves the shared open state to half-open; None: unusable."""

    def recent_failure_rate(self, breaker: Any) -> float | None:
        """The shared window's failure ratio (every process's calls); None: unusable."""

    def close(self, breaker: Any) -> None:
        """The registry dropped the breaker: stop following the shared state for it."""
