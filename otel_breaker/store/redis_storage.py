"""The Redis storage a :class:`~otel_breaker.breaker.CircuitBreaker` delegates to.

The breaker keeps its entry points (``acquire``/``record``, manual control); this
object runs them against the shared hash with the store's Lua script and mirrors
each reply into the breaker's local fields. Closed and proven healthy, admission
stays local and ``record`` is the one round trip of a call; open with a known
retry-after, calls are rejected locally. Any Redis failure returns None/False,
and the breaker decides with its own in-memory state machine.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from otel_breaker.breaker import (
    REJECTED,
    SHADOW,
    CircuitBreaker,
    State,
    StateChange,
    notify_followed,
)
from otel_breaker.classify import FAILURE, SUCCESS

if TYPE_CHECKING:
    from otel_breaker.store.redis_link import ScriptStore as RedisStore  # the store, as its storage sees it

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

Permit = int | tuple[int, int]


class _PendingPermit(int):
    """A closed-state permit whose outcome the shared breaker waits for (cautious admission)."""

    token: int


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_text = text


class RedisStorage:
    """One breaker's shared state: the hash at ``key`` and what this process knows of it.

    Telemetry and ``stats`` read the breaker's mirrored fields; its lifetime
    counters count this process's calls (exported per process, summed by the backend).
    """

    awaits = True

    def __init__(self, store: RedisStore, key: str, ttl: float = TOOL_TTL) -> None:
        self.store = store
        self.key = key
        self.keys = (key, key + ":leases", key + ":pending")
        self.ttl = ttl
        self.args: tuple[Any, ...] = ()
        #: Version of the shared hash last mirrored (replies and the change feed race).
        self._ver = -1
        #: The change feed had a gap: ask Redis once before rejecting locally again.
        self._stale = False
        #: Half-open and every probe slot taken by other workers.
        self.probe_busy = False
        self._window_totals: tuple[int, int] | None = None
        #: Server time override in milliseconds, for tests only (see :meth:`use_clock`).
        self._now_ms: Any = None

    def __repr__(self) -> str:
        return f"<RedisStorage key={self.key!r}>"

    def use_clock(self, clock: Any) -> None:
        """Run the script's cooldowns, leases and windows on ``clock`` (seconds) instead of
        the server's ``TIME``. For tests only: a reference model drives cooldowns without
        sleeping. Production keeps the server clock, so the workers' clocks (and their skew)
        never take part in a shared decision."""
        self._now_ms = clock

    def configure(self, breaker: CircuitBreaker) -> None:
        """Rebuild the script arguments from the breaker's configuration (they are sent on every call)."""
        c = breaker.config
        lease = c.timeout if c.timeout is not None else DEFAULT_LEASE_SECONDS
        self.args = (
            f"{self.store.origin}@{self.store.channel}",
            max(1, int(self.ttl * 1000)),
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
            1 if self.store.cautious else 0,
            breaker.name,
            breaker.agent_name or "",
            breaker.session_id or "",
        )

    def close(self, breaker: CircuitBreaker) -> None:
        """Stop following shared state changes (the registry calls this when it drops a breaker)."""
        self.store._forget(breaker)

    def _op(self, op: str) -> str:
        clock = self._now_ms
        return op if clock is None else f"{op}@{int(clock() * 1000)}"

    # -- applying replies ----------------------------------------------------

    def _sync(self, breaker: CircuitBreaker, reply: list[Any], epoch: int) -> StateChange | None:
        """Mirror a script reply into the breaker; returns the transition this worker caused.

        A state the reply shows that this worker did not cause (another worker's
        change, not heard on the change feed: not watching, or not yet) is a
        followed change, told to the follow listeners as the feed would tell it,
        so rejections cached with the old state of a fallback are dropped."""
        store = self.store
        state = _STATES[reply[2]]
        with breaker._lock:
            before = breaker._state
            now = breaker._clock()
            change = None
            if reply[8] >= 0:
                change = StateChange(breaker, _STATES[reply[8]], state, _text(reply[9]), now)
                if state is _OPEN:
                    breaker._opened_count += 1
            if reply[10] >= 0:
                self._window_totals = (reply[10], reply[11])
            self._stale = False
            if reply[7] >= self._ver:
                self._mirror(breaker, reply[7], reply[3], state, reply[4], reply[5], now)
                breaker._local_admit = bool(reply[6]) and store.watching and epoch == store._watch_epoch
                self.probe_busy = state is _HALF_OPEN and reply[0] == -1
            after = breaker._state
        if change is None:
            notify_followed(breaker, before, after)
        return change

    def _mirror(
        self, breaker: CircuitBreaker, ver: int, gen: int, state: State, retry_ms: int, consecutive: int, now: float
    ) -> None:
        self._ver = ver
        breaker._generation = gen
        if state is not breaker._state:
            breaker._last_change = now
            breaker._state = state
            breaker._probe_leases.clear()
            breaker._probe_successes = 0
        breaker._consecutive = consecutive
        if state is _OPEN:
            breaker._open_until = _INF if retry_ms < 0 else now + retry_ms / 1000.0

    def follow(
        self,
        breaker: CircuitBreaker,
        ver: int,
        gen: int,
        state: State,
        retry_ms: int,
        consecutive: int,
        free: bool,
        own: bool = False,
    ) -> None:
        """A change heard on the change feed: follow it. Another worker's transition is
        that worker's to count; this process only logs what its breaker now shows.

        ``own``: this store made the change. Its message can arrive before the script's
        reply is applied; the state is mirrored, but the transition is logged once, by
        the reply (as this worker's own), never also as a followed change."""
        with breaker._lock:
            before = breaker._state
            if ver > self._ver:
                self._mirror(breaker, ver, gen, state, retry_ms, consecutive, breaker._clock())
                self._stale = False  # heard while subscribed: this is the current state
                breaker._local_admit = free and self.store.watching
                self.probe_busy = False
            after = breaker._state
        if not own:
            notify_followed(breaker, before, after)

    def invalidate(self, breaker: CircuitBreaker) -> None:
        """Local decisions are no longer safe (a feed gap or an outage): ask Redis next time."""
        breaker._local_admit = False
        self._stale = True

    def recent_failure_rate(self, breaker: CircuitBreaker) -> float | None:
        """The shared window's failure ratio; None when Redis is unusable."""
        if self.remote(breaker, "read") is None:
            return None
        calls, failures = self._window_totals or (0, 0)
        return failures / calls if calls else 0.0

    # -- the two halves of a guarded call ----------------------------------

    def _acquire_local(self, breaker: CircuitBreaker) -> Permit | None:
        """A rejection when no round-trip is needed, else None."""
        if (
            breaker._state is _OPEN
            and not self._stale
            and breaker._clock() < breaker._open_until
            and (breaker._open_until != _INF or self.store.watching)
        ):
            # open with a known retry-after (or forced open while changes are watched): no round-trip
            next(breaker._request_counter)
            next(breaker._rejected_open_counter)
            return SHADOW if breaker._observe else REJECTED
        return None

    def _acquire_reply(self, breaker: CircuitBreaker, reply: list[Any], epoch: int) -> Permit:
        next(breaker._request_counter)
        change = self._sync(breaker, reply, epoch)
        if change is not None:
            breaker._emit(change)
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
            next(breaker._rejected_open_counter)
        else:
            with breaker._lock:
                breaker._rejected_half_open += 1
        return SHADOW if breaker._observe else REJECTED

    def acquire(self, breaker: CircuitBreaker) -> Permit | None:
        """Admission by the shared state; None when Redis is unusable."""
        permit = self._acquire_local(breaker)
        if permit is not None:
            return permit
        store = self.store
        if store.degraded and not store._try_again():
            return None
        epoch = store._watch_epoch
        try:
            reply = store._eval(self.keys, self._op("acquire"), self.args)
        except Exception as exc:
            store._failed(exc)
            return None
        store._answered()
        return self._acquire_reply(breaker, reply, epoch)

    async def aacquire(self, breaker: CircuitBreaker) -> Permit | None:
        """``acquire`` through the store's asyncio client (the same decisions)."""
        permit = self._acquire_local(breaker)
        if permit is not None:
            return permit
        store = self.store
        if store.degraded and not store._try_again():
            return None
        epoch = store._watch_epoch
        try:
            reply = await store._aeval(self.keys, self._op("acquire"), self.args)
        except Exception as exc:
            store._failed(exc)
            return None
        store._answered()
        return self._acquire_reply(breaker, reply, epoch)

    @staticmethod
    def _record_args(permit: Permit, outcome: int) -> tuple[Any, ...]:
        if isinstance(permit, tuple):
            return (permit[0], permit[1], outcome, "p")
        return (int(permit), getattr(permit, "token", 0), outcome, "c")

    def _record_reply(self, breaker: CircuitBreaker, reply: list[Any], outcome: int, epoch: int) -> None:
        if outcome == SUCCESS:
            next(breaker._success_counter)
        else:
            with breaker._lock:
                if outcome == FAILURE:
                    breaker._failures += 1
                else:
                    breaker._ignored += 1
        change = self._sync(breaker, reply, epoch)
        if change is not None:
            breaker._emit(change)

    def record(self, breaker: CircuitBreaker, permit: Permit, outcome: int) -> bool:
        """Record in the shared state; False when Redis is unusable."""
        store = self.store
        if store.degraded and not store._try_again():
            return False
        epoch = store._watch_epoch
        try:
            reply = store._eval(self.keys, self._op("record"), self.args, self._record_args(permit, outcome))
        except Exception as exc:
            store._failed(exc)
            return False
        store._answered()
        self._record_reply(breaker, reply, outcome, epoch)
        return True

    async def arecord(self, breaker: CircuitBreaker, permit: Permit, outcome: int) -> bool:
        """``record`` through the store's asyncio client."""
        store = self.store
        if store.degraded and not store._try_again():
            return False
        epoch = store._watch_epoch
        try:
            reply = await store._aeval(self.keys, self._op("record"), self.args, self._record_args(permit, outcome))
        except Exception as exc:
            store._failed(exc)
            return False
        store._answered()
        self._record_reply(breaker, reply, outcome, epoch)
        return True

    # -- reads and manual control ------------------------------------------

    def remote(self, breaker: CircuitBreaker, op: str, *extra: Any) -> list[Any] | None:
        """Run ``op`` in Redis and mirror the reply; None when Redis is unusable."""
        store = self.store
        if store.degraded and not store._try_again():
            return None
        epoch = store._watch_epoch
        try:
            reply = store._eval(self.keys, self._op(op), self.args, extra)
        except Exception as exc:
            store._failed(exc)
            return None
        store._answered()
        change = self._sync(breaker, reply, epoch)
        if change is not None:
            breaker._emit(change)
        return reply

    def refresh(self, breaker: CircuitBreaker) -> bool:
        """Read the shared state into the breaker now (one round-trip)."""
        return self.remote(breaker, "read") is not None

    def force_open(self, breaker: CircuitBreaker, duration: float | None) -> bool:
        return self.remote(breaker, "open", -1 if duration is None else int(duration * 1000)) is not None

    def force_close(self, breaker: CircuitBreaker) -> bool:
        return self.remote(breaker, "close") is not None

    def reset(self, breaker: CircuitBreaker) -> bool:
        return self.remote(breaker, "reset") is not None

    def health_check_passed(self, breaker: CircuitBreaker) -> bool | None:
        reply = self.remote(breaker, "health")
        return None if reply is None else reply[0] == 1
