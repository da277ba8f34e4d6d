"""Semantic Kernel's own auto function calling (``ChatCompletionAgent`` and the kernel
alone), offline with a scripted chat-completion service, with every plugin function
call guarded by a breaker."""

from __future__ import annotations

import logging
import pathlib
from collections import Counter

import pytest
from contract import route_framework_spans
from scripted_service import ScriptedChatService
from semantic_kernel import Kernel
from semantic_kernel.agents import ChatCompletionAgent
from semantic_kernel.connectors.ai.function_choice_behavior import FunctionChoiceBehavior
from semantic_kernel.connectors.ai.prompt_execution_settings import PromptExecutionSettings
from semantic_kernel.exceptions import KernelInvokeException, OperationCancelledException
from semantic_kernel.filters import FilterTypes
from semantic_kernel.functions import KernelArguments, kernel_function
from zero_code import launcher, run_script, script_env

from otel_breaker.breaker import State
from otel_breaker.config import load_settings, set_settings
from otel_breaker.registry import default_registry

REJECTED_TEXT = "is temporarily unavailable: its circuit breaker is open"
KERNEL_ERROR = "An error occurred while invoking the function Stock-lookup"
BODY_RUNS: Counter[str] = Counter()
SCRIPT = pathlib.Path(__file__).with_name("agent_script.py")


@pytest.fixture(autouse=True)
def threshold_two():
    BODY_RUNS.clear()
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2"}))
    logging.getLogger("semantic_kernel").setLevel(logging.CRITICAL)  # a traceback per failed call


class Stock:
    """A plugin: ``lookup`` fails (its backend is down), the others work."""

    @kernel_function(description="Stock level, sync")
    def lookup(self, item: str, count: int = 1) -> str:
        BODY_RUNS["lookup"] += 1
        raise RuntimeError("backend down: secret-token-123")

    @kernel_function(description="Stock level, async")
    async def lookup_async(self, item: str) -> str:
        BODY_RUNS["lookup_async"] += 1
        raise RuntimeError("backend down")

    @kernel_function(description="Works")
    def healthy(self, item: str) -> str:
        BODY_RUNS["healthy"] += 1
        return f"ok {item}"


def calls(function: str, n: int = 4, args: dict | str | None = None) -> list:
    """``n`` model turns, one call of ``Stock-<function>`` each, ids call_1..call_n."""
    return [[(f"Stock-{function}", args if args is not None else {"item": "x"}, f"call_{i + 1}")] for i in range(n)]


def make_kernel(turns) -> tuple[Kernel, ScriptedChatService]:
    service = ScriptedChatService(turns)
    kernel = Kernel()
    kernel.add_service(service)
    kernel.add_plugin(Stock(), "Stock")
    return kernel, service


def make_agent(turns, name: str = "stock_agent") -> tuple[ChatCompletionAgent, ScriptedChatService]:
    kernel, service = make_kernel(turns)
    agent = ChatCompletionAgent(
        kernel=kernel,
        name=name,
        instructions="You check stock.",
        function_choice_behavior=FunctionChoiceBehavior.Auto(),
    )
    return agent, service


async def run(agent: ChatCompletionAgent, how: str = "get_response", message: str = "check x") -> str:
    if how == "get_response":
        return str((await agent.get_response(message)).message.content)
    if how == "invoke":
        return [str(r.message.content) async for r in agent.invoke(message)][-1]
    return "".join([str(r.message.content) async for r in agent.invoke_stream(message)])


def counters(otel, tool: str) -> tuple[float, float, float]:
    return (
        otel.metric_value("otel_breaker.calls", gen_ai_tool_name=tool, otel_breaker_outcome="failure"),
        otel.metric_value("otel_breaker.calls", gen_ai_tool_name=tool, otel_breaker_outcome="success"),
        otel.metric_value("otel_breaker.calls.rejected", gen_ai_tool_name=tool),
    )


def assert_tripped(service: ScriptedChatService, otel, function: str, agent_name: str | None = "stock_agent") -> None:
    tool = f"Stock-{function}"
    results = service.tool_results()
    assert [r.startswith(f"An error occurred while invoking the function {tool}") for r in results] == [
        True,
        True,
        False,
        False,
    ]
    assert [REJECTED_TEXT in r for r in results] == [False, False, True, True]
    assert all(f"Tool '{tool}'" in r for r in results[2:])
    assert BODY_RUNS[function] == 2, "the function body ran after the breaker opened"
    (breaker,) = default_registry().find(tool)
    assert breaker.state is State.OPEN
    assert breaker.agent_name == agent_name
    spans = sorted(otel.tool_spans(tool), key=lambda s: s.start_time)
    assert [s.attributes.get("gen_ai.tool.call.id") for s in spans] == ["call_1", "call_2", "call_3", "call_4"]
    assert {s.attributes.get("gen_ai.agent.name") for s in spans} == {agent_name}
    assert [bool(s.attributes.get("otel_breaker.rejected")) for s in spans] == [False, False, True, True]
    assert [s.attributes.get("error.type") for s in spans[:2]] == ["RuntimeError"] * 2
    assert counters(otel, tool) == (2, 0, 2)


@pytest.mark.parametrize("how", ["get_response", "invoke", "invoke_stream"])
async def test_failing_function_opens_breaker_and_model_reads_rejection(instrument, otel, how):
    instrument("semantic_kernel")
    agent, service = make_agent(calls("lookup"))
    assert (await run(agent, how)).endswith("done")
    assert_tripped(service, otel, "lookup")


async def test_failing_async_function_opens_breaker(instrument, otel):
    instrument("semantic_kernel")
    agent, service = make_agent(calls("lookup_async"))
    assert await run(agent) == "done"
    assert_tripped(service, otel, "lookup_async")


async def test_kernel_alone_is_guarded_without_an_agent(instrument, otel):
    """``invoke_prompt`` with auto function calling: the prompt function itself is a
    model call and passes through; the plugin functions it calls are guarded."""
    instrument("semantic_kernel")
    kernel, service = make_kernel(calls("lookup"))
    settings = PromptExecutionSettings(function_choice_behavior=FunctionChoiceBehavior.Auto())
    result = await kernel.invoke_prompt("check x", arguments=KernelArguments(settings=settings))
    assert str(result) == "done"
    assert_tripped(service, otel, "lookup", agent_name=None)
    assert {b.name for b in default_registry().breakers()} == {"Stock-lookup"}


async def test_kernel_invoke_raises_then_returns_the_rejection(instrument, otel):
    instrument("semantic_kernel")
    kernel, _ = make_kernel([])
    for _ in range(2):
        with pytest.raises(KernelInvokeException):
            await kernel.invoke(plugin_name="Stock", function_name="lookup", item="x")
    result = await kernel.invoke(plugin_name="Stock", function_name="lookup", item="x")
    assert REJECTED_TEXT in str(result.value)
    assert result.function.fully_qualified_name == "Stock-lookup"
    assert BODY_RUNS["lookup"] == 2


async def test_arguments_the_method_cannot_take_are_not_counted(instrument, otel):
    instrument("semantic_kernel")
    agent, service = make_agent(calls("lookup", n=3, args={"item": "x", "count": "many"}))
    await run(agent)
    assert BODY_RUNS["lookup"] == 0
    assert all("is expected to be parsed" in r for r in service.tool_results())
    assert counters(otel, "Stock-lookup") == (0, 0, 0)
    assert default_registry().find("Stock-lookup")[0].state is State.CLOSED


async def test_unknown_function_and_missing_arguments_are_not_counted(instrument, otel):
    instrument("semantic_kernel")
    agent, _ = make_agent([*calls("nothing", n=2), *calls("lookup", n=2, args={})])
    await run(agent)
    assert BODY_RUNS["lookup"] == 0
    assert default_registry().breakers() == []


async def test_cancellation_by_a_filter_is_control_flow(instrument, otel):
    instrument("semantic_kernel")
    agent, _ = make_agent(calls("lookup", n=3))

    async def cancel(context, next):
        raise OperationCancelledException("user cancelled")

    agent.kernel.add_filter(FilterTypes.FUNCTION_INVOCATION, cancel)
    await run(agent)
    assert BODY_RUNS["lookup"] == 0
    assert default_registry().find("Stock-lookup") == []  # cancelled before the method was reached
    assert counters(otel, "Stock-lookup") == (0, 0, 0)


async def test_approval_filter_that_answers_instead_is_not_counted(instrument, otel):
    """An auto-invocation filter that declines (does not call on) or ends the loop decides
    before the function runs: nothing to count."""
    instrument("semantic_kernel")
    agent, service = make_agent(calls("lookup", n=3))

    async def deny(context, next):
        context.function_result = type(context.function_result)(function=context.function.metadata, value="denied")
        context.terminate = True

    agent.kernel.add_filter(FilterTypes.AUTO_FUNCTION_INVOCATION, deny)
    await run(agent)
    assert BODY_RUNS["lookup"] == 0
    assert default_registry().breakers() == []
    assert len(service.sent) == 1  # terminated after the first call


async def test_the_agent_mark_ends_with_its_run(instrument, otel):
    instrument("semantic_kernel")
    agent, _ = make_agent(calls("healthy", n=1))
    await run(agent)
    await agent.kernel.invoke(plugin_name="Stock", function_name="healthy", item="y")  # same task, after the run
    spans = sorted(otel.tool_spans("Stock-healthy"), key=lambda s: s.start_time)
    assert [s.attributes.get("gen_ai.agent.name") for s in spans] == ["stock_agent", None]


@pytest.mark.parametrize("how", ["get_response", "invoke_stream"])
async def test_status_block_is_refreshed_within_a_run(instrument, otel, how):
    """The run's system message is refreshed after each function call: the model call right
    after the breaker opens already reads it; the agent's own instructions never change."""
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2", "OTEL_BREAKER_STATUS_IN_PROMPT": "true"}))
    instrument("semantic_kernel")
    agent, service = make_agent([*calls("lookup", n=2), "noted"])
    await run(agent, how)
    prompts = service.system_prompts()
    assert prompts[:2] == ["You check stock."] * 2
    assert prompts[2].startswith("You check stock.\n\n") and "'Stock-lookup' (open)" in prompts[2]
    assert "secret-token" not in prompts[2]
    assert agent.instructions == "You check stock."
    await run(agent, how, message="again")
    assert "'Stock-lookup' (open)" in service.system_prompts()[3]  # from the start of the next run


# -- the kernel's own execute_tool spans ----------------------------------------------------------


async def test_native_tool_spans_hold_ours_and_are_not_counted_twice(instrument, otel):
    """The kernel traces every function it invokes: with the span processor on its spans too,
    a guarded call still counts once, and its span is the kernel's, annotated."""
    with route_framework_spans(otel) as native_spans:
        instrument("semantic_kernel")
        agent, _ = make_agent(calls("lookup"))
        await run(agent)
    assert BODY_RUNS["lookup"] == 2
    assert counters(otel, "Stock-lookup") == (2, 0, 2)
    assert default_registry().find("Stock-lookup")[0].state is State.OPEN
    # One execute_tool span per call: the kernel's own, holding our attributes (none of ours is started).
    spans = [s for s in native_spans.get_finished_spans() if s.name == "execute_tool Stock-lookup"]
    assert len(spans) == 4
    assert all(s.attributes.get("otel_breaker.guarded") for s in spans)
    assert {s.instrumentation_scope.name for s in spans} != {"otel_breaker"}
    assert [s.attributes.get("gen_ai.tool.call.id") for s in spans] == ["call_1", "call_2", "call_3", "call_4"]
    assert [s.attributes.get("otel_breaker.rejected") for s in spans] == [False, False, True, True]
    assert [s.attributes.get("otel_breaker.state") for s in spans] == ["closed", "closed", "open", "open"]


async def test_prompt_functions_are_not_taken_for_tools_by_the_span_processor(instrument, otel):
    """``invoke_prompt`` runs a freshly named prompt function (a model call) that the kernel
    traces as ``execute_tool``: no breaker for it, while the plugin function it calls counts once."""
    with route_framework_spans(otel):
        instrument("semantic_kernel")
        kernel, _ = make_kernel([*calls("lookup", n=1), "done", "hello", "hello"])
        settings = PromptExecutionSettings(function_choice_behavior=FunctionChoiceBehavior.Auto())
        await kernel.invoke_prompt("check x", arguments=KernelArguments(settings=settings))
        for _ in range(2):
            assert str(await kernel.invoke_prompt("say hello")) == "hello"
    assert [b.name for b in default_registry().breakers()] == ["Stock-lookup"]
    assert counters(otel, "Stock-lookup") == (1, 0, 0)


def test_opentelemetry_instrument_counts_a_natively_traced_call_once():
    env = script_env(
        OTEL_BREAKER_FAILURE_THRESHOLD="2",
        OTEL_TRACES_EXPORTER="console",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
    )
    out, stdout = run_script(SCRIPT, env, marker='{"body_runs"', launch=launcher())
    assert out["body_runs"] == 2  # counted twice, the breaker would have opened after the first call
    # one span per call: the kernel's own, holding ours
    assert stdout.count('"name": "execute_tool Stock-inventory"') == 5
    assert stdout.count('"otel_breaker.guarded": true') == 5
