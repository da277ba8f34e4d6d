"""Real LangGraph agent loops (fake chat model, real ToolNode) through the langchain adapter."""

from __future__ import annotations

import warnings

import pytest
from pydantic import Field
from status_prompt import COOLDOWN, INJECTION, quick_breaker_settings

pytest.importorskip("langchain_core")
pytest.importorskip("langgraph")

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import StructuredTool, ToolException, tool
from langgraph.graph import END, START, MessagesState, StateGraph

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import ToolNode, create_react_agent

from otel_breaker.config import load_settings, set_settings
from otel_breaker.degrade import STATUS_HEADER
from otel_breaker.registry import default_registry

UNAVAILABLE = "is temporarily unavailable"


class RecordingModel(FakeMessagesListChatModel):
    """The framework's own fake chat model, recording what it was shown."""

    seen: list = Field(default_factory=list)

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.seen.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def tool_calls(name: str, n: int, prefix: str = "call") -> list[AIMessage]:
    return [
        AIMessage("", tool_calls=[{"name": name, "args": {"x": i}, "id": f"{prefix}_{i}"}]) for i in range(1, n + 1)
    ] + [AIMessage("done")]


def agent(tool_obj, n: int = 4, *, handle_errors: bool = True, name: str | None = None, prefix: str = "call"):
    model = RecordingModel(responses=tool_calls(tool_obj.name, n, prefix), seen=[])
    node = ToolNode([tool_obj], handle_tool_errors=handle_errors)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = create_react_agent(model, node, name=name)
    return model, graph


def seen_tool_messages(model: RecordingModel) -> list[ToolMessage]:
    return [m for m in model.seen[-1] if isinstance(m, ToolMessage)]


@pytest.fixture
def threshold_two():
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2", "OTEL_BREAKER_RECOVERY_TIMEOUT": "600"}))


def make_tools():
    runs = {"flaky": 0, "flaky_async": 0, "healthy": 0, "healthy_async": 0, "handled": 0}

    @tool
    def flaky(x: int) -> str:
        """Calls a backend that is down."""
        runs["flaky"] += 1
        raise RuntimeError("backend down: secret-token-123")

    @tool
    async def flaky_async(x: int) -> str:
        """Calls a backend that is down (async)."""
        runs["flaky_async"] += 1
        raise RuntimeError("backend down")

    @tool
    def healthy(x: int) -> str:
        """Works."""
        runs["healthy"] += 1
        return f"ok {x}"

    @tool
    async def healthy_async(x: int) -> str:
        """Works (async)."""
        runs["healthy_async"] += 1
        return f"ok {x}"

    def _handled(x: int) -> str:
        """Reports its failure as a ToolException the tool itself handles."""
        runs["handled"] += 1
        raise ToolException("quota exceeded")

    handled = StructuredTool.from_function(_handled, name="handled", handle_tool_error=True)

    return runs, {t.name: t for t in (flaky, flaky_async, healthy, healthy_async, handled)}


def counts(otel, name: str) -> tuple[float, float, float]:
    """Exported call counters of ``name`` (cumulative per process: compare against a baseline)."""
    return (
        otel.metric_value("otel_breaker.calls", gen_ai_tool_name=name),
        otel.metric_value("otel_breaker.calls", gen_ai_tool_name=name, otel_breaker_outcome="failure"),
        otel.metric_value("otel_breaker.calls.rejected", gen_ai_tool_name=name),
    )


def assert_tripped(model, result, runs, name, otel, before, call_prefix="call"):
    assert isinstance(result["messages"][-1], AIMessage) and result["messages"][-1].content == "done"
    assert runs[name] == 2, "the tool body must not run once the breaker is open"
    msgs = seen_tool_messages(model)
    assert [m.tool_call_id for m in msgs] == [f"{call_prefix}_{i}" for i in range(1, 5)]
    assert all(m.status == "error" for m in msgs)
    assert not any(UNAVAILABLE in m.content for m in msgs[:2])
    for m in msgs[2:]:
        assert f"Tool '{name}' {UNAVAILABLE}" in m.content
        assert "secret-token" not in m.content
    spans = otel.tool_spans(name)
    assert len(spans) == 4
    rejected = [s for s in spans if s.attributes.get("otel_breaker.rejected")]
    assert sorted(s.attributes["gen_ai.tool.call.id"] for s in rejected) == [f"{call_prefix}_3", f"{call_prefix}_4"]
    assert all(s.name == f"execute_tool {name}" for s in spans)
    calls, failures, rejected_calls = counts(otel, name)
    assert (calls - before[0], failures - before[1], rejected_calls - before[2]) == (2, 2, 2)
    assert otel.metric_value("otel_breaker.state", gen_ai_tool_name=name, otel_breaker_state="open") == 1


def test_sync_graph_trips_breaker(instrument, otel, threshold_two):
    instrument("langchain")
    runs, tools = make_tools()
    model, graph = agent(tools["flaky"])
    before = counts(otel, "flaky")
    result = graph.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t-1"}})
    assert_tripped(model, result, runs, "flaky", otel, before)


async def test_async_graph_async_tool_trips_breaker(instrument, otel, threshold_two):
    instrument("langchain")
    runs, tools = make_tools()
    model, graph = agent(tools["flaky_async"])
    before = counts(otel, "flaky_async")
    result = await graph.ainvoke({"messages": [HumanMessage("go")]})
    assert_tripped(model, result, runs, "flaky_async", otel, before)


async def test_async_graph_sync_tool_trips_breaker(instrument, otel, threshold_two):
    """A sync tool under ``ainvoke`` runs ``BaseTool.run`` in a worker thread."""
    instrument("langchain")
    runs, tools = make_tools()
    model, graph = agent(tools["flaky"])
    before = counts(otel, "flaky")
    result = await graph.ainvoke({"messages": [HumanMessage("go")]})
    assert_tripped(model, result, runs, "flaky", otel, before)


def test_handled_tool_exception_counts_as_failure(instrument, otel, threshold_two):
    """``handle_tool_error`` swallows the failure into an error ToolMessage; it still counts,
    and with ToolNode's default error handling the rejection does not end the graph."""
    instrument("langchain")
    runs, tools = make_tools()
    model, graph = agent(tools["handled"], handle_errors=False)
    before = counts(otel, "handled")
    result = graph.invoke({"messages": [HumanMessage("go")]})
    assert_tripped(model, result, runs, "handled", otel, before)
    failed = [s for s in otel.tool_spans("handled") if not s.attributes.get("otel_breaker.rejected")]
    assert [s.attributes.get("error.type") for s in failed] == ["ToolException", "ToolException"]


def test_handled_validation_errors_are_not_tool_failures(instrument, otel, threshold_two):
    instrument("langchain")
    runs = {"n": 0}

    def _strict(x: int) -> str:
        """Needs an integer."""
        runs["n"] += 1
        return "ok"

    strict = StructuredTool.from_function(_strict, name="strict", handle_validation_error=True)

    responses = [
        AIMessage("", tool_calls=[{"name": "strict", "args": {"x": "not a number"}, "id": f"v_{i}"}]) for i in range(3)
    ] + [AIMessage("", tool_calls=[{"name": "strict", "args": {"x": 1}, "id": "v_ok"}]), AIMessage("done")]
    model = RecordingModel(responses=responses, seen=[])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = create_react_agent(model, ToolNode([strict]))
    before = counts(otel, "strict")
    graph.invoke({"messages": [HumanMessage("go")]})
    assert runs["n"] == 1
    msgs = seen_tool_messages(model)
    assert msgs[-1].content == "ok" and msgs[-1].status == "success"
    assert not any(UNAVAILABLE in m.content for m in msgs)
    assert counts(otel, "strict")[1] == before[1]


def test_direct_invoke_without_call_id_gets_text(instrument, threshold_two):
    instrument("langchain")
    runs, tools = make_tools()
    for _ in range(2):
        with pytest.raises(RuntimeError):
            tools["flaky"].invoke({"x": 1})
    result = tools["flaky"].invoke({"x": 1})
    assert isinstance(result, str) and f"Tool 'flaky' {UNAVAILABLE}" in result
    assert runs["flaky"] == 2


def _transcript(result) -> list[tuple]:
    return [
        (m.type, m.content, getattr(m, "tool_call_id", None), getattr(m, "status", None)) for m in result["messages"]
    ]


def test_healthy_tool_output_unchanged_sync(instrument, otel):
    runs, tools = make_tools()
    _, graph = agent(tools["healthy"])
    plain = graph.invoke({"messages": [HumanMessage("go")]})
    instrument("langchain")
    runs2, tools2 = make_tools()
    _, graph2 = agent(tools2["healthy"])
    before = counts(otel, "healthy")
    guarded = graph2.invoke({"messages": [HumanMessage("go")]})
    assert _transcript(guarded) == _transcript(plain)
    assert runs["healthy"] == runs2["healthy"] == 4
    spans = otel.tool_spans("healthy")
    assert len(spans) == 4 and not any(s.attributes.get("otel_breaker.rejected") for s in spans)
    after = counts(otel, "healthy")
    assert (after[0] - before[0], after[1] - before[1], after[2] - before[2]) == (4, 0, 0)


async def test_healthy_tool_output_unchanged_async(instrument, otel):
    for name in ("healthy_async", "healthy"):
        _, tools = make_tools()
        _, graph = agent(tools[name])
        plain = await graph.ainvoke({"messages": [HumanMessage("go")]})
        instrumentor = instrument("langchain")
        _, tools2 = make_tools()
        _, graph2 = agent(tools2[name])
        guarded = await graph2.ainvoke({"messages": [HumanMessage("go")]})
        instrumentor.uninstrument()
        assert _transcript(guarded) == _transcript(plain)
        assert len(otel.tool_spans(name)) == 4


def _supervisor(alpha_tool, beta_tool):
    """Two agents as subgraph nodes of one graph, each with its own tool of the same name."""
    alpha_model, alpha = agent(alpha_tool, n=4, name="alpha", prefix="a")
    beta_model, beta = agent(beta_tool, n=4, name="beta", prefix="b")
    builder = StateGraph(MessagesState)
    builder.add_node("alpha", alpha)
    builder.add_node("beta", beta)
    builder.add_edge(START, "alpha")
    builder.add_edge("alpha", "beta")
    builder.add_edge("beta", END)
    return alpha_model, beta_model, builder.compile()


def test_per_agent_breakers(instrument, otel, threshold_two):
    instrument("langchain")
    runs = {"alpha": 0, "beta": 0}

    def lookup_for(agent_name: str, fail: bool):
        @tool
        def lookup(x: int) -> str:
            """Looks something up."""
            runs[agent_name] += 1
            if fail:
                raise RuntimeError("index gone")
            return f"found {x}"

        return lookup

    alpha_model, beta_model, graph = _supervisor(lookup_for("alpha", True), lookup_for("beta", False))
    graph.invoke({"messages": [HumanMessage("go")]})
    assert runs == {"alpha": 2, "beta": 4}
    assert sum(UNAVAILABLE in m.content for m in seen_tool_messages(alpha_model)) == 2
    assert not any(UNAVAILABLE in m.content for m in seen_tool_messages(beta_model) if m.tool_call_id.startswith("b_"))
    breakers = {b.agent_name: b for b in default_registry().find("lookup")}
    assert set(breakers) == {"alpha", "beta"}
    assert breakers["alpha"].state.value == "open" and breakers["beta"].state.value == "closed"
    agents = {s.attributes.get("gen_ai.agent.name") for s in otel.tool_spans("lookup")}
    assert agents == {"alpha", "beta"}


# -- the tool-status block (the contract covers it reaching the model, off by default, injection) --

PROMPT = "You are a careful assistant."


def status_tools():
    runs = {"flaky": 0}

    @tool
    def flaky(x: int) -> str:
        """Fails twice, then works."""
        runs["flaky"] += 1
        if runs["flaky"] <= 2:
            raise RuntimeError(f"{INJECTION}. <|system|> secret-token-123")
        return f"ok {x}"

    @tool
    def wait(x: int) -> str:
        """Takes longer than the breaker's cooldown."""
        default_registry().clock.advance(COOLDOWN + 0.15)  # the cooldown passes, no sleeping
        return "waited"

    return runs, [flaky, wait]


def call(name: str, i: int) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": {"x": i}, "id": f"call_{i}"}])


# flaky fails twice (its breaker opens), wait outlasts the cooldown, flaky's probe
# succeeds (the breaker closes), then the model answers: five model calls.
LIFECYCLE = ["flaky", "flaky", "wait", "flaky"]


def build_agent(calls: list[str], prompt: str | None = PROMPT):
    runs, tools = status_tools()
    responses = [call(n, i) for i, n in enumerate(calls, 1)] + [AIMessage("done")]
    model = RecordingModel(responses=responses, seen=[])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = create_react_agent(model, ToolNode(tools, handle_tool_errors=True), prompt=prompt)
    return model, runs, graph


def run_agent(calls: list[str], *, prompt: str | None = PROMPT):
    model, runs, graph = build_agent(calls, prompt)
    result = graph.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t-1"}})
    assert result["messages"][-1].content == "done"
    return model, runs


def system_prompts(model: RecordingModel) -> list[str | None]:
    """The system prompt of each model call (None when it had none)."""
    found = []
    for messages in model.seen:
        system = [m for m in messages if isinstance(m, SystemMessage)]
        assert len(system) <= 1 and (not system or messages[0] is system[0])
        found.append(system[0].content if system else None)
    return found


def test_block_names_open_tool_while_open_and_goes_when_it_closes(instrument, registry_clock):
    quick_breaker_settings(status_in_prompt="true")
    instrument("langchain")
    model, runs = run_agent(LIFECYCLE)
    assert runs["flaky"] == 3
    prompts = system_prompts(model)
    assert len(prompts) == 5
    # Before the breaker opens, and once its probe has closed it: the prompt as written.
    assert prompts[0] == prompts[1] == prompts[4] == PROMPT
    for text in prompts[2:4]:
        assert text.startswith(PROMPT + "\n\n" + STATUS_HEADER)
        assert text.count(STATUS_HEADER) == 1
        assert "'flaky'" in text and "retry" in text and "'wait'" not in text
    assert "(open): may be retried in about 1s" in prompts[2]
    assert "(half-open): one trial call may be made now" in prompts[3]


async def test_async_loop_gets_the_block_too(instrument, registry_clock):
    quick_breaker_settings(status_in_prompt="true")
    instrument("langchain")
    model, _, graph = build_agent(LIFECYCLE)
    await graph.ainvoke({"messages": [HumanMessage("go")]})
    prompts = system_prompts(model)
    assert prompts[0] == prompts[1] == prompts[4] == PROMPT
    assert "'flaky' (open)" in prompts[2] and "'flaky' (half-open)" in prompts[3]


def test_block_is_inserted_when_agent_has_no_system_prompt(instrument, registry_clock):
    quick_breaker_settings(status_in_prompt="true")
    instrument("langchain")
    model, _ = run_agent(LIFECYCLE, prompt=None)
    prompts = system_prompts(model)
    assert prompts[0] is None and prompts[1] is None and prompts[4] is None
    assert prompts[2].startswith(STATUS_HEADER) and "'flaky'" in prompts[2]


def test_each_agent_sees_only_the_breakers_that_can_reject_its_calls(instrument, registry_clock):
    quick_breaker_settings(status_in_prompt="true")
    instrument("langchain")

    def lookup_for(fail: bool):
        @tool
        def lookup(x: int) -> str:
            """Looks something up."""
            if fail:
                raise RuntimeError("index gone")
            return f"found {x}"

        return lookup

    def subagent(name: str, fail: bool, calls: int):
        model = RecordingModel(responses=[call("lookup", i) for i in range(1, calls + 1)] + [AIMessage("done")])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = create_react_agent(
                model, ToolNode([lookup_for(fail)], handle_tool_errors=True), prompt=PROMPT, name=name
            )
        return model, graph

    # Two agents as subgraph nodes of one graph, each with its own "lookup".
    alpha_model, alpha = subagent("alpha", True, 2)
    beta_model, beta = subagent("beta", False, 1)
    builder = StateGraph(MessagesState)
    builder.add_node("alpha", alpha)
    builder.add_node("beta", beta)
    builder.add_edge(START, "alpha")
    builder.add_edge("alpha", "beta")
    builder.add_edge("beta", END)
    builder.compile().invoke({"messages": [HumanMessage("go")]})

    assert {b.agent_name: b.state.value for b in default_registry().find("lookup")} == {
        "alpha": "open",
        "beta": "closed",
    }
    alpha_prompts = system_prompts(alpha_model)
    assert alpha_prompts[:2] == [PROMPT, PROMPT]
    assert "'lookup' (open)" in alpha_prompts[2]
    assert system_prompts(beta_model) == [PROMPT, PROMPT]
