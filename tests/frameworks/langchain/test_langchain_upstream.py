"""A real LangGraph agent loop whose search API host dies: OTEL_BREAKER_UPSTREAMS groups its tools."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("langgraph")

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.prebuilt import ToolNode

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent

from otel_breaker import upstream
from otel_breaker.breaker import State
from otel_breaker.config import load_settings, set_settings
from otel_breaker.registry import default_registry

THRESHOLD = 3
NAMES = [f"search_{c}" for c in "abcdefgh"]  # eight tools of one search API


class ScriptedModel(FakeMessagesListChatModel):
    """The framework's own fake chat model, accepting the tool list it is bound to."""

    def bind_tools(self, tools, **kwargs):
        return self


def make_tools(host_up: bool) -> tuple[list[int], list[StructuredTool]]:
    runs: list[int] = []

    def make(name: str) -> StructuredTool:
        def run(x: int) -> str:
            runs.append(x)
            if not host_up:
                raise ConnectionRefusedError(f"[Errno 111] Connection refused: api.search.example ({name})")
            return f"{name} hit {x}"

        return StructuredTool.from_function(run, name=name, description=f"Search with {name}.")

    return runs, [make(n) for n in NAMES]


def run_agent(host_up: bool, rounds: int = 2) -> tuple[list[int], list]:
    runs, tools = make_tools(host_up)
    calls = [n for _ in range(rounds) for n in NAMES]
    responses = [
        AIMessage("", tool_calls=[{"name": n, "args": {"x": i}, "id": f"call_{i}"}]) for i, n in enumerate(calls)
    ] + [AIMessage("done")]
    model = ScriptedModel(responses=responses)
    node = ToolNode(tools, handle_tool_errors=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = create_react_agent(model, node)
    result = graph.invoke({"messages": [HumanMessage("find it")]}, {"recursion_limit": 100})
    return runs, [m for m in result["messages"] if isinstance(m, ToolMessage)]


@pytest.fixture
def search_upstream():
    set_settings(
        load_settings(
            {
                "OTEL_BREAKER_UPSTREAMS": "search_api=search_*",
                "OTEL_BREAKER_FAILURE_THRESHOLD": str(THRESHOLD),
            }
        )
    )


def test_dead_host_costs_threshold_calls_for_all_its_tools(instrument, search_upstream):
    instrument("langchain")
    runs, messages = run_agent(host_up=False)
    assert len(runs) == THRESHOLD, "not len(NAMES) x threshold"
    assert len(messages) == 2 * len(NAMES)
    assert all("upstream 'search_api'" in m.content for m in messages[THRESHOLD:])
    assert upstream.breaker_of(default_registry(), "search_api").state is State.OPEN


def test_healthy_host_same_transcript_with_and_without(instrument, search_upstream):
    plain_runs, plain = run_agent(host_up=True)
    instrument("langchain")
    runs, guarded = run_agent(host_up=True)
    assert runs == plain_runs
    assert [(m.name, m.content, m.status) for m in guarded] == [(m.name, m.content, m.status) for m in plain]
