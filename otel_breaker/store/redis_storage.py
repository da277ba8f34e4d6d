"""The Redis storage a :class:`~otel_breaker.breaker.CircuitBreaker` delegates to.

The breaker keeps its entry points (``try_acquire``/``on_success``..., manual
control) and counts every call itself; this object runs the shared decisions
against the hash with the store's Lua script and hands each reply back as a
:class:`~otel_breaker.breaker_state.Snapshot`, which the breaker applies to its
own fields. Closed and proven healthy, admission stays local and settling the
outcome is the one round trip of a call; open with a known retry-after, the
breaker rejects locally (:meth:`RedisStorage.may_reject_locally`). Any Redis
failure returns None/False, and the breaker decides in memory.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

from otel_breaker.breaker import REJECTED, REJECTED_PROBE, CircuitBreaker, Snapshot, State

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


class ScriptReply(NamedTuple):
    """What every operation of the script (``redis_script.lua``) answers, in its order."""

    #: The operation's own answer: for ``acquire`` 0 admitted while closed, 1 admitted
    #: pending (the token settles it), 2 a half-open probe, -1 rejected (``state`` says
    #: why); for ``health`` 1 when the check moved the breaker.
    result: int
    #: The probe lease or pending admission this call holds.
    token: int
    #: The shared state (0 closed, 1 open, 2 half-open).
    state: int
    generation: int
    #: Milliseconds until a probe is allowed (-1: held open by hand).
    retry_ms: int
    consecutive: int
    #: 1 when closed-state admission may be decided locally.
    free: int
    version: int
    #: The state before a transition this operation made, or -1.
    changed_from: int
    changed_reason: Any
    #: The shared failure window's calls and failures (-1: not read).
    window_calls: int
    window_failures: int


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
        self.store.forget(breaker)

    def _op(self, op: str) -> str:
        clock = self._now_ms
        return op if clock is None else f"{op}@{int(clock() * 1000)}"

    # -- applying replies ----------------------------------------------------

    def _sync(self, breaker: CircuitBreaker, raw: list[Any], epoch: int) -> ScriptReply:
        """Hand a script reply to the breaker as a snapshot.

        A transition the reply reports is this worker's own (counted and emitted).
        A state the reply shows that this worker did not cause (another worker's
        change, not heard on the change feed: not watching, or not yet) is a
        followed change, told to the follow listeners as the feed would tell it,
        so rejections cached with the old state of a fallback are dropped."""
        store = self.store
        reply = ScriptReply(*raw)
        state = _STATES[reply.state]
        if reply.window_calls >= 0:
            self._window_totals = (reply.window_calls, reply.window_failures)
        self._stale = False
        changed = None
        if reply.changed_from >= 0:
            changed = (_STATES[reply.changed_from], _text(reply.changed_reason))
        local = bool(reply.free) and store.watching and epoch == store.watch_epoch
        snapshot = Snapshot(reply.version, reply.generation, state, reply.retry_ms, reply.consecutive, local, changed)
        if breaker.apply_snapshot(snapshot):
            self.probe_busy = state is _HALF_OPEN and reply.result == -1
        return reply

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
        local = free and self.store.watching
        snapshot = Snapshot(ver, gen, state, retry_ms, consecutive, local, None, not own, True)
        if breaker.apply_snapshot(snapshot):
            self._stale = False  # heard while subscribed: this is the current state
            self.probe_busy = False

    def invalidate(self, breaker: CircuitBreaker) -> None:
        """Local decisions are no longer safe (a feed gap or an outage): ask Redis next time."""
        breaker.distrust_mirror()
        self._stale = True

    def may_reject_locally(self, forced: bool) -> bool:
        """The mirrored open state may reject without a round trip: not after a feed gap,
        and a breaker held open by hand only while changes are watched (else a manual
        close elsewhere would go unseen)."""
        return not self._stale and (not forced or self.store.watching)

    def recent_failure_rate(self, breaker: CircuitBreaker) -> float | None:
        """The shared window's failure ratio; None when Redis is unusable."""
        if self.remote(breaker, "read") is None:
            return None
        calls, failures = self._window_totals or (0, 0)
        return failures / calls if calls else 0.0

    # -- admission and outcomes ------------------------------------------------

    def _admitted(self, breaker: CircuitBreaker, raw: list[Any], epoch: int) -> Permit:
        reply = self._sync(breaker, raw, epoch)
        result = reply.result
        if result == 0:
            return reply.generation
        if result == 2:
            return (reply.generation, reply.token)
        if result == 1:
            permit = _PendingPermit(reply.generation)
            permit.token = reply.token
            return permit
        return REJECTED if reply.state == 1 else REJECTED_PROBE

    def _asked(self) -> int | None:
        """The watch epoch before a round trip, or None when Redis is not to be asked now."""
        store = self.store
        if store.degraded and not store.claim_retry():
            return None
        return store.watch_epoch

    def _failed(self, exc: Exception) -> None:
        self.store.mark_failed(exc)

    def admit(self, breaker: CircuitBreaker) -> Permit | None:
        """Admission by the shared state; None when Redis is unusable."""
        epoch = self._asked()
        if epoch is None:
            return None
        try:
            reply = self.store.run_script(self.keys, self._op("acquire"), self.args)
        except Exception as exc:
            self._failed(exc)
            return None
        self.store.mark_answered()
        return self._admitted(breaker, reply, epoch)

    async def aadmit(self, breaker: CircuitBreaker) -> Permit | None:
        """``admit`` through the store's asyncio client (the same decisions)."""
        epoch = self._asked()
        if epoch is None:
            return None
        try:
            reply = await self.store.arun_script(self.keys, self._op("acquire"), self.args)
        except Exception as exc:
            self._failed(exc)
            return None
        self.store.mark_answered()
        return self._admitted(breaker, reply, epoch)

    @staticmethod
    def _record_args(permit: Permit, outcome: int) -> tuple[Any, ...]:
        if isinstance(permit, tuple):
            return (permit[0], permit[1], outcome, "p")
        return (int(permit), getattr(permit, "token", 0), outcome, "c")

    def settle(self, breaker: CircuitBreaker, permit: Permit, outcome: int) -> bool:
        """Settle in the shared state; False when Redis is unusable."""
        epoch = self._asked()
        if epoch is None:
            return False
        try:
            reply = self.store.run_script(self.keys, self._op("record"), self.args, self._record_args(permit, outcome))
        except Exception as exc:
            self._failed(exc)
            return False
        self.store.mark_answered()
        self._sync(breaker, reply, epoch)
        return True

    async def asettle(self, breaker: CircuitBreaker, permit: Permit, outcome: int) -> bool:
        """``settle`` through the store's asyncio client."""
        epoch = self._asked()
        if epoch is None:
            return False
        try:
            extra = self._record_args(permit, outcome)
            reply = await self.store.arun_script(self.keys, self._op("record"), self.args, extra)
        except Exception as exc:
            self._failed(exc)
            return False
        self.store.mark_answered()
        self._sync(breaker, reply, epoch)
        return True

    # -- reads and manual control ------------------------------------------

    def remote(self, breaker: CircuitBreaker, op: str, *extra: Any) -> ScriptReply | None:
        """Run ``op`` in Redis and mirror the reply; None when Redis is unusable."""
        epoch = self._asked()
        if epoch is None:
            return None
        try:
            reply = self.store.run_script(self.keys, self._op(op), self.args, extra)
        except Exception as exc:
            self._failed(exc)
            return None
        self.store.mark_answered()
        return self._sync(breaker, reply, epoch)

    def refresh(self, breaker: CircuitBreaker) -> bool:
        """Read the shared state into the breaker now (one round-trip)."""
        return self.remote(breaker, "read") is not None

    def force_open(self, breaker: CircuitBreaker, duration: float | None, reason: str = "manual") -> bool:
        milliseconds = -1 if duration is None else int(duration * 1000)
        return self.remote(breaker, "open", milliseconds, reason) is not None

    def force_close(self, breaker: CircuitBreaker) -> bool:
        return self.remote(breaker, "close") is not None

    def reset(self, breaker: CircuitBreaker) -> bool:
        return self.remote(breaker, "reset") is not None

    def health_check_passed(self, breaker: CircuitBreaker) -> bool | None:
        reply = self.remote(breaker, "health")
        return None if reply is None else reply.result == 1
