"""A breaker whose state lives in Redis: the local fields mirror the last script reply.

Closed and proven healthy, ``acquire`` is local and ``record`` is the one round
trip of a call; open with a known retry-after, calls are rejected locally. Any
Redis failure hands the decision to the local state machine (the base class).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from otel_breaker.breaker import (
    REJECTED,
    SHADOW,
    CircuitBreaker,
    CircuitBreakerConfig,
    Clock,
    State,
    StateChange,
    notify_followed,
)
from otel_breaker.classify import FAILURE, SUCCESS

if TYPE_CHECKING:
    from otel_breaker.store.redis_store import RedisStore

#: A probe lease lives this long when the breaker has no ``timeout``.
DEFAULT_LEASE_SECONDS = 60.0
#: Idle expiry of breaker keys, in seconds: by tool, per agent, per session.
TOOL_TTL = 30 * 86400.0
AGENT_TTL = 7 * 86400.0
SESSION_TTL = 3600.0

STATES = (State.CLOSED, State.OPEN, State.HALF_OPEN)
_STATES = STATES
_CLOSED = State.CLOSED
_OPEN = State.OPEN
_HALF_OPEN = State.HALF_OPEN
_INF = math.inf


class _PendingPermit(int):
    """A closed-state permit whose outcome the shared breaker waits for (cautious admission)."""

    token: int


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_text = text


class RedisCircuitBreaker(CircuitBreaker):
    """A breaker whose state lives in Redis; the local fields mirror the last reply.

    Telemetry and ``stats`` read the mirrored fields; lifetime counters count
    this process's calls (exported per process, summed by the backend).
    """

    awaits_store = True
    quick_path = False

    def __init__(
        self,
        store: RedisStore,
        key: str,
        name: str,
        config: CircuitBreakerConfig | None = None,
        *,
        clock: Clock | None = None,
        agent_name: str | None = None,
        session_id: str | None = None,
        ttl: float = TOOL_TTL,
    ) -> None:
        super().__init__(name, config, clock=clock, agent_name=agent_name, session_id=session_id)
        self._store = store
        self.key = key
        self._keys = (key, key + ":leases", key + ":pending")
        self._ttl = ttl
        self._ver = -1
        # Shared state known closed, proven healthy, and watched for changes:
        # acquire needs no round-trip.
        self._free = False
        # The change feed had a gap: ask Redis once before rejecting locally again.
        self._stale = False
        self._probe_busy = False
        self._window_totals: tuple[int, int] | None = None
        self._args = self._script_args()

    @classmethod
    def detached(cls, store: RedisStore, key: str, tool: str, agent: str, session: str) -> RedisCircuitBreaker:
        """A breaker for the key ``key`` that the store does not follow (manual control from the CLI)."""
        breaker = cls.__new__(cls)
        CircuitBreaker.__init__(breaker, tool or key, None, agent_name=agent or None, session_id=session or None)
        breaker._store = store
        breaker.key = key
        breaker._keys = (key, key + ":leases", key + ":pending")
        breaker._ttl = SESSION_TTL if session else (AGENT_TTL if agent else TOOL_TTL)
        breaker._ver = -1
        breaker._free = False
        breaker._stale = False
        breaker._probe_busy = False
        breaker._window_totals = None
        breaker._args = breaker._script_args()
        return breaker

    def __repr__(self) -> str:
        return f"<RedisCircuitBreaker {self.name!r} {self._state.value} key={self.key!r}>"

    @property
    def store(self) -> RedisStore:
        return self._store

    def _script_args(self) -> tuple[Any, ...]:
        c = self._config
        lease = c.timeout if c.timeout is not None else DEFAULT_LEASE_SECONDS
        return (
            self._store.channel,
            max(1, int(self._ttl * 1000)),
            c.failure_threshold,
            c.success_threshold,
            c.half_open_max_calls,
            max(1, int(lease * 1000)),
            int(c.recovery_timeout * 1000),
            repr(float(c.backoff_multiplier)),
            int(c.max_recovery_timeout * 1000),
            repr(float(c.failure_rate_threshold or 0.0)),
            c.minimum_calls,
            max(10, int(c.monitor_window * 1000)),
            1 if self._store.cautious else 0,
            self.name,
            self.agent_name or "",
            self.session_id or "",
        )

    def configure(self, config: CircuitBreakerConfig) -> None:
        super().configure(config)
        self._args = self._script_args()

    def close(self) -> None:
        """Stop following shared state changes (the registry calls this when it drops a breaker)."""
        self._store._forget(self)

    # -- applying replies ----------------------------------------------------

    def _sync(self, reply: list[Any], epoch: int) -> StateChange | None:
        """Mirror a script reply locally; returns the transition this worker caused."""
        store = self._store
        state = _STATES[reply[2]]
        with self._lock:
            now = self._clock()
            change = None
            if reply[8] >= 0:
                change = StateChange(self, _STATES[reply[8]], state, _text(reply[9]), now)
                if state is _OPEN:
                    self._opened_count += 1
            if reply[10] >= 0:
                self._window_totals = (reply[10], reply[11])
            self._stale = False
            if reply[7] >= self._ver:
                self._mirror(reply[7], reply[3], state, reply[4], reply[5], now)
                self._free = bool(reply[6]) and store.watching and epoch == store._watch_epoch
                self._probe_busy = state is _HALF_OPEN and reply[0] == -1
        return change

    def _mirror(self, ver: int, gen: int, state: State, retry_ms: int, consecutive: int, now: float) -> None:
        self._ver = ver
        self._generation = gen
        if state is not self._state:
            self._last_change = now
            self._state = state
            self._probe_leases.clear()
            self._probe_successes = 0
        self._consecutive = consecutive
        if state is _OPEN:
            self._open_until = _INF if retry_ms < 0 else now + retry_ms / 1000.0

    def _on_published(self, ver: int, gen: int, state: State, retry_ms: int, consecutive: int, free: bool) -> None:
        """Another worker changed the shared state: follow it. The transition is that
        worker's to count; this process only logs what its breaker now shows."""
        with self._lock:
            before = self._state
            if ver > self._ver:
                self._mirror(ver, gen, state, retry_ms, consecutive, self._clock())
                self._stale = False  # heard while subscribed: this is the current state
                self._free = free and self._store.watching
                self._probe_busy = False
            after = self._state
        notify_followed(self, before, after)

    def _retry_after_locked(self, now: float) -> float:
        if self._state is _HALF_OPEN and self._probe_busy:
            return min(1.0, self._config.recovery_timeout)
        return super()._retry_after_locked(now)

    def recent_failure_rate(self) -> float | None:
        if not self._config.failure_rate_threshold:
            return None
        reply = self._remote("read")
        if reply is None:
            return super().recent_failure_rate()
        calls, failures = self._window_totals or (0, 0)
        return failures / calls if calls else 0.0

    # -- the two halves of a guarded call ----------------------------------

    def _acquire_local(self) -> int | tuple[int, int] | None:
        """The permit when no round-trip is needed, else None."""
        if self._free and self._state is _CLOSED:
            next(self._request_counter)
            return self._generation
        if (
            self._state is _OPEN
            and not self._stale
            and self._clock() < self._open_until
            and (self._open_until != _INF or self._store.watching)
        ):
            # open with a known retry-after (or forced open while changes are watched): no round-trip
            next(self._request_counter)
            next(self._rejected_open_counter)
            return SHADOW if self._observe else REJECTED
        return None

    def _acquire_reply(self, reply: list[Any], epoch: int) -> int | tuple[int, int]:
        next(self._request_counter)
        change = self._sync(reply, epoch)
        if change is not None:
            self._emit(change)
        result = reply[0]
        if result == 0:
            return reply[3]
        if result == 2:
            return (reply[3], reply[1])
        if result == 1:
            permit = _PendingPermit(reply[3])
            permit.token = reply[1]
            return permit
        if reply[2] == 1:
            next(self._rejected_open_counter)
        else:
            with self._lock:
                self._rejected_half_open += 1
        return SHADOW if self._observe else REJECTED

    def acquire(self) -> int | tuple[int, int]:
        permit = self._acquire_local()
        if permit is not None:
            return permit
        store = self._store
        if store.degraded and not store._try_again():
            return super().acquire()
        epoch = store._watch_epoch
        try:
            reply = store._eval(self._keys, "acquire", self._args)
        except Exception as exc:
            store._failed(exc)
            return super().acquire()
        store._answered()
        return self._acquire_reply(reply, epoch)

    async def aacquire(self) -> int | tuple[int, int]:
        """``acquire`` through the store's asyncio client (the same decisions)."""
        permit = self._acquire_local()
        if permit is not None:
            return permit
        store = self._store
        if store.degraded and not store._try_again():
            return super().acquire()
        epoch = store._watch_epoch
        try:
            reply = await store._aeval(self._keys, "acquire", self._args)
        except Exception as exc:
            store._failed(exc)
            return super().acquire()
        store._answered()
        return self._acquire_reply(reply, epoch)

    @staticmethod
    def _record_args(permit: int | tuple[int, int], outcome: int) -> tuple[Any, ...]:
        if isinstance(permit, tuple):
            return (permit[0], permit[1], outcome, "p")
        return (int(permit), getattr(permit, "token", 0), outcome, "c")

    def _record_reply(self, reply: list[Any], outcome: int, epoch: int) -> None:
        if outcome == SUCCESS:
            next(self._success_counter)
        else:
            with self._lock:
                if outcome == FAILURE:
                    self._failures += 1
                else:
                    self._ignored += 1
        change = self._sync(reply, epoch)
        if change is not None:
            self._emit(change)

    def record(self, permit: int | tuple[int, int], outcome: int) -> None:
        store = self._store
        if store.degraded and not store._try_again():
            return super().record(permit, outcome)
        epoch = store._watch_epoch
        try:
            reply = store._eval(self._keys, "record", self._args, self._record_args(permit, outcome))
        except Exception as exc:
            store._failed(exc)
            return super().record(permit, outcome)
        store._answered()
        self._record_reply(reply, outcome, epoch)

    async def arecord(self, permit: int | tuple[int, int], outcome: int) -> None:
        """``record`` through the store's asyncio client."""
        store = self._store
        if store.degraded and not store._try_again():
            return super().record(permit, outcome)
        epoch = store._watch_epoch
        try:
            reply = await store._aeval(self._keys, "record", self._args, self._record_args(permit, outcome))
        except Exception as exc:
            store._failed(exc)
            return super().record(permit, outcome)
        store._answered()
        self._record_reply(reply, outcome, epoch)

    # -- manual control ----------------------------------------------------

    def _remote(self, op: str, *extra: Any) -> list[Any] | None:
        """Run ``op`` in Redis and mirror the reply; None when Redis is unusable."""
        store = self._store
        if store.degraded and not store._try_again():
            return None
        epoch = store._watch_epoch
        try:
            reply = store._eval(self._keys, op, self._args, extra)
        except Exception as exc:
            store._failed(exc)
            return None
        store._answered()
        change = self._sync(reply, epoch)
        if change is not None:
            self._emit(change)
        return reply

    def refresh(self) -> State:
        """Read the shared state now (one round-trip) and return it."""
        self._remote("read")
        return self._state

    def force_open(self, duration: float | None = None) -> None:
        if self._remote("open", -1 if duration is None else int(duration * 1000)) is None:
            CircuitBreaker.force_open(self, duration)

    def force_close(self) -> None:
        if self._remote("close") is None:
            CircuitBreaker.force_close(self)

    def reset(self) -> None:
        with self._lock:
            self._baseline = (
                self._successes,
                self._failures,
                self._ignored,
                self._requests,
                self._rejected_open + self._rejected_half_open,
                self._opened_count,
            )
        if self._remote("reset") is None:
            CircuitBreaker.reset(self)

    def health_check_passed(self) -> bool:
        reply = self._remote("health")
        if reply is None:
            return CircuitBreaker.health_check_passed(self)
        return reply[0] == 1
