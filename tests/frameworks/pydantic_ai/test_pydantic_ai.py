"""PydanticAI's own agent loop, offline (``FunctionModel``), with every tool call guarded by a breaker."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelRetry, ToolFailed
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from otel_breaker.breaker import State
from otel_breaker.config import load_settings, set_settings
from otel_breaker.registry import default_registry

REJECTED_TEXT = "is temporarily unavailable: its circuit breaker is open"

BODY_RUNS: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def threshold_two():
    BODY_RUNS.clear()
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2"}))


class Script:
    """A FunctionModel that calls ``tool`` ``calls`` times, one call per response, then answers
    "done"; ``seen`` is the tool results the model read before answering."""

    def __init__(self, tool: str, calls: int = 4, args: dict | None = None, prefix: str = "call") -> None:
        self.tool = tool
        self.calls = calls
        self.args = args if args is not None else {"x": 1}
        self.prefix = prefix
        self.seen: list[ToolReturnPart] = []

    def respond(self, messages, info: AgentInfo) -> ModelResponse:
        returns = [
            p
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart) and p.tool_name == self.tool
        ]
        if len(returns) < self.calls:
            call_id = f"{self.prefix}_{len(returns) + 1}"
            return ModelResponse(parts=[ToolCallPart(self.tool, dict(self.args), tool_call_id=call_id)])
        self.seen = returns
        return ModelResponse(parts=[TextPart("done")])

    async def stream(self, messages, info: AgentInfo):
        part = self.respond(messages, info).parts[0]
        if isinstance(part, ToolCallPart):
            args = json.dumps(part.args)
            yield {0: DeltaToolCall(name=part.tool_name, json_args=args, tool_call_id=part.tool_call_id)}
        else:
            yield part.content

    def model(self) -> FunctionModel:
        return FunctionModel(self.respond, stream_function=self.stream)


def failing_agent(name: str = "demo_agent", kind: str = "toolfailed") -> Agent:
    agent = Agent(name=name)

    if kind == "toolfailed":

        @agent.tool_plain
        def flaky(x: int) -> str:
            """Fails every time; the run carries on with a failed tool result."""
            BODY_RUNS["flaky"] += 1
            raise ToolFailed("backend down: secret-token-123")

    elif kind == "async":

        @agent.tool_plain
        async def flaky(x: int) -> str:
            """Fails every time, async."""
            BODY_RUNS["flaky"] += 1
            raise ToolFailed("backend down")

    elif kind == "runtime":

        @agent.tool_plain
        def flaky(x: int) -> str:
            """Raises: the run ends."""
            BODY_RUNS["flaky"] += 1
            raise RuntimeError("backend down")

    elif kind == "retry":

        @agent.tool_plain(retries=10)
        def flaky(x: int) -> str:
            """Asks the model to retry, every time."""
            BODY_RUNS["flaky"] += 1
            raise ModelRetry("try again later")

    return agent


def healthy_agent(name: str = "demo_agent") -> Agent:
    agent = Agent(name=name)

    @agent.tool_plain
    async def healthy(x: int) -> str:
        """Works."""
        BODY_RUNS["healthy"] += 1
        return f"ok {x}"

    return agent


def counters(otel, tool: str) -> tuple[float, float, float]:
    """(failures, successes, rejections) of ``tool`` so far: the exported counters
    are cumulative for the process, so tests compare differences."""
    return (
        otel.metric_value("otel_breaker.calls", gen_ai_tool_name=tool, otel_breaker_outcome="failure"),
        otel.metric_value("otel_breaker.calls", gen_ai_tool_name=tool, otel_breaker_outcome="success"),
        otel.metric_value("otel_breaker.calls.rejected", gen_ai_tool_name=tool),
    )


def delta(otel, tool: str, before: tuple[float, float, float]) -> tuple[float, ...]:
    return tuple(after - first for after, first in zip(counters(otel, tool), before, strict=True))


def assert_tripped(script: Script, output: str, otel, before, *, first_error: str = "ToolFailedError") -> None:
    assert output == "done"
    assert BODY_RUNS["flaky"] == 2, "the tool body ran after the breaker opened"
    seen = script.seen
    assert [p.outcome for p in seen] == ["failed"] * 4
    assert [REJECTED_TEXT in str(p.content) for p in seen] == [False, False, True, True]
    assert [p.tool_call_id for p in seen] == ["call_1", "call_2", "call_3", "call_4"]
    assert "Tool 'flaky'" in seen[3].model_response_str()
    assert not any("secret-token" in str(p.content) for p in seen[2:])

    (breaker,) = default_registry().find("flaky")
    assert breaker.state is State.OPEN
    assert breaker.agent_name == "demo_agent"

    spans = sorted(otel.tool_spans("flaky"), key=lambda s: s.start_time)
    assert [s.name for s in spans] == ["execute_tool flaky"] * 4
    assert [s.attributes.get("gen_ai.tool.call.id") for s in spans] == ["call_1", "call_2", "call_3", "call_4"]
    assert {s.attributes.get("gen_ai.agent.name") for s in spans} == {"demo_agent"}
    assert [bool(s.attributes.get("otel_breaker.rejected")) for s in spans] == [False, False, True, True]
    assert [s.attributes.get("error.type") for s in spans[:2]] == [first_error] * 2
    assert {s.attributes.get("otel_breaker.framework") for s in spans} == {"pydantic_ai"}

    assert delta(otel, "flaky", before) == (2, 0, 2)
    assert otel.metric_value("otel_breaker.state", gen_ai_tool_name="flaky", otel_breaker_state="open") == 1


def test_run_sync_opens_breaker_and_model_reads_rejection(instrument, otel):
    instrument("pydantic_ai")
    before = counters(otel, "flaky")
    script = Script("flaky")
    agent = failing_agent()  # breakers live as long as their agent
    output = agent.run_sync("go", model=script.model()).output
    assert_tripped(script, output, otel, before)


async def test_run_async_tool_opens_breaker(instrument, otel):
    instrument("pydantic_ai")
    before = counters(otel, "flaky")
    script = Script("flaky")
    agent = failing_agent(kind="async")
    output = (await agent.run("go", model=script.model())).output
    assert_tripped(script, output, otel, before)


async def test_run_stream_opens_breaker(instrument, otel):
    instrument("pydantic_ai")
    before = counters(otel, "flaky")
    script = Script("flaky")
    agent = failing_agent()
    async with agent.run_stream("go", model=script.model()) as result:
        output = await result.get_output()
    assert_tripped(script, output, otel, before)


def test_model_retry_counts_as_failure_when_asked(instrument, otel):
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2", "OTEL_BREAKER_COUNT_MODEL_RETRY": "true"}))
    instrument("pydantic_ai")
    before = counters(otel, "flaky")
    script = Script("flaky")
    output = failing_agent(kind="retry").run_sync("go", model=script.model()).output
    assert output == "done"
    assert BODY_RUNS["flaky"] == 2
    assert [p.outcome for p in script.seen] == ["retried", "retried", "failed", "failed"]
    assert delta(otel, "flaky", before) == (2, 0, 2)


def test_exception_that_ends_the_run_is_counted_then_rejected(instrument, otel):
    """A plain exception ends the run (the framework's choice, kept); once the breaker is
    open, the same agent's run survives the broken tool. Each rejection is charged to the
    tool's retry budget (a failure PydanticAI does not hand the model is charged): a model
    that keeps calling it is cut by PydanticAI's own limit, never by ``request_limit``."""
    from pydantic_ai.exceptions import UnexpectedModelBehavior

    instrument("pydantic_ai")
    agent = failing_agent(kind="runtime")
    for _ in range(2):
        with pytest.raises(RuntimeError, match="backend down"):
            agent.run_sync("go", model=Script("flaky", calls=1).model())
    script = Script("flaky", calls=1)
    assert agent.run_sync("go", model=script.model()).output == "done"
    stubborn = Script("flaky", calls=3)
    with pytest.raises(UnexpectedModelBehavior, match="exceeded max retries count of 1"):
        agent.run_sync("go", model=stubborn.model())
    assert BODY_RUNS["flaky"] == 2
    assert all(p.outcome == "failed" and REJECTED_TEXT in str(p.content) for p in script.seen)
    spans = sorted(otel.tool_spans("flaky"), key=lambda s: s.start_time)
    assert [s.attributes.get("error.type") for s in spans[:2]] == ["RuntimeError"] * 2


def run_healthy_sync():
    script = Script("healthy")
    result = healthy_agent().run_sync("go", model=script.model())
    return result.output, [(p.content, p.outcome, p.tool_call_id) for p in script.seen]


async def run_healthy_async():
    script = Script("healthy")
    result = await healthy_agent().run("go", model=script.model())
    return result.output, [(p.content, p.outcome, p.tool_call_id) for p in script.seen]


def test_healthy_tool_unchanged_sync(instrument, otel):
    plain = run_healthy_sync()
    instrument("pydantic_ai")
    before = counters(otel, "healthy")
    guarded = run_healthy_sync()
    assert guarded == plain
    assert guarded[1][0] == ("ok 1", "success", "call_1")
    assert BODY_RUNS["healthy"] == 8
    assert delta(otel, "healthy", before) == (0, 4, 0)
    assert len(otel.tool_spans("healthy")) == 4


async def test_healthy_tool_unchanged_async(instrument, otel):
    plain = await run_healthy_async()
    instrument("pydantic_ai")
    before = counters(otel, "healthy")
    guarded = await run_healthy_async()
    assert guarded == plain
    assert delta(otel, "healthy", before) == (0, 4, 0)


def test_invalid_arguments_are_not_counted(instrument, otel):
    """Arguments that fail validation never reach the tool body: nothing to count."""
    instrument("pydantic_ai")
    agent = Agent(name="demo_agent", retries=5)

    @agent.tool_plain
    def healthy(x: int) -> str:
        BODY_RUNS["healthy"] += 1
        return f"ok {x}"

    script = Script("healthy", calls=3, args={"x": "not a number"})
    assert agent.run_sync("go", model=script.model()).output == "done"
    assert BODY_RUNS["healthy"] == 0
    assert all(b.stats.failure_count == 0 for b in default_registry().find("healthy"))
    assert otel.tool_spans("healthy") == []


def test_conversation_is_the_session(instrument, otel):
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2", "OTEL_BREAKER_SCOPE": "session"}))
    instrument("pydantic_ai")
    agent = failing_agent()
    result = agent.run_sync("go", model=Script("flaky", calls=2).model())
    (breaker,) = default_registry().find("flaky")
    assert breaker.session_id == result.conversation_id


def test_native_instrumentation_does_not_double_count(instrument, otel):
    """PydanticAI's own execute_tool spans sit inside ours; the breaker counts each call once."""
    from pydantic_ai.models.instrumented import InstrumentationSettings

    instrument("pydantic_ai")
    before = counters(otel, "flaky")
    script = Script("flaky")
    settings = InstrumentationSettings(tracer_provider=otel.tracer_provider, include_content=False)
    agent = failing_agent()
    agent.instrument = settings
    agent.run_sync("go", model=script.model())
    assert BODY_RUNS["flaky"] == 2
    assert delta(otel, "flaky", before) == (2, 0, 2)
    ours = {s.context.span_id for s in otel.tool_spans("flaky")}
    native = [
        s
        for s in otel.finished_spans()
        if s.name == "execute_tool flaky" and not s.attributes.get("otel_breaker.guarded")
    ]
    assert native and all(s.parent is not None and s.parent.span_id in ours for s in native)


def test_rejection_takes_the_form_its_caller_expects():
    """Inside a run: a failed ToolReturnPart answering the same call; for
    ``handle_call(wrap_validation_errors=False)`` callers: the raw ``ToolFailed``."""
    from pydantic_ai.exceptions import ToolFailedError

    from otel_breaker.degrade import Rejection
    from otel_breaker.instrumentation import pydantic_ai as adapter_module
    from otel_breaker.toolcall import ToolCall

    adapter = adapter_module.PydanticAIAdapter()
    call = ToolCall("flaky", framework="pydantic_ai", call_id="c9")
    breaker = default_registry().get("flaky")
    breaker.force_open()
    info = Rejection(breaker, call)
    part = ToolCallPart("flaky", {"x": 1}, tool_call_id="c9")

    token = adapter_module._part.set(adapter_module._Answering(part, True, None, None))
    try:
        with pytest.raises(ToolFailedError) as raised:
            adapter.rejection(call, info)
    finally:
        adapter_module._part.reset(token)
    returned = raised.value.tool_failed
    assert (returned.tool_call_id, returned.outcome, returned.content) == ("c9", "failed", info.message)

    token = adapter_module._part.set(adapter_module._Answering(part, False, None, None))
    try:
        with pytest.raises(ToolFailed, match="temporarily unavailable"):
            adapter.rejection(call, info)
    finally:
        adapter_module._part.reset(token)


def test_a_spent_model_retry_budget_is_no_failure_of_the_tool(instrument, otel):
    """A tool that only asks the model to try again (``ModelRetry``) ends the run with
    ``UnexpectedModelBehavior`` once its retries are spent; the run's end is raised from
    the ``ToolRetryError``, a retry request: five such runs leave the tool's breaker closed,
    exactly as the runs go without otel-breaker."""
    from pydantic_ai.exceptions import UnexpectedModelBehavior
    from pydantic_ai.models.test import TestModel

    def runs_of_a_retrying_tool() -> list[str]:
        agent = Agent(name="retrying", retries=1)

        @agent.tool_plain
        def lookup(x: int) -> str:
            """Asks for other input every time."""
            BODY_RUNS["lookup"] += 1
            raise ModelRetry(f"no record {x}: try another id")

        ends = []
        for _ in range(5):
            with pytest.raises(UnexpectedModelBehavior) as raised:
                agent.run_sync("go", model=TestModel())
            ends.append(type(raised.value.__cause__).__name__)
        return ends

    without = runs_of_a_retrying_tool()
    runs_without = BODY_RUNS["lookup"]
    BODY_RUNS.clear()
    instrument("pydantic_ai")
    assert runs_of_a_retrying_tool() == without
    assert set(without) <= {"ModelRetry", "ToolRetryError"}
    assert BODY_RUNS["lookup"] == runs_without
    (breaker,) = default_registry().find("lookup")
    assert breaker.state is State.CLOSED
    assert breaker.stats.failure_count == 0
