"""The OpenAI Agents SDK's own error policy meets the loop guard's answer.

A tool with ``failure_error_function=None`` ends the run with its exception. Separate runs
each get that exception (each run is a run of its own); inside one run of the caller's
(``otel_breaker.run``), the identical call's 4th failure is answered with
``RepeatedCallError``, raised as the SDK raises the tool's own, never turned into text."""

from __future__ import annotations

import sqlite3

from agents import Agent, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

import otel_breaker
from otel_breaker.loops import RepeatedCallError


@function_tool(failure_error_function=None)
def query(x: int) -> str:
    """Runs a query the model wrote (wrongly: a syntax error, the caller's mistake)."""
    return str(sqlite3.connect(":memory:").execute("SELEC 1").fetchall())


def one_run() -> tuple[str, str]:
    """How one run ended: the final output, or the error the SDK raised and what caused it."""
    model = ScriptedModel([[function_call("query", {"x": 1}, call_id="c1")], [assistant_message("done")]])
    agent = Agent(name="analyst", instructions="query", model=model, tools=[query])
    try:
        return Runner.run_sync(agent, "go").final_output, ""
    except Exception as exc:
        return type(exc).__name__, type(exc.__cause__).__name__


def test_separate_runs_each_end_with_the_tools_own_error(instrument):
    plain = [one_run() for _ in range(5)]
    assert plain == [plain[0]] * 5 and plain[0][1] == "OperationalError"
    instrument("openai_agents")
    assert [one_run() for _ in range(5)] == plain


def test_inside_one_run_the_loop_answer_raises_as_the_tools_error_did(instrument):
    plain = one_run()
    instrument("openai_agents")
    with otel_breaker.run():
        seen = [one_run() for _ in range(5)]
    assert seen[:3] == [plain] * 3
    # The SDK's policy for the tool's exception holds for the loop guard's answer: the run
    # ends with the same error, caused by RepeatedCallError instead of the query's.
    assert seen[3:] == [(plain[0], RepeatedCallError.__name__)] * 2


@function_tool(failure_error_function=lambda context, error: f"custom: {error}")
def custom_query(x: int) -> str:
    """The same mistake, formatted by the user's own failure function."""
    return str(sqlite3.connect(":memory:").execute("SELEC 1").fetchall())


def test_the_users_failure_function_gets_the_loop_error(instrument):
    instrument("openai_agents")
    steps = [[function_call("custom_query", {"x": 1}, call_id=f"c{i}")] for i in range(5)]
    model = ScriptedModel([*steps, [assistant_message("done")]])
    agent = Agent(name="analyst", instructions="query", model=model, tools=[custom_query])
    assert Runner.run_sync(agent, "go").final_output == "done"
    outputs = [
        item["output"]
        for item in model.calls[-1].input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    assert all(o.startswith("custom: ") for o in outputs), outputs
    assert not any("this exact call" in o for o in outputs[:3])
    assert all("this exact call" in o for o in outputs[3:]), outputs
