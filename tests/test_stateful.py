"""Random sequences of calls, outcomes, clock moves and held probes, checked
against a small independent model of the state machine.

The machine runs once per way a call reaches a breaker, sync and async: the
halves (``acquire``/``record``), ``breaker.call``/``acall``, ``@breaker``,
``@guard``, ``Guard.call``/``acall``, fallback routing and the call path's
``observe`` (a call learned after the fact), each with the state in memory and
in Redis (when one answers on 127.0.0.1:6379), so no entrance and no storage can
drift from the model. Held probes (calls still in flight) always use
``acquire``/``record`` on the same breaker.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from otel_breaker import CircuitBreaker, CircuitBreakerConfig, State, guard
from otel_breaker.breaker import PROBE_LEASE_SECONDS, REJECTED
from otel_breaker.call_path import CallPath
from otel_breaker.classify import FAILURE, IGNORED, SUCCESS, ApprovalDeniedError
from otel_breaker.fallback import acall_with_fallback, call_with_fallback
from otel_breaker.guards import Guard
from otel_breaker.registry import BreakerRegistry
from otel_breaker.toolcall import ToolCall


class Model:
    """The breaker as the README describes it, written as plainly as possible."""

    def __init__(self, config: CircuitBreakerConfig) -> None:
        self.config = config
        self.state = "closed"
        self.generation = 0
        self.consecutive = 0
        self.open_until = 0.0
        self.reopenings = 0
        self.leases: dict[int, float] = {}  # lease -> when it was handed out
        self.next_lease = 0
        self.probe_successes = 0
        self.counts = {SUCCESS: 0, FAILURE: 0, IGNORED: 0}
        self.rejected = 0

    def _move(self, state: str, now: float) -> None:
        self.state = state
        self.generation += 1
        self.leases.clear()
        self.probe_successes = 0
        if state == "open":
            c = self.config
            cooldown = c.recovery_timeout * c.backoff_multiplier**self.reopenings
            self.open_until = now + max(c.recovery_timeout, min(cooldown, c.max_recovery_timeout))
        if state == "closed":
            self.consecutive = 0
            self.reopenings = 0

    def observe(self, now: float) -> str:
        if self.state == "open" and now >= self.open_until:
            self._move("half_open", now)
        return self.state

    def acquire(self, now: float):
        state = self.observe(now)
        if state == "closed":
            return ("closed", self.generation)
        if state == "half_open":
            # a probe that never answers frees its slot after the timeout (or the lease limit)
            limit = PROBE_LEASE_SECONDS if self.config.timeout is None else self.config.timeout
            self.leases = {lease: at for lease, at in self.leases.items() if now - at <= limit}
        if state == "half_open" and len(self.leases) < self.config.half_open_max_calls:
            self.next_lease += 1
            self.leases[self.next_lease] = now
            return ("probe", self.generation, self.next_lease)
        self.rejected += 1
        return None

    def streak(self, outcome: int) -> None:
        """Outside the closed state the streak decides nothing; it stays the failures since the last success."""
        if self.state != "closed" and outcome != IGNORED:
            self.consecutive = 0 if outcome == SUCCESS else self.consecutive + 1

    def record(self, permit, outcome: int, now: float) -> None:
        self.counts[outcome] += 1
        self.streak(outcome)
        if permit[0] == "probe":
            _, generation, lease = permit
            if self.state != "half_open" or generation != self.generation or lease not in self.leases:
                return
            del self.leases[lease]
            if outcome == SUCCESS:
                self.probe_successes += 1
                if self.probe_successes >= self.config.success_threshold:
                    self._move("closed", now)
            elif outcome == FAILURE:
                self.reopenings += 1
                self._move("open", now)
            return
        if permit[1] != self.generation or self.state != "closed" or outcome == IGNORED:
            return
        if outcome == SUCCESS:
            self.consecutive = 0
        else:
            self.consecutive += 1
            if self.consecutive >= self.config.failure_threshold:
                self._move("open", now)


outcomes = st.sampled_from([SUCCESS, FAILURE, IGNORED])


def _tool_body(outcome: int) -> int:
    """A tool that ends with ``outcome``: returns, fails, or is denied (neither)."""
    if outcome == FAILURE:
        raise RuntimeError("the tool failed")
    if outcome == IGNORED:
        raise ApprovalDeniedError("the call was not approved")
    return 1


class BreakerMachine(RuleBasedStateMachine):
    """Drives one breaker through ``run_call`` (acquire/record here; other paths below)."""

    @initialize(
        failure_threshold=st.integers(1, 4),
        success_threshold=st.integers(1, 3),
        half_open_max_calls=st.integers(1, 3),
        recovery_timeout=st.integers(1, 20),
        backoff_multiplier=st.sampled_from([1.0, 2.0]),
    )
    def setup(self, **options):
        self.now = 100.0
        config = CircuitBreakerConfig(timeout=None, max_recovery_timeout=50.0, **options)
        self.breaker = self.make_breaker(config)
        self.model = Model(config)
        self.held: list[tuple] = []

    def make_breaker(self, config: CircuitBreakerConfig) -> CircuitBreaker:
        return CircuitBreaker("tool", config, clock=lambda: self.now)

    def run_call(self, outcome: int) -> bool:
        """One call ending with ``outcome``; returns whether it was rejected."""
        permit = self.breaker.try_acquire()
        if permit != REJECTED:
            self.breaker.on_outcome(permit, outcome)
        return permit == REJECTED

    @rule(outcome=outcomes)
    def call(self, outcome):
        self.step(outcome)

    def step(self, outcome: int) -> None:
        rejected = self.run_call(outcome)
        expected = self.model.acquire(self.now)
        assert rejected == (expected is None)
        if expected is not None:
            self.model.record(expected, outcome, self.now)

    @rule()
    def hold(self):
        permit = self.breaker.try_acquire()
        expected = self.model.acquire(self.now)
        assert (permit == REJECTED) == (expected is None)
        if expected is not None:
            self.held.append((permit, expected))

    @precondition(lambda self: self.held)
    @rule(index=st.integers(0, 10), outcome=outcomes)
    def finish_held(self, index, outcome):
        permit, expected = self.held.pop(index % len(self.held))
        self.breaker.on_outcome(permit, outcome)
        self.model.record(expected, outcome, self.now)

    @rule(seconds=st.sampled_from([0.5, 1, 5, 10, 25, 60]))
    def advance(self, seconds):
        self.now += seconds

    @rule()
    def reset(self):
        self.breaker.reset()
        self.model = Model(self.breaker.config)
        self.held.clear()

    @invariant()
    def agrees_with_model(self):
        if not hasattr(self, "breaker"):
            return
        assert self.breaker.state.value == self.model.observe(self.now)
        stats = self.breaker.stats
        assert stats.consecutive_failures == self.model.consecutive
        assert (stats.success_count, stats.failure_count, stats.ignored_count) == (
            self.model.counts[SUCCESS],
            self.model.counts[FAILURE],
            self.model.counts[IGNORED],
        )
        assert stats.rejected_requests == self.model.rejected
        if self.breaker.state is State.OPEN:
            assert abs(self.breaker.retry_after - (self.model.open_until - self.now)) < 1e-9


class _CallPath(BreakerMachine):
    """Calls go through a call path that runs the tool: a rejection never runs it."""

    def run_call(self, outcome: int) -> bool:
        ran = []

        def tool() -> int:
            ran.append(True)
            return _tool_body(outcome)

        try:
            result = self.invoke(tool)
        except (RuntimeError, ApprovalDeniedError):
            assert ran
            return False
        rejected = not ran
        assert rejected == (isinstance(result, dict) and result.get("circuit_open") is True)
        return rejected

    def invoke(self, tool):
        raise NotImplementedError


class BreakerCallMachine(_CallPath):
    def invoke(self, tool):
        return self.breaker.call(tool)


class DecoratedMachine(_CallPath):
    """``@breaker``: the decorator's wrapper, with its closed path written out inline."""

    def make_breaker(self, config: CircuitBreakerConfig) -> CircuitBreaker:
        breaker = super().make_breaker(config)

        @breaker
        def tool():
            return self.tool()

        self.decorated = tool
        return breaker

    def invoke(self, tool):
        self.tool = tool
        return self.decorated()


class GuardSyncMachine(_CallPath):
    """``@guard("tool", config=..., registry=...)``: the registry lookup and the call path."""

    def make_breaker(self, config: CircuitBreakerConfig) -> CircuitBreaker:
        self.registry = BreakerRegistry(clock=lambda: self.now)
        breaker = self.registry.breaker_for(ToolCall("tool"), config)
        self.guarded = guard("tool", config=config, registry=self.registry)(self.body())
        return breaker

    def body(self):
        def tool():
            return self.tool()

        return tool

    def invoke(self, tool):
        self.tool = tool
        return self.guarded()


class GuardAsyncMachine(GuardSyncMachine):
    def body(self):
        async def tool():
            return self.tool()

        return tool

    def invoke(self, tool):
        self.tool = tool
        return asyncio.run(self.guarded())


class BreakerACallMachine(_CallPath):
    def invoke(self, tool):
        async def body():
            return tool()

        return asyncio.run(self.breaker.acall(body))


class DecoratedAsyncMachine(DecoratedMachine):
    """``@breaker`` on a coroutine function."""

    def make_breaker(self, config: CircuitBreakerConfig) -> CircuitBreaker:
        breaker = CircuitBreaker("tool", config, clock=lambda: self.now)

        @breaker
        async def tool():
            return self.tool()

        self.decorated = lambda: asyncio.run(tool())
        return breaker


class _Registered(_CallPath):
    """An entrance that finds the breaker in a registry (memory, or Redis with ``redis``)."""

    redis = False

    def make_breaker(self, config: CircuitBreakerConfig) -> CircuitBreaker:
        self.tool_name = f"tool-{uuid.uuid4().hex[:12]}" if self.redis else "tool"
        self.registry = BreakerRegistry(store=_REDIS if self.redis else None, clock=lambda: self.now)
        self.described = ToolCall(self.tool_name)
        breaker = self.registry.breaker_for(self.described, config)
        if self.redis:
            breaker.storage.use_clock(lambda: self.now)
            self.shared = breaker
        self.entrance(config)
        return breaker

    def entrance(self, config: CircuitBreakerConfig) -> None:
        """Set up what ``invoke`` calls."""

    def teardown(self) -> None:
        shared = getattr(self, "shared", None)
        if shared is not None:
            _REDIS.client.delete(*shared.storage.keys)
            shared.close()


class GuardCallMachine(_Registered):
    """``Guard.call``: what every sync framework adapter calls."""

    def invoke(self, tool):
        return Guard(self.registry).call(self.described, tool)


class GuardACallMachine(_Registered):
    def invoke(self, tool):
        async def body():
            return tool()

        return asyncio.run(Guard(self.registry).acall(self.described, body))


class GuardDecoratorMachine(_Registered):
    """``@guard(name, registry=...)`` on a sync function."""

    def entrance(self, config: CircuitBreakerConfig) -> None:
        def tool():
            return self.tool()

        self.guarded = guard(self.tool_name, config=config, registry=self.registry)(tool)

    def invoke(self, tool):
        self.tool = tool
        return self.guarded()


class GuardAsyncDecoratorMachine(GuardDecoratorMachine):
    def entrance(self, config: CircuitBreakerConfig) -> None:
        async def tool():
            return self.tool()

        self.guarded = guard(self.tool_name, config=config, registry=self.registry)(tool)

    def invoke(self, tool):
        self.tool = tool
        return asyncio.run(self.guarded())


class FallbackMachine(_Registered):
    """``call_with_fallback`` with the tool as its only candidate."""

    def invoke(self, tool):
        return call_with_fallback((self.tool_name, tool), registry=self.registry)


class FallbackAsyncMachine(_Registered):
    def invoke(self, tool):
        async def body():
            return tool()

        return asyncio.run(acall_with_fallback((self.tool_name, body), registry=self.registry))


class ObserveMachine(_Registered):
    """``CallPath.observe``: a call that already ran. It is never rejected; while the
    breaker is closed its outcome counts as any call's, otherwise only in statistics."""

    def step(self, outcome: int) -> None:
        CallPath(self.registry).observe(self.described, outcome)
        state = self.model.observe(self.now)
        if state == "closed":
            self.model.record(("closed", self.model.generation), outcome, self.now)
        else:
            self.model.counts[outcome] += 1
            self.model.streak(outcome)


REDIS_URL = "redis://127.0.0.1:6379/0"


def _redis_store():
    """The Redis store the machine shares across examples, or None when Redis does not answer."""
    try:
        from otel_breaker.store.redis import RedisStore

        # watch=False: every decision is a script run, none is a local shortcut the
        # change feed would license. cautious=False: the model has no pending calls.
        store = RedisStore.from_url(REDIS_URL, cautious=False, watch=False, socket_timeout=5.0, prefix="stateful")
    except Exception:
        return None
    try:
        store.check()
    except Exception:
        store.close()
        return None
    return store


_REDIS = _redis_store()


class RedisStoreMachine(BreakerMachine):
    """``acquire``/``record`` on a breaker delegating to the Redis storage, whose script
    runs on the model's clock (``RedisStorage.use_clock``) instead of the server's."""

    def make_breaker(self, config: CircuitBreakerConfig) -> CircuitBreaker:
        assert _REDIS is not None
        breaker = _REDIS.create(f"tool-{uuid.uuid4().hex[:12]}", config, clock=lambda: self.now)
        breaker.storage.use_clock(lambda: self.now)
        self.shared = breaker
        return breaker

    def teardown(self) -> None:
        shared = getattr(self, "shared", None)
        if shared is not None:
            _REDIS.client.delete(*shared.storage.keys)
            shared.close()


_SETTINGS = settings(max_examples=300, stateful_step_count=60, deadline=None)
_FEWER = settings(max_examples=100, stateful_step_count=60, deadline=None)

TestBreakerMachine = BreakerMachine.TestCase
TestBreakerMachine.settings = _SETTINGS
TestBreakerCall = BreakerCallMachine.TestCase
TestBreakerCall.settings = _SETTINGS
TestDecorated = DecoratedMachine.TestCase
TestDecorated.settings = _SETTINGS
TestGuardSync = GuardSyncMachine.TestCase
TestGuardSync.settings = _FEWER
TestGuardAsync = GuardAsyncMachine.TestCase
TestGuardAsync.settings = _FEWER
TestRedisStore = pytest.mark.skipif(_REDIS is None, reason=f"no Redis answers on {REDIS_URL}")(
    RedisStoreMachine.TestCase
)
TestRedisStore.settings = _FEWER
TestBreakerACall = BreakerACallMachine.TestCase
TestBreakerACall.settings = _FEWER
TestDecoratedAsync = DecoratedAsyncMachine.TestCase
TestDecoratedAsync.settings = _FEWER

_ENTRANCES = {
    "guard_call": GuardCallMachine,
    "guard_acall": GuardACallMachine,
    "guard_decorator": GuardDecoratorMachine,
    "guard_async_decorator": GuardAsyncDecoratorMachine,
    "fallback": FallbackMachine,
    "fallback_async": FallbackAsyncMachine,
    "observe": ObserveMachine,
}
_IN_REDIS = settings(max_examples=25, stateful_step_count=40, deadline=None)
_no_redis = pytest.mark.skipif(_REDIS is None, reason=f"no Redis answers on {REDIS_URL}")
for _name, _machine in _ENTRANCES.items():
    _case = _machine.TestCase
    _case.settings = _FEWER
    globals()[f"TestMemory_{_name}"] = _case
    _shared = type(f"Redis_{_name}", (_machine,), {"redis": True})
    _case = _no_redis(_shared.TestCase)
    _case.settings = _IN_REDIS
    globals()[f"TestRedis_{_name}"] = _case


@pytest.mark.skipif(_REDIS is None, reason=f"no Redis answers on {REDIS_URL}")
@pytest.mark.parametrize("shared", [False, True], ids=["memory", "redis"])
def test_a_probe_lease_lives_up_to_its_limit_inclusive(shared):
    """A probe that has run exactly as long as the lease limit still holds its slot, and
    its answer still counts: the same moment in memory and in the Redis script."""
    now = [0.0]
    config = CircuitBreakerConfig(failure_threshold=1, success_threshold=1, half_open_max_calls=1, recovery_timeout=1)
    if shared:
        breaker = _REDIS.create(f"lease-{uuid.uuid4().hex[:12]}", config, clock=lambda: now[0])
        breaker.storage.use_clock(lambda: now[0])
    else:
        breaker = CircuitBreaker("lease", config, clock=lambda: now[0])
    try:
        breaker.on_outcome(breaker.try_acquire(), FAILURE)
        now[0] = 1.0
        probe = breaker.try_acquire()
        assert probe != REJECTED and breaker.state is State.HALF_OPEN
        now[0] = 1.0 + PROBE_LEASE_SECONDS
        assert breaker.try_acquire() == REJECTED  # the slot is still the probe's
        breaker.on_outcome(probe, SUCCESS)
        assert breaker.state is State.CLOSED
    finally:
        if shared:
            _REDIS.client.delete(*breaker.storage.keys)
            breaker.close()
