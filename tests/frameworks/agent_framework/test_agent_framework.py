"""Microsoft Agent Framework's own agent loop (``Agent`` over the function-invocation
layer), offline with a scripted model, with every tool call guarded by a breaker."""

from __future__ import annotations

import pathlib
from collections import Counter

import pytest
from agent_framework import Agent, FunctionInvocationContext, FunctionMiddleware, MiddlewareTermination, tool
from agent_framework.exceptions import UserInputRequiredException
from contract import route_framework_spans
from scripted_client import ScriptedChatClient
from zero_code import launcher, run_script, script_env

from otel_breaker.breaker import State
from otel_breaker.config import load_settings, set_settings
from otel_breaker.registry import default_registry

REJECTED_TEXT = "is temporarily unavailable: its circuit breaker is open"
FRAMEWORK_ERROR = "Error: Function failed."
BODY_RUNS: Counter[str] = Counter()
SCRIPT = pathlib.Path(__file__).with_name("agent_script.py")


@pytest.fixture(autouse=True)
def threshold_two():
    BODY_RUNS.clear()
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2"}))


@tool
def flaky(item: str) -> str:
    """Fails every time (a backend that is down); sync, so it runs in a worker thread."""
    BODY_RUNS["flaky"] += 1
    raise RuntimeError("backend down: secret-token-123")


@tool
async def flaky_async(item: str) -> str:
    """Fails every time, async."""
    BODY_RUNS["flaky_async"] += 1
    raise RuntimeError("backend down")


@tool
def healthy(item: str) -> str:
    """Works."""
    BODY_RUNS["healthy"] += 1
    return f"ok {item}"


@tool
def needs_input(item: str) -> str:
    """Asks the user before going on: control flow, not a failure."""
    BODY_RUNS["needs_input"] += 1
    raise UserInputRequiredException(contents=[], message="which warehouse?")


@tool(approval_mode="always_require")
def guarded_by_approval(item: str) -> str:
    """Needs a human's approval first."""
    BODY_RUNS["guarded_by_approval"] += 1
    return "moved"


def calls(tool_name: str, n: int = 4, args: dict | None = None) -> list:
    """``n`` model turns, one call of ``tool_name`` each, ids call_1..call_n."""
    return [[(tool_name, args if args is not None else {"item": "x"}, f"call_{i + 1}")] for i in range(n)]


def make_agent(*tools, turns, name: str = "stock_agent", **options) -> tuple[Agent, ScriptedChatClient]:
    client = ScriptedChatClient(turns, **options)
    return Agent(client=client, name=name, instructions="You check stock.", tools=list(tools)), client


async def run(agent: Agent, *, stream: bool = False):
    if not stream:
        return await agent.run("check x")
    response = agent.run("check x", stream=True)
    async for _ in response:
        pass
    return await response.get_final_response()


def counters(otel, tool: str) -> tuple[float, float, float]:
    return (
        otel.metric_value("otel_breaker.calls", gen_ai_tool_name=tool, otel_breaker_outcome="failure"),
        otel.metric_value("otel_breaker.calls", gen_ai_tool_name=tool, otel_breaker_outcome="success"),
        otel.metric_value("otel_breaker.calls.rejected", gen_ai_tool_name=tool),
    )


def assert_tripped(client: ScriptedChatClient, otel, tool: str) -> None:
    results = client.tool_results()
    assert results[:2] == [FRAMEWORK_ERROR] * 2
    assert [REJECTED_TEXT in r for r in results] == [False, False, True, True]
    assert not any("secret-token" in r for r in results)
    assert BODY_RUNS[tool] == 2, "the tool body ran after the breaker opened"
    (breaker,) = default_registry().find(tool)
    assert breaker.state is State.OPEN
    assert breaker.agent_name == "stock_agent"
    spans = sorted(otel.tool_spans(tool), key=lambda s: s.start_time)
    assert [s.attributes.get("gen_ai.tool.call.id") for s in spans] == ["call_1", "call_2", "call_3", "call_4"]
    assert {s.attributes.get("gen_ai.agent.name") for s in spans} == {"stock_agent"}
    assert [bool(s.attributes.get("otel_breaker.rejected")) for s in spans] == [False, False, True, True]
    assert [s.attributes.get("error.type") for s in spans[:2]] == ["RuntimeError"] * 2
    assert counters(otel, tool) == (2, 0, 2)


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
async def test_failing_sync_tool_opens_breaker_and_model_reads_rejection(instrument, otel, stream):
    instrument("agent_framework")
    agent, client = make_agent(flaky, turns=calls("flaky"))
    response = await run(agent, stream=stream)
    assert response.text == "done"
    assert_tripped(client, otel, "flaky")


async def test_failing_async_tool_opens_breaker(instrument, otel):
    instrument("agent_framework")
    agent, client = make_agent(flaky_async, turns=calls("flaky_async"))
    assert (await run(agent)).text == "done"
    assert_tripped(client, otel, "flaky_async")


async def test_rejection_keeps_the_loop_going_past_its_own_error_limit(instrument, otel):
    """The framework ends a request after three erroring turns in a row; a rejection is a
    result, not an error, so the model keeps reading and answers. The two calls that ran
    read the tool's error, the next three the breaker's rejection, and the last one that
    the run spent its waste budget on the tool (one run: the agent's ``run``)."""
    instrument("agent_framework")
    agent, client = make_agent(flaky, turns=calls("flaky", n=6))
    assert (await run(agent)).text == "done"
    assert BODY_RUNS["flaky"] == 2
    read = client.tool_results()
    assert len(read) == 6
    assert not any(REJECTED_TEXT in r for r in read[:2]), read
    assert all(REJECTED_TEXT in r for r in read[2:5]), read
    assert "unavailable for the rest of this run" in read[5], read


async def test_bad_arguments_from_the_model_are_not_counted(instrument, otel):
    instrument("agent_framework")
    agent, client = make_agent(flaky, turns=calls("flaky", n=3, args={"wrong": 1}))
    assert (await run(agent)).text != ""
    assert BODY_RUNS["flaky"] == 0
    assert all("Argument parsing failed" in r for r in client.tool_results())
    assert counters(otel, "flaky") == (0, 0, 0)
    # validation failed before the function was reached: its breaker (whose settings the loop
    # guard reads for the model's mistakes) counted nothing
    assert all(b.stats.failure_count == 0 for b in default_registry().find("flaky"))


async def test_unknown_tool_is_not_counted(instrument, otel):
    instrument("agent_framework")
    agent, _client = make_agent(flaky, turns=calls("no_such_tool", n=2))
    await run(agent)
    assert default_registry().find("no_such_tool") == []
    assert default_registry().find("flaky") == []


async def test_user_input_request_is_control_flow(instrument, otel):
    instrument("agent_framework")
    agent, client = make_agent(needs_input, turns=[])
    for _ in range(3):
        client.turns = calls("needs_input", n=1)
        await run(agent)
    assert BODY_RUNS["needs_input"] == 3
    (breaker,) = default_registry().find("needs_input")
    assert breaker.state is State.CLOSED
    assert counters(otel, "needs_input")[0] == 0


async def test_approval_request_does_not_run_or_count(instrument, otel):
    instrument("agent_framework")
    agent, _client = make_agent(guarded_by_approval, turns=calls("guarded_by_approval", n=1))
    response = await run(agent)
    assert [c.type for m in response.messages for c in m.contents if c.type == "function_approval_request"]
    assert BODY_RUNS["guarded_by_approval"] == 0
    assert counters(otel, "guarded_by_approval") == (0, 0, 0)


class PassThrough(FunctionMiddleware):
    """Function middleware that only calls on: the loop's middleware path."""

    async def process(self, context: FunctionInvocationContext, call_next) -> None:
        await call_next()


@tool
def stopper(item: str) -> str:
    """Ends the loop from inside the call (the middleware path lets the signal through)."""
    BODY_RUNS["stopper"] += 1
    raise MiddlewareTermination("stop here", result="stopped")


async def test_middleware_termination_is_control_flow(instrument, otel):
    instrument("agent_framework")
    agent, client = make_agent(stopper, turns=[], middleware=[PassThrough()])
    for turn in range(3):
        client.turns = calls("stopper", n=1)
        await run(agent)
        assert len(client.sent) == turn + 1  # the loop ended after the call
    assert BODY_RUNS["stopper"] == 3
    assert default_registry().find("stopper")[0].state is State.CLOSED
    assert counters(otel, "stopper")[0] == 0


async def test_direct_invoke_is_guarded_and_rejection_takes_the_callers_form(instrument, otel):
    instrument("agent_framework")
    for _ in range(2):
        with pytest.raises(RuntimeError):
            await flaky.invoke(arguments={"item": "x"})
    parsed = await flaky.invoke(arguments={"item": "x"})
    assert [c.type for c in parsed] == ["text"] and REJECTED_TEXT in parsed[0].text
    raw = await flaky.invoke(arguments={"item": "x"}, skip_parsing=True)
    assert isinstance(raw, str) and REJECTED_TEXT in raw
    assert BODY_RUNS["flaky"] == 2
    (breaker,) = default_registry().find("flaky")
    assert breaker.agent_name is None


async def test_the_agent_mark_ends_with_its_run(instrument, otel):
    instrument("agent_framework")
    agent, _client = make_agent(healthy, turns=calls("healthy", n=1))
    await run(agent)
    await healthy.invoke(arguments={"item": "x"})  # same task, after the run
    spans = sorted(otel.tool_spans("healthy"), key=lambda s: s.start_time)
    assert [s.attributes.get("gen_ai.agent.name") for s in spans] == ["stock_agent", None]


# -- the framework's own execute_tool spans -------------------------------------------------------


async def test_native_tool_spans_hold_ours_and_are_not_counted_twice(instrument, otel):
    """Agent Framework traces each tool call itself (on by default): with the span processor
    on its spans too, a guarded call still counts once, and its span is the framework's, annotated."""
    with route_framework_spans(otel) as native_spans:
        await _run_failing(instrument, otel)
    # One execute_tool span per call: the framework's own, holding our attributes (none of ours is started).
    spans = [s for s in native_spans.get_finished_spans() if s.name == "execute_tool flaky"]
    assert len(spans) == 4
    assert all(s.attributes.get("otel_breaker.guarded") for s in spans)
    assert {s.instrumentation_scope.name for s in spans} != {"otel_breaker"}
    assert [s.attributes.get("gen_ai.tool.call.id") for s in spans] == ["call_1", "call_2", "call_3", "call_4"]
    assert [s.attributes.get("otel_breaker.rejected") for s in spans] == [False, False, True, True]
    assert [s.attributes.get("otel_breaker.state") for s in spans] == ["closed", "closed", "open", "open"]


async def _run_failing(instrument, otel) -> None:
    instrument("agent_framework")
    agent, _client = make_agent(flaky, turns=calls("flaky"))
    await run(agent)
    assert BODY_RUNS["flaky"] == 2
    assert counters(otel, "flaky") == (2, 0, 2)
    (breaker,) = default_registry().find("flaky")
    assert breaker.state is State.OPEN


@pytest.mark.parametrize("framework_tracing", ["true", "false"])
def test_opentelemetry_instrument_counts_a_natively_traced_call_once(framework_tracing):
    """With its tracing on (the default) the framework's span is the call's one span;
    with ``ENABLE_INSTRUMENTATION=false`` ours is: one either way."""
    env = script_env(
        ENABLE_INSTRUMENTATION=framework_tracing,
        OTEL_BREAKER_FAILURE_THRESHOLD="2",
        OTEL_TRACES_EXPORTER="console",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
    )
    out, stdout = run_script(SCRIPT, env, marker='{"body_runs"', launch=launcher())
    assert out["body_runs"] == 2  # counted twice, the breaker would have opened after the first call
    # one span per call, holding our attributes: the framework's own, or ours when its tracing is off
    assert stdout.count('"name": "execute_tool inventory"') == 5
    assert stdout.count('"otel_breaker.guarded": true') == 5
    assert ('"name": "invoke_agent' in stdout) == (framework_tracing == "true")


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
async def test_loop_stop_reaches_the_caller_of_the_run(instrument, otel, stream):
    """``loop_action=stop`` ends the run with ``ToolLoopError``: the loop turns a tool's
    ``Exception`` into a result for the model, and lets this one through to the caller."""
    from otel_breaker import ToolLoopError

    set_settings(
        load_settings(
            {
                "OTEL_BREAKER_FAILURE_THRESHOLD": "50",
                "OTEL_BREAKER_LOOP_COUNT": "mistakes,failures",
                "OTEL_BREAKER_LOOP_ACTION": "stop",
            }
        )
    )
    instrument("agent_framework")
    agent, client = make_agent(
        flaky, turns=calls("flaky", n=8), function_invocation_configuration={"max_consecutive_errors_per_request": 20}
    )
    with pytest.raises(ToolLoopError) as raised:
        await run(agent, stream=stream)
    assert (raised.value.tool, raised.value.count) == ("flaky", 3)
    assert BODY_RUNS["flaky"] == 3 and len(client.sent) == 4
