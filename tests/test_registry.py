"""Which breaker guards a call: scopes, pruning, the cardinality cap."""

from __future__ import annotations

import gc
import logging

import pytest

import otel_breaker.registry as registry_module
from otel_breaker import (
    CircuitBreaker,
    CircuitBreakerConfig,
    State,
    ToolCall,
    breaker_scope,
    get_circuit_breaker,
    release,
    reset_all_circuit_breakers,
)
from otel_breaker.config import configure, load_settings
from otel_breaker.registry import UNGUARDED_TOOL, BreakerRegistry, default_registry


class Agent:
    def __init__(self, name: str) -> None:
        self.name = name


class Down(Exception):
    pass


def _fail() -> None:
    raise Down


def test_get_circuit_breaker_returns_the_same_breaker():
    assert get_circuit_breaker("search") is get_circuit_breaker("search")
    assert get_circuit_breaker("search") is not get_circuit_breaker("fetch")


def test_a_different_config_for_an_existing_name_is_applied_and_logged(caplog):
    breaker = get_circuit_breaker("search")
    with caplog.at_level(logging.INFO, logger="otel_breaker"):
        again = get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=2))
    assert again is breaker and breaker.config.failure_threshold == 2
    assert "applying a new configuration" in caplog.text


def test_two_agents_with_a_same_named_tool_never_share_a_breaker():
    registry = BreakerRegistry(settings=load_settings({}))
    first, second = Agent("researcher"), Agent("writer")
    a = registry.breaker_for(ToolCall("search", agent=first, agent_name="researcher"))
    b = registry.breaker_for(ToolCall("search", agent=second, agent_name="writer"))
    assert a is not b
    assert registry.breaker_for(ToolCall("search", agent=first, agent_name="researcher")) is a
    a.force_open()
    assert b.state is State.CLOSED
    assert a.agent_name == "researcher"


def test_process_scope_shares_by_tool_name():
    registry = BreakerRegistry(settings=load_settings({"OTEL_BREAKER_SCOPE": "process"}))
    a = registry.breaker_for(ToolCall("search", agent=Agent("a")))
    b = registry.breaker_for(ToolCall("search", agent=Agent("b")))
    assert a is b


def test_instance_scope_breakers_are_pruned_when_the_agent_is_collected():
    registry = BreakerRegistry(settings=load_settings({"OTEL_BREAKER_SCOPE": "instance"}))
    registry.breaker_for(ToolCall("fetch"))
    baseline = len(registry)
    for index in range(100_000):
        agent = Agent(f"agent-{index}")
        registry.breaker_for(ToolCall("search", agent=agent, agent_name=agent.name)).on_outcome(0, 0)
        del agent
    gc.collect()
    assert len(registry) == baseline
    assert len(registry.breakers()) == baseline
    assert sum(v[0] for v in registry.retired_counts().values()) == 100_000  # counts survive pruning


def test_release_drops_an_agents_breakers_now_in_instance_scope():
    configure(scope="instance")
    agent = Agent("a")
    breaker = default_registry().breaker_for(ToolCall("search", agent=agent))
    assert breaker in default_registry().breakers()
    release(agent)
    assert breaker not in default_registry().breakers()


def test_unweakrefable_agents_fall_back_to_their_name():
    registry = BreakerRegistry(settings=load_settings({}))
    a = registry.breaker_for(ToolCall("search", agent=("tuple", "agent"), agent_name="bot"))
    b = registry.breaker_for(ToolCall("search", agent=("tuple", "agent"), agent_name="bot"))
    assert a is b


def test_session_scope_breakers_go_when_the_session_ends():
    with breaker_scope("session-1") as session:
        breaker = default_registry().breaker_for(ToolCall("search"))
        breaker.force_open()
        assert breaker.session_id == session == "session-1"
        with breaker_scope("session-2"):
            assert default_registry().breaker_for(ToolCall("search")).state is State.CLOSED
    assert breaker not in default_registry().breakers()
    assert default_registry().breaker_for(ToolCall("search")).state is State.CLOSED


def test_framework_session_ids_key_breakers_in_session_scope(clock):
    registry = BreakerRegistry(settings=load_settings({"OTEL_BREAKER_SCOPE": "session"}), clock=clock)
    a = registry.breaker_for(ToolCall("search", session_id="thread-1"))
    b = registry.breaker_for(ToolCall("search", session_id="thread-2"))
    assert a is not b
    clock.advance(7200)
    registry.breaker_for(ToolCall("search", session_id="thread-3"))  # prunes idle sessions
    assert a not in registry.breakers() and b not in registry.breakers()


def test_past_the_cap_idle_closed_breakers_make_room_and_the_cap_is_logged_once(caplog):
    registry = BreakerRegistry(settings=load_settings({}), max_breakers=10)
    with caplog.at_level(logging.WARNING, logger="otel_breaker"):
        for i in range(50):
            assert registry.breaker_for(ToolCall(f"tool-{i}")).call(lambda: "ok") == "ok"
    assert len(registry) == 10
    assert registry.unguarded_calls == 0
    assert caplog.text.count("idle closed breakers now make room") == 1
    assert UNGUARDED_TOOL not in {b.name for b in registry.breakers()}


def test_past_the_cap_a_healthy_tool_is_never_rejected_for_another_tools_failures(caplog):
    """An MCP server with many tool names: one failing tool beyond the cap must not
    reject the others (it used to share one overflow breaker with them)."""
    registry = BreakerRegistry(settings=load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2"}), max_breakers=5)
    # fill the registry with tools that are failing (not idle, not forgettable)
    for i in range(5):
        broken = registry.breaker_for(ToolCall(f"broken-{i}"))
        for _ in range(2):
            with pytest.raises(Down):
                broken.call(_fail)
    with caplog.at_level(logging.WARNING, logger="otel_breaker"):
        failing = registry.breaker_for(ToolCall("flaky"))
        for _ in range(10):
            with pytest.raises(Down):
                failing.call(_fail)
        healthy_results = [registry.breaker_for(ToolCall(f"healthy-{i}")).call(lambda: "ok") for i in range(200)]
    assert healthy_results == ["ok"] * 200  # 0 healthy calls rejected
    assert registry.unguarded_calls == 210
    assert caplog.text.count("and none idle: new tools run unguarded") == 1
    assert all(b.state is State.OPEN for b in registry.breakers())  # the broken tools keep their own state


def test_pinned_and_busy_breakers_are_not_evicted():
    registry = BreakerRegistry(settings=load_settings({}), max_breakers=2)
    held = registry.get("held")  # handed to the caller
    failing = registry.breaker_for(ToolCall("streak"))
    with pytest.raises(Down):
        failing.call(_fail)  # a failure streak is state a new breaker would not have
    registry.breaker_for(ToolCall("new")).call(lambda: 1)
    assert {b.name for b in registry.breakers()} == {"held", "streak"}
    assert registry.get("held") is held


def test_session_scope_past_the_cap_keeps_memory_bounded(clock):
    registry = BreakerRegistry(settings=load_settings({"OTEL_BREAKER_SCOPE": "session"}), clock=clock, max_breakers=50)
    for i in range(5000):
        breaker = registry.breaker_for(ToolCall("search", session_id=f"s{i}"))
        breaker.try_acquire()  # a call in flight: not idle
    assert len(registry) == 50
    assert len(registry._by_session) <= 50
    assert len(registry._session_seen) <= 50 and len(registry._session_order) <= 50


def test_idle_sessions_are_pruned_a_bounded_number_per_new_session(clock):
    registry = BreakerRegistry(settings=load_settings({"OTEL_BREAKER_SCOPE": "session"}), clock=clock)
    for i in range(1000):
        registry.breaker_for(ToolCall("search", session_id=f"old-{i}"))
    kept = registry.breaker_for(ToolCall("search", session_id="old-0"))
    clock.advance(3000)
    kept = registry.breaker_for(ToolCall("search", session_id="old-0"))  # used again: stays
    clock.advance(1000)
    for i in range(40):
        registry.breaker_for(ToolCall("search", session_id=f"new-{i}"))
    # each new session looked at no more than a bounded number of old ones...
    assert 1000 - 40 * registry_module.SESSION_PRUNE_STEPS <= len(registry._by_session) < 1040
    for i in range(40, 200):
        registry.breaker_for(ToolCall("search", session_id=f"new-{i}"))
    # ...and together they dropped every idle one
    assert set(registry._by_session) == {"old-0"} | {f"new-{i}" for i in range(200)}
    assert kept in registry.breakers()


def test_reset_all_reaches_breakers_outside_the_registry():
    mine = CircuitBreaker("private")
    registered = get_circuit_breaker("shared")
    mine.force_open()
    registered.force_open()
    reset_all_circuit_breakers()
    assert mine.state is State.CLOSED and registered.state is State.CLOSED


def test_env_overrides_reach_new_breakers():
    registry = BreakerRegistry(
        settings=load_settings(
            {"OTEL_BREAKER_FAILURE_THRESHOLD": "7", "OTEL_BREAKER_TOOLS": "run_code=code_executor,failure_threshold=1"}
        )
    )
    assert registry.get("search").config.failure_threshold == 7
    run_code = registry.get("run_code").config
    assert (run_code.failure_threshold, run_code.recovery_timeout) == (1, 60.0)


def test_a_bad_store_url_falls_back_to_memory_with_a_log(caplog):
    registry = BreakerRegistry(settings=load_settings({"OTEL_BREAKER_STORE": "mongodb://nope"}))
    with caplog.at_level(logging.ERROR, logger="otel_breaker"):
        breaker = registry.get("search")
    assert breaker.call(lambda: "ok") == "ok"
    assert "OTEL_BREAKER_STORE unusable" in caplog.text


@pytest.mark.parametrize("scope", ["process", "agent", "session"])
def test_every_scope_guards_calls(scope):
    registry = BreakerRegistry(settings=load_settings({"OTEL_BREAKER_SCOPE": scope}))
    call = ToolCall("search", agent=Agent("a"), session_id="s")
    assert registry.breaker_for(call) is registry.breaker_for(call)


def test_a_registry_clock_lets_cooldowns_pass_without_sleeping(registry_clock):
    breaker = get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=1, recovery_timeout=30))
    breaker.force_open(duration=30)
    registry_clock.advance(30)
    assert breaker.state is State.HALF_OPEN


def test_a_breaker_fed_by_foreign_spans_becomes_idle_and_is_evicted_at_the_cap(otel):
    """The span processor counts a foreign call's admission with its outcome, so its
    breaker's books balance: once the streak is cleared it is idle, and a full registry
    evicts it for a new tool instead of running the new tool unguarded."""
    from otel_breaker.processor import BreakerSpanProcessor

    registry = BreakerRegistry(settings=load_settings({}), max_breakers=2)
    otel.tracer_provider.add_span_processor(BreakerSpanProcessor(registry))
    tracer = otel.tracer_provider.get_tracer("other-instrumentation")
    from opentelemetry.trace import Status, StatusCode

    def foreign(tool, failed):
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}
        with tracer.start_as_current_span(f"{tool} tool", attributes=attributes) as span:
            if failed:
                span.set_status(Status(StatusCode.ERROR))

    foreign("weather", True)
    fed = registry.breaker_for(ToolCall("weather", framework="span"))
    assert fed.stats.failure_count == 1 and not fed.is_idle()  # a failure streak: remembered
    foreign("weather", False)
    assert fed.is_idle() and fed.stats.total_requests == 2
    pinned = registry.get("search")  # held by its caller: never evicted
    for i in range(3):  # a full registry: the idle, processor-fed breaker makes room
        registry.breaker_for(ToolCall(f"tool-{i}"))
    assert fed.retired and fed not in registry.breakers() and pinned in registry.breakers()
    assert registry.unguarded_calls == 0


def test_the_unguarded_breaker_is_a_mode_of_the_state_machine():
    """Counted, never judged: failures past any threshold move no state."""
    breaker = CircuitBreaker(UNGUARDED_TOOL, CircuitBreakerConfig(failure_threshold=1), unguarded=True)
    for _ in range(3):
        with pytest.raises(Down):
            breaker.call(_fail)
    assert breaker.state is State.CLOSED and breaker.stats.failure_count == 3
    assert breaker.lifetime_counts()[1] == 3 and breaker.is_idle()
