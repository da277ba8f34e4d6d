"""Two LangChain tools that share a name but not their code never share a breaker:
called directly (``.invoke``, no agent) and inside LangGraph agents of the same name."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core")

from langchain_core.tools import tool
from test_langchain import UNAVAILABLE, agent, seen_tool_messages

from otel_breaker.config import load_settings, set_settings
from otel_breaker.registry import default_registry


@pytest.fixture(autouse=True)
def threshold_two():
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2", "OTEL_BREAKER_RECOVERY_TIMEOUT": "600"}))


def two_lookups():
    runs = {"broken": 0, "healthy": 0}

    @tool("lookup")
    def broken_lookup(x: int) -> str:
        """Looks x up in a store that is down."""
        runs["broken"] += 1
        raise RuntimeError("store down")

    @tool("lookup")
    def healthy_lookup(x: int) -> str:
        """Looks x up in a cache that works."""
        runs["healthy"] += 1
        return f"cached {x}"

    return broken_lookup, healthy_lookup, runs


def invoke_both(broken, healthy) -> list[str]:
    shown = []
    for x in range(4):
        try:
            shown.append(str(broken.invoke({"x": x})))
        except RuntimeError as error:
            shown.append(f"error: {error}")
        shown.append(healthy.invoke({"x": x}))
    return shown


def test_same_named_tools_of_different_code_stay_apart_without_an_agent(instrument):
    broken, healthy, _ = two_lookups()
    baseline = invoke_both(broken, healthy)
    instrument("langchain")
    broken, healthy, runs = two_lookups()
    shown = invoke_both(broken, healthy)
    assert runs == {"broken": 2, "healthy": 4}
    assert shown[1::2] == baseline[1::2] == [f"cached {x}" for x in range(4)]  # the healthy one: never rejected
    assert [UNAVAILABLE in text for text in shown[0::2]] == [False, False, True, True]
    origins = {b.origin for b in default_registry().find("lookup")}
    assert len(origins) == 2 and all(o and o.startswith("test_tool_identity:two_lookups.<locals>.") for o in origins)


def test_same_named_tools_of_different_code_stay_apart_in_agents_of_one_name(instrument):
    instrument("langchain")
    broken, healthy, runs = two_lookups()
    for _request in range(3):  # a new graph per request, both agents named "helper"
        _, dead_graph = agent(broken, 3, name="helper")
        dead_graph.invoke({"messages": [("user", "go")]})
        model, fine_graph = agent(healthy, 3, name="helper")
        fine_graph.invoke({"messages": [("user", "go")]})
        assert [m.content for m in seen_tool_messages(model)] == ["cached 1", "cached 2", "cached 3"]
    assert runs == {"broken": 2, "healthy": 9}
