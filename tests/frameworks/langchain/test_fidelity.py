"""Where no tool is broken, a LangGraph agent behaves exactly as it does without otel-breaker.

Each test runs the framework's real loop (fake chat model, default ``ToolNode``)
with the adapter off and on, and compares the transcripts.
"""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("langgraph")

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import MessagesState, StateGraph

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import ToolNode, create_react_agent

from otel_breaker.config import load_settings, set_settings
from otel_breaker.registry import default_registry

UNAVAILABLE = "is temporarily unavailable"


class FakeModel(FakeMessagesListChatModel):
    def bind_tools(self, tools, **kwargs):
        return self


@pytest.fixture(autouse=True)
def threshold_three():
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "3", "OTEL_BREAKER_RECOVERY_TIMEOUT": "600"}))


def react_agent(tools, responses, name=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return create_react_agent(FakeModel(responses=responses), tools, name=name)


def transcript(result) -> list[tuple]:
    return [
        (type(m).__name__, m.content if isinstance(m.content, str) else str(m.content), getattr(m, "status", None))
        for m in result["messages"]
    ]


def call(name: str, args: dict, call_id: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}])


def make_add():
    runs = {"add": 0}

    @tool
    def add(a: int, b: int) -> int:
        """Adds two numbers."""
        runs["add"] += 1
        return a + b

    return add, runs


def test_bad_arguments_five_times_then_valid_returns_the_answer(instrument, otel):
    """A model that sends bad arguments to a healthy tool: validation errors, never a breaker's
    rejection; from the 4th identical call, the loop guard's answer (docs/loops.md)."""
    responses = [call("add", {"a": "x", "b": 1}, f"bad_{i}") for i in range(6)]
    responses += [call("add", {"a": 1, "b": 2}, "good"), AIMessage("done")]
    add, _ = make_add()
    off = transcript(react_agent([add], responses).invoke({"messages": [HumanMessage("go")]}))
    instrument("langchain")
    add, runs = make_add()
    on = transcript(react_agent([add], responses).invoke({"messages": [HumanMessage("go")]}))
    tool_rows = [i for i, row in enumerate(off) if row[0] == "ToolMessage"]
    looped = set(tool_rows[3:6])  # the 4th to 6th identical bad call
    assert len(on) == len(off)
    assert all(on[i] == off[i] for i in range(len(off)) if i not in looped)
    assert all("this exact call, with the same arguments" in on[i][1] and on[i][2] == "error" for i in looped)
    assert on[-2] == ("ToolMessage", "3", "success")
    assert not any(UNAVAILABLE in row[1] for row in on)
    assert runs["add"] == 1
    assert otel.metric_value("otel_breaker.calls", gen_ai_tool_name="add", otel_breaker_outcome="failure") == 0


def test_validation_error_raised_by_the_tool_body_is_a_failure(instrument, otel):
    """Only the model's arguments are its mistake: a tool whose body raises a
    pydantic ValidationError (a malformed upstream answer) has failed."""
    from pydantic import BaseModel

    class Upstream(BaseModel):
        price: int

    @tool
    def quote(symbol: str) -> int:
        """Quotes a price."""
        return Upstream.model_validate({"price": "n/a"}).price

    from pydantic import ValidationError

    instrument("langchain")
    for i in range(3):
        with pytest.raises(ValidationError):
            quote.invoke({"name": "quote", "args": {"symbol": "X"}, "id": f"q{i}", "type": "tool_call"})
    out = quote.invoke({"name": "quote", "args": {"symbol": "X"}, "id": "q9", "type": "tool_call"})
    assert isinstance(out, ToolMessage) and UNAVAILABLE in out.content


def test_a_tool_body_calling_another_tool_with_bad_arguments_has_failed(instrument, otel):
    """The arguments the model sent are fine; the body's own call of another tool
    is not: the outer tool failed (the inner one saw a caller's mistake)."""
    from pydantic import ValidationError

    add, runs = make_add()

    @tool
    def total(numbers: str) -> int:
        """Adds two comma-separated numbers."""
        a, b = numbers.split(",")
        return add.invoke({"a": a, "b": b})

    instrument("langchain")
    assert total.invoke({"numbers": "1,2"}) == 3
    for i in range(3):
        with pytest.raises(ValidationError):
            total.invoke({"name": "total", "args": {"numbers": "x,1"}, "id": f"t{i}", "type": "tool_call"})
    out = total.invoke({"name": "total", "args": {"numbers": "1,2"}, "id": "t9", "type": "tool_call"})
    assert isinstance(out, ToolMessage) and UNAVAILABLE in out.content
    assert runs["add"] == 1
    assert otel.metric_value("otel_breaker.calls", gen_ai_tool_name="add", otel_breaker_outcome="failure") == 0


def test_unknown_tool_name_creates_no_breaker(instrument, otel):
    add, _ = make_add()
    responses = [call("nope", {}, f"n{i}") for i in range(6)] + [AIMessage("done")]
    off = transcript(react_agent([add], responses).invoke({"messages": [HumanMessage("go")]}))
    instrument("langchain")
    on = transcript(react_agent([add], responses).invoke({"messages": [HumanMessage("go")]}))
    assert on == off
    assert "nope" not in {b.name for b in default_registry().breakers()}
    assert otel.tool_spans("nope") == []


def make_lookup(broken: bool):
    @tool
    def lookup(q: str) -> str:
        """Looks something up."""
        if broken:
            raise RuntimeError("down")
        return f"found {q}"

    return lookup


@pytest.mark.parametrize("how", ["create_react_agent", "StateGraph.compile"])
def test_two_named_agents_sharing_a_tool_name_have_their_own_breakers(instrument, otel, how):
    """agent_b's first call is not rejected because agent_a's ``lookup`` failed."""

    def named(name: str, broken: bool, n: int):
        responses = [call("lookup", {"q": str(i)}, f"{name}_{i}") for i in range(n)] + [AIMessage("done")]
        tools = [make_lookup(broken)]
        if how == "create_react_agent":
            return react_agent(ToolNode(tools, handle_tool_errors=True), responses, name=name)
        builder = StateGraph(MessagesState)
        model = FakeModel(responses=responses)
        builder.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
        builder.add_node("tools", ToolNode(tools, handle_tool_errors=True))
        builder.set_entry_point("model")
        builder.add_conditional_edges("model", lambda s: "tools" if s["messages"][-1].tool_calls else "__end__")
        builder.add_edge("tools", "model")
        return builder.compile(name=name)

    instrument("langchain")
    a = transcript(named("agent_a", broken=True, n=4).invoke({"messages": [HumanMessage("go")]}))
    assert UNAVAILABLE in a[-2][1], "agent_a's own breaker opened"
    b = transcript(named("agent_b", broken=False, n=2).invoke({"messages": [HumanMessage("go")]}))
    assert [row for row in b if row[0] == "ToolMessage"] == [
        ("ToolMessage", "found 0", "success"),
        ("ToolMessage", "found 1", "success"),
    ]
    agents = {s.attributes.get("gen_ai.agent.name") for s in otel.tool_spans("lookup")}
    assert agents == {"agent_a", "agent_b"}


def test_default_toolnode_reraises_tool_errors_and_a_rejection_ends_that(instrument, otel):
    """LangGraph 1.x's default ToolNode re-raises a failing tool's exception (the run
    crashes, with or without us); once the breaker is open, the rejection is an error
    ToolMessage the loop carries on with, never a crash."""
    lookup = make_lookup(broken=True)
    responses = [call("lookup", {"q": "x"}, "c1"), AIMessage("done")]
    with pytest.raises(RuntimeError, match="down"):
        react_agent([lookup], responses).invoke({"messages": [HumanMessage("go")]})
    instrument("langchain")
    for _ in range(3):
        with pytest.raises(RuntimeError, match="down"):
            react_agent([lookup], responses).invoke({"messages": [HumanMessage("go")]})
    result = transcript(react_agent([lookup], responses).invoke({"messages": [HumanMessage("go")]}))
    assert result[-1] == ("AIMessage", "done", None)
    assert result[-2][0] == "ToolMessage" and UNAVAILABLE in result[-2][1] and result[-2][2] == "error"


def test_healthy_named_agent_unchanged(instrument, otel):
    responses = [call("lookup", {"q": str(i)}, f"c{i}") for i in range(3)] + [AIMessage("done")]
    off = transcript(
        react_agent([make_lookup(False)], responses, name="helper").invoke({"messages": [HumanMessage("go")]})
    )
    instrument("langchain")
    on = transcript(
        react_agent([make_lookup(False)], responses, name="helper").invoke({"messages": [HumanMessage("go")]})
    )
    assert on == off
    assert {s.attributes.get("gen_ai.agent.name") for s in otel.tool_spans("lookup")} == {"helper"}


def test_a_tools_own_argument_parsing_that_is_unimplemented_has_failed(instrument, otel):
    """An exception raised under langchain-core's argument parsing is the model's mistake only
    when langchain-core or pydantic refused the arguments: a tool whose own override of
    ``_parse_input`` (called from langchain-core's ``_to_args_and_kwargs``) raises
    ``NotImplementedError`` is a bug in the tool, counted."""
    from langchain_core.tools import StructuredTool

    class Unfinished(StructuredTool):
        def _parse_input(self, tool_input, tool_call_id):
            raise NotImplementedError("argument parsing is not written yet")

    def lookup(q: str) -> str:
        return q

    unfinished = Unfinished.from_function(lookup, name="lookup", description="Looks up.")
    instrument("langchain")
    for i in range(3):
        with pytest.raises(NotImplementedError):
            unfinished.invoke({"name": "lookup", "args": {"q": "x"}, "id": f"u{i}", "type": "tool_call"})
    out = unfinished.invoke({"name": "lookup", "args": {"q": "x"}, "id": "u9", "type": "tool_call"})
    assert isinstance(out, ToolMessage) and UNAVAILABLE in out.content
