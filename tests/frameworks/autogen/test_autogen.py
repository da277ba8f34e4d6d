"""AutoGen: real AssistantAgent loops (run, run_stream, a team) driven by ReplayChatCompletionClient.

The scripted model asks for a tool several times and then answers "done". A
failing tool opens its breaker at the threshold; later calls must not run the
tool body, the model must read the rejection text as an error result, and the
loop must end normally. A healthy tool must behave exactly as without
instrumentation. Handoffs are never guarded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import warnings
from collections.abc import AsyncGenerator

os.environ.setdefault("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
from autogen_agentchat.messages import HandoffMessage, TextMessage, ToolCallExecutionEvent
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import CancellationToken, FunctionCall
from autogen_core.models import CreateResult, FunctionExecutionResultMessage, RequestUsage
from autogen_core.tools import BaseStreamTool, BaseTool, FunctionTool
from autogen_ext.models.replay import ReplayChatCompletionClient
from pydantic import BaseModel

from otel_breaker import State
from otel_breaker.config import load_settings, set_settings
from otel_breaker.guards import Guard
from otel_breaker.instrumentation.autogen import AutoGenAdapter
from otel_breaker.registry import BreakerRegistry, default_registry

logging.getLogger("autogen_core").setLevel(logging.ERROR)
warnings.filterwarnings("ignore", message=".*Token count.*")

REJECTION = "is temporarily unavailable"
MODEL_INFO = {
    "vision": False,
    "function_calling": True,
    "json_output": False,
    "family": "unknown",
    "structured_output": False,
}
BODY_RUNS: dict[str, int] = {}
BACKEND_UP = [True]


@pytest.fixture(autouse=True)
def _reset_counts():
    BODY_RUNS.clear()
    BACKEND_UP[0] = True
    yield


def _threshold(n: int = 2) -> None:
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": str(n)}))


def _count(name: str) -> None:
    BODY_RUNS[name] = BODY_RUNS.get(name, 0) + 1


async def flaky(q: str) -> str:
    """A tool whose backend is down."""
    _count("flaky")
    raise RuntimeError("backend down")


def healthy(q: str) -> str:
    """A tool that works (sync: FunctionTool runs it in a thread)."""
    _count("healthy")
    return f"ok:{q}"


async def backend(q: str) -> str:
    """A tool whose backend goes down and comes back."""
    _count("backend")
    if not BACKEND_UP[0]:
        raise ConnectionError("backend down")
    return f"ok:{q}"


class Query(BaseModel):
    q: str


class Answer(BaseModel):
    text: str


class Progressing(BaseStreamTool[Query, TextMessage, Answer]):
    """A streaming tool: reports progress, then returns (or fails when the backend is down)."""

    def __init__(self) -> None:
        super().__init__(Query, Answer, "progressing", "A streaming tool.")

    async def run(self, args: Query, cancellation_token: CancellationToken) -> Answer:
        result = None
        async for item in self.run_stream(args, cancellation_token):
            result = item
        return result

    async def run_stream(self, args: Query, cancellation_token: CancellationToken) -> AsyncGenerator:
        _count("progressing")
        yield TextMessage(content=f"working on {args.q}", source="progressing")
        if not BACKEND_UP[0]:
            raise ConnectionError("backend down")
        yield Answer(text=f"ok:{args.q}")


class RecordingClient(ReplayChatCompletionClient):
    """Records the messages of every model call (``create_stream`` does not)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen_messages: list[list] = []

    async def create(self, messages, **kwargs):
        self.seen_messages.append(list(messages))
        return await super().create(messages, **kwargs)

    async def create_stream(self, messages, **kwargs):
        self.seen_messages.append(list(messages))
        async for chunk in super().create_stream(messages, **kwargs):
            yield chunk

    def tool_results(self) -> list[tuple[bool, str]]:
        """(is_error, content) of every tool result the model was given, in order."""
        results = []
        for messages in self.seen_messages:
            last = messages[-1]
            if isinstance(last, FunctionExecutionResultMessage):
                results.extend((r.is_error, r.content) for r in last.content)
        return results


def _script(tool_name: str, n: int = 4, prefix: str = "call") -> list:
    usage = RequestUsage(prompt_tokens=0, completion_tokens=0)
    calls = [
        CreateResult(
            finish_reason="function_calls",
            usage=usage,
            cached=False,
            content=[FunctionCall(id=f"{prefix}_{i}", name=tool_name, arguments=json.dumps({"q": f"x{i}"}))],
        )
        for i in range(1, n + 1)
    ]
    return [*calls, "done TERMINATE"]


def _agent(tool: BaseTool | object, name: str = "helper", n: int = 4, stream: bool = False, **kwargs):
    tool_obj = tool if isinstance(tool, BaseTool) else FunctionTool(tool, description=tool.__name__)
    client = RecordingClient(_script(tool_obj.name, n), model_info=MODEL_INFO)
    agent = AssistantAgent(
        name, model_client=client, tools=[tool_obj], max_tool_iterations=n + 2, model_client_stream=stream, **kwargs
    )
    return agent, client


async def _run(agent, mode: str):
    """Run ``agent`` through one of AutoGen's entry points; returns the final message text."""
    task = "use the tool, then say done"
    if mode == "run":
        result = await agent.run(task=task)
    elif mode == "run_stream":
        result = None
        async for event in agent.run_stream(task=task):
            result = event
    else:
        team = RoundRobinGroupChat(
            [agent], termination_condition=TextMentionTermination("TERMINATE") | MaxMessageTermination(20)
        )
        result = await team.run(task=task)
    return result.messages[-1].content


# -- a failing tool ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["run", "run_stream", "team"])
async def test_failing_tool_opens_breaker_and_model_reads_rejection(mode, otel, instrument):
    instrument("autogen")
    _threshold(2)
    name = f"helper_{mode}"  # counters are process-lifetime totals: keep this test's series apart
    agent, client = _agent(flaky, name=name, stream=mode == "run_stream")

    final = await _run(agent, mode)

    assert "done" in final  # the loop ended normally
    assert BODY_RUNS == {"flaky": 2}  # calls 3 and 4 did not run the tool
    results = client.tool_results()
    assert [is_error for is_error, _ in results] == [True] * 4
    assert [content for _, content in results[:2]] == ["backend down"] * 2
    assert all(REJECTION in content and content.startswith("Tool 'flaky'") for _, content in results[2:])

    spans = otel.tool_spans("flaky")
    assert [s.attributes["otel_breaker.rejected"] for s in spans] == [False, False, True, True]
    assert [s.attributes["gen_ai.tool.call.id"] for s in spans] == ["call_1", "call_2", "call_3", "call_4"]
    assert all(s.attributes["gen_ai.agent.name"] == name for s in spans)
    assert all(s.attributes["otel_breaker.framework"] == "autogen" for s in spans)
    assert [s.attributes.get("error.type") for s in spans] == ["RuntimeError"] * 2 + ["circuit_open"] * 2

    (breaker,) = default_registry().find("flaky")
    assert breaker.state is State.OPEN and breaker.agent_name == name
    labels = {"gen_ai_tool_name": "flaky", "gen_ai_agent_name": name}
    assert otel.metric_value("otel_breaker.calls", otel_breaker_outcome="failure", **labels) == 2
    assert otel.metric_value("otel_breaker.calls", otel_breaker_outcome="success", **labels) == 0
    assert otel.metric_value("otel_breaker.calls.rejected", **labels) == 2
    assert otel.metric_value("otel_breaker.state", otel_breaker_state="open", **labels) == 1


def test_sync_caller_through_asyncio_run(otel, instrument):
    """AutoGen is async only; a sync program drives it with asyncio.run and is guarded the same."""
    instrument("autogen")
    _threshold(2)
    agent, client = _agent(flaky, name="sync_caller")
    final = asyncio.run(_run(agent, "run"))
    assert "done" in final
    assert BODY_RUNS == {"flaky": 2}
    assert sum(REJECTION in content for _, content in client.tool_results()) == 2


async def test_streaming_tool_is_guarded_and_still_streams(otel, instrument):
    instrument("autogen")
    _threshold(2)
    BACKEND_UP[0] = False
    agent, client = _agent(Progressing(), name="streamer")
    events = [event async for event in agent.run_stream(task="go")]

    progress = [e for e in events if isinstance(e, TextMessage) and e.source == "progressing"]
    assert len(progress) == 2  # streamed items of the two calls that ran
    assert BODY_RUNS == {"progressing": 2}
    results = client.tool_results()
    assert [content for _, content in results[:2]] == ["backend down"] * 2
    assert all(is_error and REJECTION in content for is_error, content in results[2:])
    spans = otel.tool_spans("progressing")
    assert [s.attributes["otel_breaker.rejected"] for s in spans] == [False, False, True, True]
    assert [s.attributes["gen_ai.tool.call.id"] for s in spans] == ["call_1", "call_2", "call_3", "call_4"]


# -- a healthy tool is untouched -------------------------------------------------------------------


def _execution_results(events) -> list[tuple[str, bool, str]]:
    return [
        (r.call_id, r.is_error, r.content) for e in events if isinstance(e, ToolCallExecutionEvent) for r in e.content
    ]


@pytest.mark.parametrize("tool_factory", [lambda: healthy, Progressing], ids=["function", "stream"])
async def test_healthy_tool_results_are_identical_with_and_without_instrumentation(tool_factory, otel, instrument):
    plain_agent, plain_client = _agent(tool_factory(), name="healthy_agent")
    plain = await plain_agent.run(task="go")
    plain_results = _execution_results(plain.messages)

    instrument("autogen")
    agent, client = _agent(tool_factory(), name="healthy_agent")
    guarded = await agent.run(task="go")

    assert _execution_results(guarded.messages) == plain_results
    assert all(not is_error and "ok:x" in content for _, is_error, content in plain_results)
    assert [m.content for m in guarded.messages if isinstance(m, TextMessage)] == [
        m.content for m in plain.messages if isinstance(m, TextMessage)
    ]
    assert client.tool_results() == plain_client.tool_results()
    assert sum(BODY_RUNS.values()) == 8
    spans = otel.tool_spans()
    assert len(spans) == 4 and not any(s.attributes["otel_breaker.rejected"] for s in spans)


async def test_direct_run_json_returns_the_same_value(instrument):
    tool = FunctionTool(healthy, description="healthy")
    expected = await tool.run_json({"q": "direct"}, CancellationToken(), call_id="c1")
    instrument("autogen")
    assert await tool.run_json({"q": "direct"}, CancellationToken(), call_id="c1") == expected == "ok:direct"
    assert await tool.run_json(args={"q": "direct"}, cancellation_token=CancellationToken()) == expected
    assert default_registry().find("healthy")  # guarded, process scope (no agent)


# -- handoffs, keying, recovery, uninstrument ------------------------------------------------------


async def test_handoffs_are_never_guarded(otel, instrument):
    instrument("autogen")
    _threshold(1)
    usage = RequestUsage(prompt_tokens=0, completion_tokens=0)
    client = RecordingClient(
        [
            CreateResult(
                finish_reason="function_calls",
                usage=usage,
                cached=False,
                content=[FunctionCall(id="h1", name="transfer_to_expert", arguments="{}")],
            )
        ],
        model_info=MODEL_INFO,
    )
    agent = AssistantAgent("router", model_client=client, handoffs=["expert"], tools=[FunctionTool(healthy, "h")])
    result = await agent.run(task="hand over")
    assert isinstance(result.messages[-1], HandoffMessage)
    assert result.messages[-1].target == "expert"
    assert not default_registry().find("transfer_to_expert")
    assert not otel.tool_spans("transfer_to_expert")
    # ... also when a handoff tool is run outside an agent turn
    handoff_tool = agent._handoff_tools[0]
    assert await handoff_tool.run_json({}, CancellationToken()) == await handoff_tool.run_json({}, CancellationToken())
    assert not default_registry().find("transfer_to_expert")


async def test_each_agent_has_its_own_breaker(otel, instrument):
    instrument("autogen")
    _threshold(2)
    tool = FunctionTool(flaky, description="flaky")  # the very same tool object in both agents
    first, _ = _agent(tool, name="first")
    second, second_client = _agent(tool, name="second", n=2)

    await first.run(task="go")
    assert BODY_RUNS == {"flaky": 2}
    await second.run(task="go")
    assert BODY_RUNS == {"flaky": 4}  # the second agent's breaker was still closed
    assert not any(REJECTION in content for _, content in second_client.tool_results())
    breakers = {b.agent_name: b for b in default_registry().find("flaky")}
    assert set(breakers) == {"first", "second"}

    spans = otel.tool_spans("flaky")
    assert {s.attributes.get("gen_ai.agent.name") for s in spans} == {"first", "second"}
    for agent_name in {"first", "second"}:
        assert otel.metric_value("otel_breaker.calls", gen_ai_tool_name="flaky", gen_ai_agent_name=agent_name) > 0


async def test_parallel_calls_in_one_message_are_each_counted(otel, instrument):
    instrument("autogen")
    _threshold(2)
    usage = RequestUsage(prompt_tokens=0, completion_tokens=0)
    calls = [FunctionCall(id=f"p{i}", name="flaky", arguments=json.dumps({"q": str(i)})) for i in range(3)]
    client = RecordingClient(
        [CreateResult(finish_reason="function_calls", usage=usage, cached=False, content=calls), "done"],
        model_info=MODEL_INFO,
    )
    agent = AssistantAgent("parallel", model_client=client, tools=[FunctionTool(flaky, "f")], max_tool_iterations=3)
    await agent.run(task="go")
    spans = otel.tool_spans("flaky")
    assert sorted(s.attributes["gen_ai.tool.call.id"] for s in spans) == ["p0", "p1", "p2"]
    assert BODY_RUNS["flaky"] + sum(s.attributes["otel_breaker.rejected"] for s in spans) == 3


async def test_breaker_recovers_after_cooldown():
    """After the cooldown the next call is a probe; a good probe closes the breaker.

    The adapter runs on its own registry with an injected clock: no waiting."""
    now = [1000.0]
    registry = BreakerRegistry(
        settings=load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2", "OTEL_BREAKER_RECOVERY_TIMEOUT": "30"}),
        clock=lambda: now[0],
    )
    adapter = AutoGenAdapter(Guard(registry))
    adapter.patch()
    try:
        BACKEND_UP[0] = False
        tool = FunctionTool(backend, description="backend")
        agent, client = _agent(tool, name="recovering", n=3)
        await agent.run(task="go")
        (breaker,) = registry.find("backend")
        changes = []
        breaker.on_state_change(lambda change: changes.append((change.from_state.value, change.to_state.value)))
        assert breaker.state is State.OPEN and BODY_RUNS == {"backend": 2}
        assert REJECTION in client.tool_results()[2][1]

        now[0] += 31  # the cooldown is over
        BACKEND_UP[0] = True
        agent._model_client = RecordingClient(_script("backend", 3, prefix="again"), model_info=MODEL_INFO)
        await agent.run(task="again")
        assert changes == [("open", "half_open"), ("half_open", "closed")]
        assert breaker.state is State.CLOSED and BODY_RUNS == {"backend": 5}
        assert all(not is_error and "ok:x" in content for is_error, content in agent._model_client.tool_results())
    finally:
        adapter.unpatch()


async def test_bad_arguments_are_the_models_mistake(otel, instrument):
    """Arguments the tool's args model rejects, five times, then valid ones: the same
    results with and without otel-breaker (but for the loop guard's answer to the 4th and
    5th identical call, docs/loops.md), and never a breaker's rejection."""
    _threshold(2)
    usage = RequestUsage(prompt_tokens=0, completion_tokens=0)

    def script() -> list:
        def turn(i: int, arguments: dict) -> CreateResult:
            content = [FunctionCall(id=f"c{i}", name="healthy", arguments=json.dumps(arguments))]
            return CreateResult(finish_reason="function_calls", usage=usage, cached=False, content=content)

        return [*(turn(i, {"q": ["not", "text"]}) for i in range(5)), turn(9, {"q": "fine"}), "done TERMINATE"]

    async def run() -> list:
        tool = FunctionTool(healthy, description="healthy")
        agent = AssistantAgent(
            "checker",
            model_client=RecordingClient(script(), model_info=MODEL_INFO),
            tools=[tool],
            max_tool_iterations=8,
        )
        return _execution_results((await agent.run(task="go")).messages)

    plain = await run()
    instrument("autogen")
    guarded = await run()
    assert guarded[:3] == plain[:3] and guarded[-1] == plain[-1]
    assert all("this exact call, with the same arguments" in text for _, _, text in guarded[3:5])
    assert guarded[-1][1] is False and "ok:fine" in guarded[-1][2]
    assert all(is_error for _, is_error, _ in guarded[:-1])
    assert otel.metric_value("otel_breaker.calls", gen_ai_tool_name="healthy", otel_breaker_outcome="failure") == 0
