"""``OTEL_BREAKER_HIDE_OPEN_TOOLS`` in PydanticAI's real agent loop: an open tool leaves
the tool definitions of the model request (``function_tools``), returns at half-open,
and a call the model makes to it anyway still gets the rejection."""

from __future__ import annotations

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from otel_breaker.breaker import State
from otel_breaker.config import load_settings, set_settings
from otel_breaker.registry import default_registry

REJECTED_TEXT = "is temporarily unavailable: its circuit breaker is open"


def settings(hide: bool) -> None:
    set_settings(
        load_settings(
            {
                "OTEL_BREAKER_FAILURE_THRESHOLD": "2",
                "OTEL_BREAKER_RECOVERY_TIMEOUT": "60",
                "OTEL_BREAKER_HIDE_OPEN_TOOLS": "true" if hide else "false",
            }
        )
    )


class Recorder:
    """Calls ``tool`` once (when given), then answers with what it read; records the
    names of the tools offered in every request."""

    def __init__(self, tool: str | None = None) -> None:
        self.tool = tool
        self.offered: list[list[str]] = []
        self.read: list[ToolReturnPart] = []

    def respond(self, messages, info: AgentInfo) -> ModelResponse:
        self.offered.append([t.name for t in info.function_tools])
        returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
        if self.tool is not None and not returns:
            return ModelResponse(parts=[ToolCallPart(self.tool, {"q": "lamps"}, tool_call_id="c1")])
        self.read = returns
        return ModelResponse(parts=[TextPart("done")])


def make_agent() -> Agent:
    agent = Agent(name="shop")

    @agent.tool_plain
    def primary_search(q: str) -> str:
        """The main search (its backend is down)."""
        raise ToolFailed("search backend unreachable")

    @agent.tool_plain
    def backup_search(q: str) -> str:
        """A slower search that works."""
        return f"3 results for {q}"

    return agent


def run(agent: Agent, tool: str | None = None) -> Recorder:
    recorder = Recorder(tool)
    agent.run_sync("find lamps", model=FunctionModel(recorder.respond))
    return recorder


def open_primary(agent: Agent) -> None:
    for _ in range(2):
        run(agent, "primary_search")
    (breaker,) = [b for b in default_registry().breakers() if b.name == "primary_search"]
    assert breaker.state is State.OPEN


BOTH = ["primary_search", "backup_search"]


@pytest.mark.parametrize("hide", [False, True])
def test_nothing_open_the_model_is_offered_exactly_the_same_tools(instrument, hide):
    settings(hide)
    without = run(make_agent(), "backup_search")
    instrument("pydantic_ai")
    with_breakers = run(make_agent(), "backup_search")
    assert with_breakers.offered == without.offered == [BOTH, BOTH]
    assert [p.content for p in with_breakers.read] == [p.content for p in without.read]


def test_switch_off_an_open_tool_stays_on_the_menu(instrument):
    settings(hide=False)
    instrument("pydantic_ai")
    agent = make_agent()
    open_primary(agent)
    assert run(agent).offered == [BOTH]


def test_an_open_tool_leaves_the_menu_and_returns_at_half_open(instrument, registry_clock):
    settings(hide=True)
    instrument("pydantic_ai")
    agent = make_agent()
    open_primary(agent)
    assert run(agent).offered == [["backup_search"]]
    registry_clock.advance(61)  # past the cooldown: half-open, back for its probe
    assert run(agent).offered == [BOTH]


def test_a_call_to_a_hidden_tool_still_gets_the_rejection(instrument):
    settings(hide=True)
    instrument("pydantic_ai")
    agent = make_agent()
    open_primary(agent)
    recorder = run(agent, "primary_search")  # the model calls it although it was not offered
    assert recorder.offered[0] == ["backup_search"]
    (part,) = recorder.read
    assert REJECTED_TEXT in part.content and part.outcome == "failed"
