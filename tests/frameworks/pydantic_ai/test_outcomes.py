"""Real errors through PydanticAI's agent loop, with otel-breaker off and on (outcome_scenarios).

The model is PydanticAI's own ``FunctionModel``. PydanticAI ends a run on any
exception of a tool other than ``ModelRetry`` and ``ToolFailed``, so each scenario
runs in the two ways PydanticAI programs meet a tool error:

* ``raised``: the tool lets the library's exception out, which ends the run; the
  program runs the agent once per call (ten runs of one call each), as a server
  does with one request after another. ``ModelRetry`` is no way around it here: it
  asks the model to retry, which is neutral by definition and would judge nothing;
* ``tool_failed``: the tool reports the error with ``raise ToolFailed(str(exc)) from
  exc``, PydanticAI's way to show the model a terminal failure and let the run go
  on; one run carries all the calls.

* Six mistakes of the model (sqlite3's errors, ``FileNotFoundError``, httpx's 404),
  then the right call: every call runs, and every request the model receives (and
  every run's end) is the same with otel-breaker on as off.
* Ten calls with ten different arguments to a broken backend: with otel-breaker on
  the tool body runs at most ``failure_threshold`` times and the later calls read
  the breaker's rejection; off, all ten run.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")
sys.path.insert(0, str(Path(__file__).parent))

from contract import UNAVAILABLE
from outcome_scenarios import MISTAKE_SCENARIOS, OUTAGE_SCENARIOS, Backends, Tool, backends, failure_counts
from pydantic_ai import Agent
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from run_contract import SPENT
from status_prompt import breaker_settings

from otel_breaker.config import get_settings

#: Tool calls in a broken-backend run.
OUTAGE_CALLS = 10
#: The two ways a PydanticAI tool meets an error (see the module's docstring).
STYLES = ("raised", "tool_failed")


def reporting_failures(fn: Callable[[str], str]) -> Callable[..., str]:
    """``fn`` reporting its errors as PydanticAI's ``ToolFailed``, the original kept as the cause."""

    @functools.wraps(fn)  # the same name, docstring and parameters for PydanticAI's schema
    def reported(*args: Any, **kwargs: Any) -> str:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            raise ToolFailed(str(exc)) from exc

    return reported


def _part(part: Any) -> tuple:
    """A message part as the model reads it (without timestamps)."""
    if isinstance(part, ToolReturnPart):
        return ("tool-return", part.tool_name, part.tool_call_id, part.model_response_str())
    if isinstance(part, ToolCallPart):
        return ("tool-call", part.tool_name, part.tool_call_id, part.args)
    return (part.part_kind, str(getattr(part, "content", "")))


class Script:
    """The model: calls the tool with each argument in turn, then answers "done"; in
    ``raised`` style, one call per run (a run answers once its call has a result)."""

    def __init__(self, tool: Tool, arguments: tuple[str, ...] | list[str], one_per_run: bool) -> None:
        self.tool = tool
        self.arguments = list(arguments)
        self.one_per_run = one_per_run
        self.calls = 0
        #: Every request the model received, part by part.
        self.requests: list[list[tuple]] = []

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append([_part(p) for m in messages for p in m.parts])
        answered = any(isinstance(p, ToolReturnPart) for p in messages[-1].parts)
        if not self.arguments or (self.one_per_run and answered):
            return ModelResponse(parts=[TextPart("done")])
        self.calls += 1
        arguments = self.tool.arguments(self.arguments.pop(0))
        return ModelResponse(parts=[ToolCallPart(self.tool.name, arguments, tool_call_id=f"call_{self.calls}")])


@dataclass(frozen=True)
class Run:
    """What the runs did: the tool body's executions, every request the model received,
    the tool results it read, and how each run ended (its output, or what it raised)."""

    runs: int
    requests: list[list[tuple]]
    results: list[str]
    ends: list[tuple[str, str]]


def run_agent(tool: Tool, arguments: tuple[str, ...] | list[str], style: str) -> Run:
    """The agent's model calls ``tool`` once with each argument: in one run (``tool_failed``),
    or in one run per call (``raised``: the exception ends the run)."""
    script = Script(tool, arguments, one_per_run=style == "raised")
    agent = Agent(FunctionModel(script.respond), name="assistant", instructions="You are a careful assistant.")
    agent.tool_plain(reporting_failures(tool.fn) if style == "tool_failed" else tool.fn)
    ends: list[tuple[str, str]] = []
    for _ in range(len(arguments) if style == "raised" else 1):
        try:
            ends.append(("output", agent.run_sync("go").output))
        except Exception as exc:
            ends.append((type(exc).__name__, str(exc)))
    return Run(tool.runs.count, script.requests, _results(script.requests), ends)


def _results(requests: list[list[tuple]]) -> list[str]:
    """The tool results the model read, in call order, over all runs."""
    seen: dict[str, str] = {}
    for request in requests:
        for part in request:
            if part[0] == "tool-return":
                seen[part[2]] = part[3]
    return list(seen.values())


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Backends]:
    with backends(tmp_path) as found:
        yield found


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("name", MISTAKE_SCENARIOS)
def test_six_mistakes_then_the_right_call_as_without(name: str, style: str, live: Backends, instrument) -> None:
    breaker_settings()  # the defaults, as a user gets them
    scenario = live.mistakes(name)
    assert len(scenario.wrong) > get_settings().defaults.failure_threshold  # more than a failure count tolerates
    off = run_agent(scenario.make_tool(), scenario.calls, style)
    assert off.runs == len(scenario.calls)
    if style == "raised":
        assert [end for end in off.ends[:-1] if end[0] == "output"] == []
        assert all(error in end[1] for error, end in zip(scenario.errors, off.ends, strict=False)), off.ends
        assert off.results == [scenario.answer]
    else:
        assert all(error in text for error, text in zip(scenario.errors, off.results, strict=False)), off.results
        assert off.results[-1] == scenario.answer
    assert off.ends[-1] == ("output", "done")
    instrument("pydantic_ai")
    tool = scenario.make_tool()
    on = run_agent(tool, scenario.calls, style)
    assert on.runs == off.runs, f"{on.runs} of {off.runs} calls ran; runs ended: {on.ends}"
    assert on.ends == off.ends
    assert on.results == off.results
    assert on.requests == off.requests
    # Not one mistake counted: below the threshold it would still bring a lockout closer.
    counts = failure_counts(tool.name)
    assert counts and not any(counts), f"mistakes counted as failures: {counts}"


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("name", OUTAGE_SCENARIOS)
def test_a_broken_backend_runs_at_most_threshold_times(name: str, style: str, live: Backends, instrument) -> None:
    breaker_settings(failure_threshold="3")
    threshold = get_settings().defaults.failure_threshold
    outage = live.outage(name)
    off = run_agent(outage.make_tool(), outage.calls, style)
    assert off.runs == OUTAGE_CALLS
    if style == "raised":
        assert all(end[0] != "output" and outage.error in end[1] for end in off.ends), off.ends
    else:
        assert all(outage.error in text for text in off.results), off.results
    instrument("pydantic_ai")
    on = run_agent(outage.make_tool(), outage.calls, style)
    assert 1 <= on.runs <= threshold, f"the tool ran {on.runs} times; runs ended: {on.ends}"
    if style == "raised":
        # The runs whose call ran end with the tool's own error; every later run's call is
        # rejected with a result the model reads, and the run goes on to its answer.
        assert on.ends[: on.runs] == off.ends[: on.runs]
        assert on.ends[on.runs :] == [("output", "done")] * (OUTAGE_CALLS - on.runs)
        rejected = on.results
    else:
        assert on.ends == off.ends
        assert len(on.results) == OUTAGE_CALLS
        assert on.results[: on.runs] == off.results[: on.runs]
        rejected = on.results[on.runs :]
    assert len(rejected) == OUTAGE_CALLS - on.runs
    if style == "raised":
        assert all(UNAVAILABLE in text for text in rejected), on.results
    else:
        # One run keeps calling the open tool: from its 4th rejection the run's waste
        # budget answers, and the model reads the tool is gone for the rest of the run.
        assert all(UNAVAILABLE in text for text in rejected[:3]), on.results
        assert all(SPENT in text for text in rejected[3:]), on.results
