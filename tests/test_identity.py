"""A breaker follows the tool, not a Python object: the tool's identity and the registry's keys."""

from __future__ import annotations

import functools
import gc

import pytest

from otel_breaker import Guard, State, ToolCall, identity
from otel_breaker.config import load_settings
from otel_breaker.identity import ToolKey, code_origin, origin_of
from otel_breaker.processor import BreakerSpanProcessor, attach
from otel_breaker.registry import BreakerRegistry, default_registry


def lookup(query: str) -> str:
    return f"found {query}"


def other_lookup(query: str) -> str:
    raise RuntimeError("down")


class LookupTool:
    """A class-based tool (its class is its code)."""

    name = "lookup"

    def run(self, query: str) -> str:
        return query


class FrameworkTool:
    """Stands in for a framework's generic tool class holding the user's function."""

    def __init__(self, func):
        self.func = func


class Unhashable:
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, func):
        self.func = func


class Agent:
    def __init__(self, name: str | None = None) -> None:
        self.name = name


# -- the code origin -----------------------------------------------------------------------------


def test_code_origin_names_module_and_qualname():
    assert code_origin(lookup) == f"{__name__}:lookup"
    assert code_origin(LookupTool().run) == f"{__name__}:LookupTool.run"
    assert code_origin(LookupTool()) == f"{__name__}:LookupTool"


def test_partials_decorators_and_lambdas_have_stable_origins():
    assert code_origin(functools.partial(lookup, "x")) == code_origin(lookup)

    @functools.wraps(lookup)
    def decorated(*args):
        return lookup(*args)

    assert code_origin(decorated) == code_origin(lookup)
    first, second = (lambda: 1), (lambda: 2)
    assert code_origin(first) != code_origin(second)
    assert code_origin(first).startswith(f"{__name__}:") and "<lambda>@" in code_origin(first)
    assert code_origin(len) == "builtins:len"


def test_a_frameworks_own_classes_and_closures_are_looked_through():
    assert code_origin(FrameworkTool(lookup)) == f"{__name__}:lookup"
    # A framework's own wrapper function (from its package) around the user's function.
    framework: dict = {"__name__": "fakeframework.tools"}
    exec("def make(fn):\n    def invoke(*args):\n        return fn(*args)\n    return invoke", framework)
    wrapper = framework["make"](other_lookup)
    assert code_origin(wrapper) == "fakeframework.tools:make.<locals>.invoke"
    assert code_origin(wrapper, "fakeframework") == f"{__name__}:other_lookup"
    assert code_origin(framework["make"](len), "fakeframework") == "builtins:len"


def test_unreadable_objects_never_raise():
    class Hostile:
        def __getattr__(self, name):
            raise RuntimeError("no attributes here")

    assert code_origin(Hostile()) is not None
    assert code_origin(None) is None
    assert origin_of(None) is None


def test_origin_is_computed_once_per_tool_object(monkeypatch):
    calls = []
    real = identity.code_origin
    monkeypatch.setattr(identity, "code_origin", lambda *a: calls.append(a) or real(*a))
    tool = FrameworkTool(lookup)
    assert [origin_of(tool) for _ in range(100)] == [f"{__name__}:lookup"] * 100
    assert len(calls) == 1
    unhashable = Unhashable(other_lookup)
    assert origin_of(unhashable) == origin_of(unhashable) == f"{__name__}:other_lookup"
    del tool
    gc.collect()
    assert len(identity._cache) < 100  # entries go with their objects


# -- the registry keys by identity ---------------------------------------------------------------


def test_a_new_agent_object_per_request_finds_the_same_breaker():
    registry = BreakerRegistry(settings=load_settings({}))
    origin = code_origin(lookup)
    breakers = {
        id(registry.breaker_for(ToolCall("lookup", agent=Agent("helper"), agent_name="helper", origin=origin)))
        for _ in range(50)
    }
    assert len(breakers) == 1
    gc.collect()
    (breaker,) = registry.breakers()
    assert breaker.agent_name == "helper" and breaker.origin == origin


def test_two_same_named_tools_of_different_code_never_share_a_breaker():
    registry = BreakerRegistry(settings=load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "1"}))
    guard_ = Guard(registry)
    for agent_name in (None, "helper"):
        broken = ToolCall("lookup", agent_name=agent_name, origin=code_origin(other_lookup))
        healthy = ToolCall("lookup", agent_name=agent_name, origin=code_origin(lookup))
        with pytest.raises(RuntimeError):
            guard_.call(broken, other_lookup, ("q",))
        assert guard_.call(broken, other_lookup, ("q",))["circuit_open"] is True
        assert guard_.call(healthy, lookup, ("q",)) == "found q"


def test_an_unnamed_agents_tools_are_keyed_by_tool_identity_alone():
    registry = BreakerRegistry(settings=load_settings({}))
    a = registry.breaker_for(ToolCall("lookup", agent=Agent(), origin="app:lookup"))
    b = registry.breaker_for(ToolCall("lookup", agent=Agent(), origin="app:lookup"))
    c = registry.breaker_for(ToolCall("lookup", origin="app:lookup"))
    assert a is b is c
    assert registry.key_of(ToolCall("lookup", agent=Agent(), origin="app:lookup")) == ToolKey(
        None, "lookup", "app:lookup"
    )


def test_a_source_is_where_the_tool_runs_before_its_code():
    registry = BreakerRegistry(settings=load_settings({}))
    one = registry.breaker_for(ToolCall("search", source="server-a@1", origin="mcp.client:call"))
    two = registry.breaker_for(ToolCall("search", source="server-b@1", origin="mcp.client:call"))
    assert one is not two
    assert registry.key_of(ToolCall("search", source="server-a@1", origin="x")).where == "server-a@1"


def test_instance_scope_keeps_the_per_object_breakers():
    registry = BreakerRegistry(settings=load_settings({"OTEL_BREAKER_SCOPE": "instance"}))
    first, second = Agent("helper"), Agent("helper")
    a = registry.breaker_for(ToolCall("lookup", agent=first, agent_name="helper"))
    b = registry.breaker_for(ToolCall("lookup", agent=second, agent_name="helper"))
    assert a is not b
    del first
    gc.collect()
    assert a not in registry.breakers() and b in registry.breakers()


def test_process_scope_shares_a_tool_across_agent_names():
    registry = BreakerRegistry(settings=load_settings({"OTEL_BREAKER_SCOPE": "process"}))
    a = registry.breaker_for(ToolCall("lookup", agent_name="one", origin="app:lookup"))
    b = registry.breaker_for(ToolCall("lookup", agent_name="two", origin="app:lookup"))
    assert a is b and a.agent_name is None


def test_an_open_breaker_outlives_its_agent_object_and_stays_on_the_gauge(otel):
    guard_ = Guard(default_registry())
    agent = Agent("helper")
    call = ToolCall("lookup", agent=agent, agent_name="helper", origin=code_origin(other_lookup))
    for _ in range(5):
        try:
            guard_.call(call, other_lookup, ("q",))
        except RuntimeError:
            pass
    del agent, call
    gc.collect()
    (breaker,) = default_registry().find("lookup")
    assert breaker.state is State.OPEN
    assert otel.value("otel_breaker.state", gen_ai_tool_name="lookup", otel_breaker_state="open") == 1
    assert otel.value("otel_breaker.state", gen_ai_agent_name="helper", otel_breaker_state="open") == 1


def test_unweakrefable_and_unhashable_agents_never_fail_a_call():
    registry = BreakerRegistry(settings=load_settings({"OTEL_BREAKER_SCOPE": "instance"}))
    guard_ = Guard(registry)
    for agent in (("tuple", "agent"), Unhashable(lookup), [1, 2]):
        assert guard_.call(ToolCall("lookup", agent=agent, agent_name="helper"), lookup, ("q",)) == "found q"


def test_breakers_fed_by_foreign_spans_become_idle_and_are_evicted(otel):
    registry = BreakerRegistry(settings=load_settings({}), max_breakers=4)
    processor = BreakerSpanProcessor(registry=registry)
    assert attach(otel.tracer_provider, processor)
    tracer = otel.tracer_provider.get_tracer("other-instrumentation")
    for index in range(20):
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": f"tool-{index}"}
        with tracer.start_as_current_span(f"tool-{index}", attributes=attributes):
            pass
    assert len(registry) <= 4
    assert registry.unguarded_calls == 0  # old idle breakers made room
    assert sum(v[0] for v in registry.retired_counts().values()) >= 16
