"""Real errors through the OpenAI Agents SDK's Runner loop, with otel-breaker off and on
(outcome_scenarios).

The SDK catches a function tool's exception and hands the model its failure text, so
one run carries all the calls. The model is the SDK's own ``ScriptedModel``. Each
scenario runs twice: with the SDK's default failure text, which shows the model no
detail (the judgement can only come from the exception itself), and with a
``failure_error_function`` that shows the error, as programs that let the model
correct itself configure it.

* Six mistakes of the model (sqlite3's errors, ``FileNotFoundError``, httpx's 404),
  then the right call: every call runs, and every request the model receives is
  the same with otel-breaker on as off.
* Ten calls with ten different arguments to a broken backend: with otel-breaker on
  the tool body runs at most ``failure_threshold`` times and the later calls read
  the breaker's rejection; off, all ten run.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")
sys.path.insert(0, str(Path(__file__).parent))

from agents import Agent, RunContextWrapper, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from contract import UNAVAILABLE
from outcome_scenarios import MISTAKE_SCENARIOS, OUTAGE_SCENARIOS, Backends, Tool, backends, failure_counts
from status_prompt import breaker_settings

from otel_breaker.config import get_settings

set_tracing_disabled(True)

#: Tool calls in a broken-backend run.
OUTAGE_CALLS = 10
#: The SDK's default failure text (``default_tool_error_function``): no detail of the error.
SDK_FAILURE_TEXT = "An error occurred while running the tool. Please try again."
#: The two ways the SDK tells the model a tool failed.
FAILURE_TEXTS = ("default", "detailed")


def detailed_error(context: RunContextWrapper[Any], error: Exception) -> str:
    """A ``failure_error_function`` that shows the model what went wrong, so it can correct the call."""
    return f"{type(error).__name__}: {error}"


@dataclass(frozen=True)
class Run:
    """What one agent run did: the tool body's executions, every request the model
    received (instructions and input items), the tool results of its last request,
    and the final output."""

    runs: int
    requests: list[tuple[Any, list[Any]]]
    results: list[str]
    final: str


def run_agent(tool: Tool, arguments: tuple[str, ...] | list[str], failure_text: str) -> Run:
    """One run of an agent whose model calls ``tool`` once with each argument, then answers."""
    turns = [[function_call(tool.name, tool.arguments(v), call_id=f"call_{i}")] for i, v in enumerate(arguments)]
    model = ScriptedModel([*turns, [assistant_message("done")]])
    options = {"failure_error_function": detailed_error} if failure_text == "detailed" else {}
    agent = Agent(
        name="assistant",
        instructions="You are a careful assistant.",
        model=model,
        tools=[function_tool(tool.fn, **options)],
    )
    # One turn per call, and one to answer: more than the SDK's default max_turns (10).
    result = Runner.run_sync(agent, "go", max_turns=len(arguments) + 5)
    requests = [(call.system_instructions, list(call.input)) for call in model.calls]
    last = model.calls[-1].input
    results = [
        str(item["output"]) for item in last if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    return Run(tool.runs.count, requests, results, result.final_output)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Backends]:
    with backends(tmp_path) as found:
        yield found


@pytest.mark.parametrize("failure_text", FAILURE_TEXTS)
@pytest.mark.parametrize("name", MISTAKE_SCENARIOS)
def test_six_mistakes_then_the_right_call_as_without(name: str, failure_text: str, live: Backends, instrument) -> None:
    breaker_settings()  # the defaults, as a user gets them
    scenario = live.mistakes(name)
    assert len(scenario.wrong) > get_settings().defaults.failure_threshold  # more than a failure count tolerates
    off = run_agent(scenario.make_tool(), scenario.calls, failure_text)
    assert off.runs == len(scenario.calls)
    assert off.results[-1] == scenario.answer
    for error, text in zip(scenario.errors, off.results, strict=False):
        assert (error in text) if failure_text == "detailed" else (text == SDK_FAILURE_TEXT)
    instrument("openai_agents")
    tool = scenario.make_tool()
    on = run_agent(tool, scenario.calls, failure_text)
    assert on.runs == off.runs, f"{on.runs} of {off.runs} calls ran; the model read: {on.results}"
    assert on.results == off.results
    assert on.requests == off.requests
    assert on.final == off.final
    # Not one mistake counted: below the threshold it would still bring a lockout closer.
    counts = failure_counts(tool.name)
    assert counts and not any(counts), f"mistakes counted as failures: {counts}"


@pytest.mark.parametrize("failure_text", FAILURE_TEXTS)
@pytest.mark.parametrize("name", OUTAGE_SCENARIOS)
def test_a_broken_backend_runs_at_most_threshold_times(
    name: str, failure_text: str, live: Backends, instrument
) -> None:
    breaker_settings(failure_threshold="3")
    threshold = get_settings().defaults.failure_threshold
    outage = live.outage(name)
    off = run_agent(outage.make_tool(), outage.calls, failure_text)
    assert off.runs == OUTAGE_CALLS
    expected = outage.error if failure_text == "detailed" else SDK_FAILURE_TEXT
    assert all(expected in text for text in off.results), off.results
    instrument("openai_agents")
    on = run_agent(outage.make_tool(), outage.calls, failure_text)
    assert 1 <= on.runs <= threshold, f"the tool ran {on.runs} times; the model read: {on.results}"
    assert len(on.results) == OUTAGE_CALLS
    # The calls that ran read the tool's own error; the next three read the breaker's rejection,
    # and every later one that the run spent its waste budget on the tool.
    assert on.results[: on.runs] == off.results[: on.runs]
    rejected = on.results[on.runs :]
    assert all(UNAVAILABLE in text for text in rejected[:3]), on.results
    assert all("unavailable for the rest of this run" in text for text in rejected[3:]), on.results
    assert on.final == off.final
