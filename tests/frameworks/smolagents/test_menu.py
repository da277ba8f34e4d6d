"""``OTEL_BREAKER_HIDE_OPEN_TOOLS`` in smolagents' real ``ToolCallingAgent`` loop: an
open tool leaves ``tools_to_call_from`` of the model call, returns at half-open, and a
call the model makes to it anyway still gets the rejection."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
from smolagents import ToolCallingAgent, tool
from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole, Model
from smolagents.monitoring import LogLevel

from otel_breaker.breaker import State
from otel_breaker.config import load_settings, set_settings
from otel_breaker.registry import default_registry

REJECTED_TEXT = "is temporarily unavailable: its circuit breaker is open"
ALL = ["primary_search", "backup_search", "final_answer"]


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


@tool
def primary_search(q: str) -> str:
    """The main search (its backend is down).

    Args:
        q: query
    """
    raise ConnectionError("search backend unreachable")


@tool
def backup_search(q: str) -> str:
    """A slower search that works.

    Args:
        q: query
    """
    return f"3 results for {q}"


class Recorder(Model):
    """Calls ``tool`` once (when given), then gives the final answer; records the tool
    names of every model call and the text it read last."""

    def __init__(self, tool_name: str | None = None) -> None:
        super().__init__(model_id="scripted")
        self.tool_name = tool_name
        self.offered: list[list[str]] = []
        self.read: list[str] = []

    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kwargs):
        self.offered.append([t.name for t in tools_to_call_from or ()])
        if len(self.offered) > 1:
            content = messages[-1].content
            self.read.append(" ".join(p.get("text", "") for p in content) if isinstance(content, list) else content)
        name, arguments = (
            (self.tool_name, {"q": "lamps"})
            if self.tool_name and len(self.offered) == 1
            else ("final_answer", {"answer": "done"})
        )
        call = ChatMessageToolCall(
            id=f"c{len(self.offered)}",
            type="function",
            function=ChatMessageToolCallFunction(name=name, arguments=arguments),
        )
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])


def make_agent() -> ToolCallingAgent:
    return ToolCallingAgent(
        tools=[primary_search, backup_search], model=Recorder(), max_steps=4, verbosity_level=LogLevel.OFF, name="shop"
    )


def run(agent: ToolCallingAgent, tool_name: str | None = None) -> Recorder:
    agent.model = Recorder(tool_name)
    assert agent.run("find lamps") == "done"
    return agent.model


def open_primary(agent: ToolCallingAgent) -> None:
    for _ in range(2):
        run(agent, "primary_search")
    (breaker,) = [b for b in default_registry().breakers() if b.name == "primary_search"]
    assert breaker.state is State.OPEN


@pytest.mark.parametrize("hide", [False, True])
def test_nothing_open_the_model_is_offered_exactly_the_same_tools(instrument, hide):
    settings(hide)
    without = run(make_agent(), "backup_search")
    instrument("smolagents")
    with_breakers = run(make_agent(), "backup_search")
    assert with_breakers.offered == without.offered == [ALL, ALL]
    assert with_breakers.read == without.read


def test_switch_off_an_open_tool_stays_on_the_menu(instrument):
    settings(hide=False)
    instrument("smolagents")
    agent = make_agent()
    open_primary(agent)
    assert run(agent).offered == [ALL]


def test_an_open_tool_leaves_the_menu_and_returns_at_half_open(instrument, registry_clock):
    settings(hide=True)
    instrument("smolagents")
    agent = make_agent()
    open_primary(agent)
    assert run(agent).offered == [["backup_search", "final_answer"]]
    registry_clock.advance(61)  # past the cooldown: half-open, back for its probe
    assert run(agent).offered == [ALL]


def test_a_call_to_a_hidden_tool_still_gets_the_rejection(instrument):
    settings(hide=True)
    instrument("smolagents")
    agent = make_agent()
    open_primary(agent)
    model = run(agent, "primary_search")  # the model calls it although it was not offered
    assert model.offered[0] == ["backup_search", "final_answer"]
    assert REJECTED_TEXT in model.read[0]


def test_uninstrument_restores_the_menu_property(instrument):
    from smolagents.agents import ToolCallingAgent as Agent

    before = Agent.__dict__["tools_and_managed_agents"]
    instrumentor = instrument("smolagents")
    assert Agent.__dict__["tools_and_managed_agents"] is not before
    instrumentor.uninstrument()
    assert Agent.__dict__["tools_and_managed_agents"] is before
