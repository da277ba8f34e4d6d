"""Real errors through LangGraph's ReAct loop, with otel-breaker off and on (outcome_scenarios).

The agent is the one LangGraph users build: ``create_react_agent`` over a
``ToolNode(handle_tool_errors=True)``, which hands every tool exception back to the
model as an error ``ToolMessage``, so one run carries all the calls. The model is
LangChain's own fake chat model, answering with scripted tool calls.

* Six mistakes of the model (sqlite3's errors, ``FileNotFoundError``, httpx's 404),
  then the right call: every call runs, and every request the model receives is
  the same with otel-breaker on as off.
* Ten calls with ten different arguments to a broken backend: with otel-breaker on
  the tool body runs at most ``failure_threshold`` times and the later calls read
  the breaker's rejection; off, all ten run.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("langgraph")
sys.path.insert(0, str(Path(__file__).parent))

from contract import UNAVAILABLE
from driver import RecordingModel, responses
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool
from outcome_scenarios import MISTAKE_SCENARIOS, OUTAGE_SCENARIOS, Backends, Tool, backends, failure_counts
from status_prompt import breaker_settings

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import ToolNode, create_react_agent

from otel_breaker.config import get_settings

#: Tool calls in a broken-backend run.
OUTAGE_CALLS = 10


@dataclass(frozen=True)
class Result:
    """One tool result as the model read it."""

    status: str
    text: str


@dataclass(frozen=True)
class Run:
    """What one agent run did: the tool body's executions, every request the model
    received (without the per-run message ids), the tool results of its last request,
    and the final answer."""

    runs: int
    requests: list[list[tuple]]
    results: list[Result]
    final: str


def _message(message: BaseMessage) -> tuple:
    """A message as the model reads it: its kind, text, tool calls and tool result fields."""
    calls = [(c["name"], c["args"], c["id"]) for c in getattr(message, "tool_calls", None) or ()]
    return (
        message.type,
        message.text,
        calls,
        getattr(message, "tool_call_id", None),
        getattr(message, "status", None),
    )


def run_agent(tool: Tool, arguments: list[str] | tuple[str, ...]) -> Run:
    """One run of a ReAct agent whose model calls ``tool`` once with each argument, then answers."""
    steps = [(tool.name, tool.arguments(value)) for value in arguments]
    model = RecordingModel(responses=responses([*steps, "done"]), seen=[], tools_sent=[])
    node = ToolNode([StructuredTool.from_function(tool.fn)], handle_tool_errors=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent's deprecation notice
        graph = create_react_agent(model, node, prompt="You are a careful assistant.", name="assistant")
    state = graph.invoke({"messages": [HumanMessage("go")]})
    requests = [[_message(m) for m in request] for request in model.seen]
    results = [Result(m.status, m.text) for m in model.seen[-1] if isinstance(m, ToolMessage)]
    return Run(tool.runs.count, requests, results, state["messages"][-1].text)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Backends]:
    with backends(tmp_path) as found:
        yield found


@pytest.mark.parametrize("name", MISTAKE_SCENARIOS)
def test_six_mistakes_then_the_right_call_as_without(name: str, live: Backends, instrument) -> None:
    breaker_settings()  # the defaults, as a user gets them
    scenario = live.mistakes(name)
    assert len(scenario.wrong) > get_settings().defaults.failure_threshold  # more than a failure count tolerates
    off = run_agent(scenario.make_tool(), scenario.calls)
    assert off.runs == len(scenario.calls)
    assert [r.status for r in off.results] == ["error"] * len(scenario.wrong) + ["success"]
    for error, result in zip(scenario.errors, off.results, strict=False):
        assert error in result.text
    assert off.results[-1].text == scenario.answer
    instrument("langchain")
    tool = scenario.make_tool()
    on = run_agent(tool, scenario.calls)
    assert on.runs == off.runs, f"{on.runs} of {off.runs} calls ran; the model read: {on.results}"
    assert on.results == off.results
    assert on.requests == off.requests
    assert on.final == off.final
    # Not one mistake counted: below the threshold it would still bring a lockout closer.
    counts = failure_counts(tool.name)
    assert counts and not any(counts), f"mistakes counted as failures: {counts}"


@pytest.mark.parametrize("name", OUTAGE_SCENARIOS)
def test_a_broken_backend_runs_at_most_threshold_times(name: str, live: Backends, instrument) -> None:
    breaker_settings(failure_threshold="3")
    threshold = get_settings().defaults.failure_threshold
    outage = live.outage(name)
    off = run_agent(outage.make_tool(), outage.calls)
    assert off.runs == OUTAGE_CALLS
    assert all(r.status == "error" and outage.error in r.text for r in off.results), off.results
    instrument("langchain")
    on = run_agent(outage.make_tool(), outage.calls)
    assert 1 <= on.runs <= threshold, f"the tool ran {on.runs} times; the model read: {on.results}"
    assert len(on.results) == OUTAGE_CALLS
    # The calls that ran read the tool's own error; the next three read the breaker's rejection,
    # and every later one that the run spent its waste budget on the tool.
    assert on.results[: on.runs] == off.results[: on.runs]
    rejected = on.results[on.runs :]
    assert all(r.status == "error" for r in rejected), on.results
    assert all(UNAVAILABLE in r.text for r in rejected[:3]), on.results
    assert all("unavailable for the rest of this run" in r.text for r in rejected[3:]), on.results
    assert on.final == off.final
