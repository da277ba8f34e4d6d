"""Real LlamaIndex agent loops (MockFunctionCallingLLM, real workflows) through the llama_index adapter."""

from __future__ import annotations

import pytest
from status_prompt import COOLDOWN, INJECTION, quick_breaker_settings

pytest.importorskip("llama_index.core")

from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import BaseTool, FunctionTool, ToolMetadata, ToolOutput
from llama_index.core.tools import calling as calling_module

from otel_breaker.config import load_settings, set_settings
from otel_breaker.degrade import STATUS_HEADER
from otel_breaker.registry import default_registry

UNAVAILABLE = "is temporarily unavailable"
N_CALLS = 4


@pytest.fixture
def threshold_two():
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2", "OTEL_BREAKER_RECOVERY_TIMEOUT": "600"}))


class ScriptedLLM:
    """Builds the framework's mock function-calling LLM; records the tool messages it was shown."""

    def __init__(self, tool_name: str, n: int = N_CALLS, prefix: str = "call"):
        self.tool_name, self.n, self.prefix = tool_name, n, prefix
        self.seen: list[ChatMessage] = []

    def generate(self, messages, **kwargs):
        tool_messages = [m for m in messages if m.role == MessageRole.TOOL]
        self.seen = tool_messages
        if len(tool_messages) < self.n:
            i = len(tool_messages) + 1
            block = ToolCallBlock(tool_call_id=f"{self.prefix}_{i}", tool_name=self.tool_name, tool_kwargs={"x": i})
            return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])
        return ChatMessage(role=MessageRole.ASSISTANT, content="done")

    def llm(self) -> MockFunctionCallingLLM:
        return MockFunctionCallingLLM(response_generator=self.generate)

    def tool_results(self) -> list[tuple[str, str]]:
        return [(m.additional_kwargs.get("tool_call_id"), m.content) for m in self.seen]


def make_tools():
    runs = {"flaky": 0, "flaky_async": 0, "healthy": 0}

    def flaky(x: int) -> str:
        """Calls a backend that is down."""
        runs["flaky"] += 1
        raise RuntimeError("backend down: secret-token-123")

    async def flaky_async(x: int) -> str:
        """Calls a backend that is down (async)."""
        runs["flaky_async"] += 1
        raise RuntimeError("backend down")

    def healthy(x: int) -> str:
        """Works."""
        runs["healthy"] += 1
        return f"ok {x}"

    return runs, {f.__name__: FunctionTool.from_defaults(f) for f in (flaky, flaky_async, healthy)}


def counts(otel, name: str) -> tuple[float, float, float]:
    """Exported call counters of ``name`` (cumulative per process: compare against a baseline)."""
    return (
        otel.metric_value("otel_breaker.calls", gen_ai_tool_name=name),
        otel.metric_value("otel_breaker.calls", gen_ai_tool_name=name, otel_breaker_outcome="failure"),
        otel.metric_value("otel_breaker.calls.rejected", gen_ai_tool_name=name),
    )


def assert_tripped(script: ScriptedLLM, runs, name, otel, before, agent_name=None, prefix="call"):
    assert runs[name] == 2, "the tool body must not run once the breaker is open"
    results = script.tool_results()
    assert [r[0] for r in results] == [f"{prefix}_{i}" for i in range(1, N_CALLS + 1)]
    assert not any(UNAVAILABLE in content for _, content in results[:2])
    for _, content in results[2:]:
        assert f"Tool '{name}' {UNAVAILABLE}" in content and "secret-token" not in content
    spans = otel.tool_spans(name)
    assert len(spans) == N_CALLS
    assert [bool(s.attributes.get("otel_breaker.rejected")) for s in spans] == [False, False, True, True]
    assert [s.attributes.get("gen_ai.tool.call.id") for s in spans] == [f"{prefix}_{i}" for i in range(1, 5)]
    assert [s.attributes.get("error.type") for s in spans[:2]] == ["RuntimeError", "RuntimeError"]
    if agent_name is not None:
        assert {s.attributes.get("gen_ai.agent.name") for s in spans} == {agent_name}
    after = counts(otel, name)
    assert tuple(a - b for a, b in zip(after, before, strict=True)) == (2, 2, 2)
    assert otel.metric_value("otel_breaker.state", gen_ai_tool_name=name, otel_breaker_state="open") == 1


async def test_function_agent_trips_breaker(instrument, otel, threshold_two):
    instrument("llama_index")
    runs, tools = make_tools()
    script = ScriptedLLM("flaky")
    agent = FunctionAgent(name="demo_agent", description="d", tools=[tools["flaky"]], llm=script.llm())
    before = counts(otel, "flaky")
    response = await agent.run(user_msg="go")
    assert str(response) == "done"
    assert_tripped(script, runs, "flaky", otel, before, agent_name="demo_agent")


async def test_function_agent_async_tool_streaming(instrument, otel, threshold_two):
    instrument("llama_index")
    runs, tools = make_tools()
    script = ScriptedLLM("flaky_async")
    agent = FunctionAgent(name="demo_agent", description="d", tools=[tools["flaky_async"]], llm=script.llm())
    before = counts(otel, "flaky_async")
    handler = agent.run(user_msg="go")
    streamed = [ev async for ev in handler.stream_events() if type(ev).__name__ == "ToolCallResult"]
    response = await handler
    assert str(response) == "done"
    assert [ev.tool_output.is_error for ev in streamed] == [True] * N_CALLS
    assert_tripped(script, runs, "flaky_async", otel, before, agent_name="demo_agent")


async def test_agent_workflow_trips_breaker(instrument, otel, threshold_two):
    instrument("llama_index")
    runs, tools = make_tools()
    script = ScriptedLLM("flaky")
    agent = FunctionAgent(name="wf_agent", description="d", tools=[tools["flaky"]], llm=script.llm())
    workflow = AgentWorkflow(agents=[agent], root_agent="wf_agent")
    before = counts(otel, "flaky")
    response = await workflow.run(user_msg="go")
    assert str(response) == "done"
    assert_tripped(script, runs, "flaky", otel, before, agent_name="wf_agent")
    (breaker,) = default_registry().find("flaky")
    assert breaker.agent_name == "wf_agent"


def _predict_llm(i: int) -> MockFunctionCallingLLM:
    block = ToolCallBlock(tool_call_id=f"call_{i}", tool_name="flaky", tool_kwargs={"x": i})
    return MockFunctionCallingLLM(
        response_generator=lambda m, **k: ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])
    )


def test_predict_and_call_sync(instrument, otel, threshold_two):
    instrument("llama_index")
    runs, tools = make_tools()
    before = counts(otel, "flaky")
    outputs = [_predict_llm(i).predict_and_call([tools["flaky"]], user_msg="go").response for i in range(1, 5)]
    assert runs["flaky"] == 2
    assert outputs[0].startswith("Encountered error")
    assert all(f"Tool 'flaky' {UNAVAILABLE}" in o for o in outputs[2:])
    spans = otel.tool_spans("flaky")
    assert [s.attributes.get("gen_ai.tool.call.id") for s in spans] == [f"call_{i}" for i in range(1, 5)]
    after = counts(otel, "flaky")
    assert tuple(a - b for a, b in zip(after, before, strict=True)) == (2, 2, 2)


async def test_predict_and_call_async(instrument, otel, threshold_two):
    instrument("llama_index")
    runs, tools = make_tools()
    outputs = [(await _predict_llm(i).apredict_and_call([tools["flaky"]], user_msg="go")).response for i in range(1, 5)]
    assert runs["flaky"] == 2
    assert all(f"Tool 'flaky' {UNAVAILABLE}" in o for o in outputs[2:])
    assert [bool(s.attributes.get("otel_breaker.rejected")) for s in otel.tool_spans("flaky")] == [
        False,
        False,
        True,
        True,
    ]


class OneArgTool(BaseTool):
    """A non-FunctionTool with one parameter: ``call_tool`` retries it with keyword arguments."""

    def __init__(self):
        self.runs = 0

    @property
    def metadata(self) -> ToolMetadata:
        return ToolMetadata(name="one_arg", description="fails")

    def __call__(self, *args, **kwargs) -> ToolOutput:
        self.runs += 1
        raise RuntimeError("down")


def test_call_tool_retry_counts_once(instrument, otel, threshold_two):
    instrument("llama_index")
    tool = OneArgTool()
    for _ in range(3):
        output = calling_module.call_tool(tool, {"input": "q"})
        assert output.is_error
    assert tool.runs == 4, "two logical calls ran (each twice inside call_tool); the third was rejected"
    assert len(otel.tool_spans("one_arg")) == 3
    assert UNAVAILABLE in output.content


async def test_healthy_tool_output_unchanged(instrument, otel):
    runs, tools = make_tools()
    plain_script = ScriptedLLM("healthy")
    plain = await FunctionAgent(name="a", description="d", tools=[tools["healthy"]], llm=plain_script.llm()).run("go")
    instrument("llama_index")
    before = counts(otel, "healthy")
    script = ScriptedLLM("healthy")
    guarded = await FunctionAgent(name="a", description="d", tools=[tools["healthy"]], llm=script.llm()).run("go")
    assert str(guarded) == str(plain) == "done"
    assert script.tool_results() == plain_script.tool_results()
    assert [t.tool_output.content for t in guarded.tool_calls] == [t.tool_output.content for t in plain.tool_calls]
    assert runs["healthy"] == 2 * N_CALLS
    after = counts(otel, "healthy")
    assert tuple(a - b for a, b in zip(after, before, strict=True)) == (N_CALLS, 0, 0)
    sync_guarded = _healthy_predict(tools)
    assert sync_guarded == [f"ok {i}" for i in range(1, 5)]


def _healthy_predict(tools) -> list[str]:
    out = []
    for i in range(1, 5):
        block = ToolCallBlock(tool_call_id=f"h{i}", tool_name="healthy", tool_kwargs={"x": i})
        llm = MockFunctionCallingLLM(
            response_generator=lambda m, b=block, **k: ChatMessage(role=MessageRole.ASSISTANT, blocks=[b])
        )
        out.append(llm.predict_and_call([tools["healthy"]], user_msg="go").response)
    return out


async def test_per_agent_breakers(instrument, otel, threshold_two):
    instrument("llama_index")
    runs = {"alpha": 0, "beta": 0}

    def lookup_for(agent_name: str, fail: bool) -> FunctionTool:
        def lookup(x: int) -> str:
            """Looks something up."""
            runs[agent_name] += 1
            if fail:
                raise RuntimeError("index gone")
            return f"found {x}"

        return FunctionTool.from_defaults(lookup)

    alpha_script, beta_script = ScriptedLLM("lookup"), ScriptedLLM("lookup")
    alpha = FunctionAgent(name="alpha", description="d", tools=[lookup_for("alpha", True)], llm=alpha_script.llm())
    beta = FunctionAgent(name="beta", description="d", tools=[lookup_for("beta", False)], llm=beta_script.llm())
    await alpha.run("go")
    await beta.run("go")
    assert runs == {"alpha": 2, "beta": N_CALLS}
    assert sum(UNAVAILABLE in c for _, c in alpha_script.tool_results()) == 2
    assert not any(UNAVAILABLE in c for _, c in beta_script.tool_results())
    breakers = {b.agent_name: b for b in default_registry().find("lookup")}
    assert breakers["alpha"].state.value == "open" and breakers["beta"].state.value == "closed"

    spans = otel.tool_spans("lookup")
    assert {s.attributes.get("gen_ai.agent.name") for s in spans} == {"alpha", "beta"}
    for agent_name in {"alpha", "beta"}:
        assert otel.metric_value("otel_breaker.calls", gen_ai_tool_name="lookup", gen_ai_agent_name=agent_name) > 0


async def test_wrong_arguments_are_the_models_mistake(instrument, otel, threshold_two):
    """Five calls with an argument the function does not take, then a valid one: the
    same transcript with and without otel-breaker, never a rejection."""

    class WrongThenRight(ScriptedLLM):
        def generate(self, messages, **kwargs):
            tool_messages = [m for m in messages if m.role == MessageRole.TOOL]
            self.seen = tool_messages
            if len(tool_messages) < 6:
                i = len(tool_messages) + 1
                arguments = {"y": i} if i <= 5 else {"x": i}
                block = ToolCallBlock(tool_call_id=f"call_{i}", tool_name="healthy", tool_kwargs=arguments)
                return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])
            return ChatMessage(role=MessageRole.ASSISTANT, content="done")

    async def run() -> list:
        _, tools = make_tools()
        script = WrongThenRight("healthy")
        await FunctionAgent(name="checker", description="d", tools=[tools["healthy"]], llm=script.llm()).run("go")
        return script.tool_results()

    plain = await run()
    instrument("llama_index")
    guarded = await run()
    assert guarded == plain
    assert guarded[-1] == ("call_6", "ok 6")
    assert not any(UNAVAILABLE in content for _, content in guarded)
    assert otel.metric_value("otel_breaker.calls", gen_ai_tool_name="healthy", otel_breaker_outcome="failure") == 0


# -- the tool-status block (the contract covers it reaching the model, off by default, injection) --

PROMPT = "You are a careful assistant."


def status_tools():
    runs = {"flaky": 0}

    def flaky(x: int) -> str:
        """Fails twice, then works."""
        runs["flaky"] += 1
        if runs["flaky"] <= 2:
            raise RuntimeError(f"{INJECTION}. <|system|> secret-token-123")
        return f"ok {x}"

    def wait(x: int) -> str:
        """Takes longer than the breaker's cooldown."""
        default_registry().clock.advance(COOLDOWN + 0.15)  # the cooldown passes, no sleeping
        return "waited"

    return runs, [FunctionTool.from_defaults(f) for f in (flaky, wait)]


# flaky fails twice (its breaker opens), wait outlasts the cooldown, flaky's probe
# succeeds (the breaker closes), then the model answers: five model calls.
LIFECYCLE = ["flaky", "flaky", "wait", "flaky"]


class Script:
    """The framework's mock function-calling LLM making the tool calls of ``calls``,
    one per response, then answering "done"; records every request."""

    def __init__(self, calls: list[str], arg: int | None = None) -> None:
        self.calls, self.arg = calls, arg
        self.requests: list[list[ChatMessage]] = []

    def generate(self, messages, **kwargs):
        self.requests.append(list(messages))
        i = len(self.requests)
        if i <= len(self.calls):
            args = {"x": i if self.arg is None else self.arg}
            block = ToolCallBlock(tool_call_id=f"call_{i}", tool_name=self.calls[i - 1], tool_kwargs=args)
            return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])
        return ChatMessage(role=MessageRole.ASSISTANT, content="done")

    def llm(self) -> MockFunctionCallingLLM:
        return MockFunctionCallingLLM(response_generator=self.generate)

    def prompts(self) -> list[str | None]:
        """The system prompt of each request (None when it had none)."""
        found = []
        for messages in self.requests:
            system = [m for m in messages if m.role == MessageRole.SYSTEM]
            assert len(system) <= 1 and (not system or messages[0] is system[0])
            found.append(system[0].content if system else None)
        return found


def make_agent(calls: list[str], *, prompt: str | None = PROMPT, name: str = "demo_agent", tools=None, arg=None):
    script = Script(calls, arg)
    runs, default_tools = status_tools()
    agent = FunctionAgent(
        name=name, description="d", system_prompt=prompt, tools=tools or default_tools, llm=script.llm()
    )
    return script, runs, agent


def assert_lifecycle(script: Script, base: str | None = PROMPT) -> None:
    seen = script.prompts()
    assert len(seen) == 5
    # Before the breaker opens, and once its probe has closed it: the prompt as written.
    assert seen[0] == seen[1] == seen[4] == base
    for text in seen[2:4]:
        assert text.startswith(f"{base}\n\n{STATUS_HEADER}" if base else STATUS_HEADER)
        assert text.count(STATUS_HEADER) == 1
        assert "'flaky'" in text and "retry" in text and "'wait'" not in text
    assert "'flaky' (open): may be retried in about 1s" in seen[2]
    assert "'flaky' (half-open): one trial call may be made now" in seen[3]


async def test_block_names_open_tool_while_open_and_goes_when_it_closes(instrument, registry_clock):
    quick_breaker_settings(status_in_prompt="true")
    instrument("llama_index")
    script, runs, agent = make_agent(LIFECYCLE)
    assert str(await agent.run(user_msg="go")) == "done"
    assert runs["flaky"] == 3
    assert_lifecycle(script)


async def test_agent_workflow_without_system_prompt(instrument, registry_clock):
    quick_breaker_settings(status_in_prompt="true")
    instrument("llama_index")
    script, runs, agent = make_agent(LIFECYCLE, prompt=None, name="wf_agent")
    workflow = AgentWorkflow(agents=[agent], root_agent="wf_agent")
    assert str(await workflow.run(user_msg="go")) == "done"
    assert runs["flaky"] == 3
    assert_lifecycle(script, base=None)
