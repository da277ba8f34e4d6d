"""``OTEL_BREAKER_HIDE_OPEN_TOOLS`` in the OpenAI Agents SDK's real Runner loop: an open
function tool leaves the tools the model is sent, returns at half-open, and a call the
model makes to it anyway still gets the rejection."""

from __future__ import annotations

import pytest
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from otel_breaker.breaker import State
from otel_breaker.config import load_settings, set_settings
from otel_breaker.registry import default_registry

set_tracing_disabled(True)

REJECTED_TEXT = "is temporarily unavailable: its circuit breaker is open"
BOTH = ["primary_search", "backup_search"]


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


@function_tool
def primary_search(q: str) -> str:
    """The main search (its backend is down)."""
    raise ConnectionError("search backend unreachable")


@function_tool
def backup_search(q: str) -> str:
    """A slower search that works."""
    return f"3 results for {q}"


def make_agent() -> Agent:
    return Agent(name="shop", instructions="Find products.", tools=[primary_search, backup_search])


def run(agent: Agent, tool: str | None = None) -> ScriptedModel:
    steps = [[function_call(tool, {"q": "lamps"}, call_id="c1")]] if tool else []
    model = ScriptedModel([*steps, [assistant_message("done")]])
    agent.model = model  # the same agent object each run: its breakers are the agent's
    Runner.run_sync(agent, "find lamps")
    return model


def offered(model: ScriptedModel) -> list[list[str]]:
    return [[t.name for t in call.tools] for call in model.calls]


def outputs(model: ScriptedModel) -> list[str]:
    return [
        item["output"]
        for call in model.calls
        for item in call.input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]


def open_primary(agent: Agent) -> None:
    for _ in range(2):
        run(agent, "primary_search")
    (breaker,) = [b for b in default_registry().breakers() if b.name == "primary_search"]
    assert breaker.state is State.OPEN


@pytest.mark.parametrize("hide", [False, True])
def test_nothing_open_the_model_is_offered_exactly_the_same_tools(instrument, hide):
    settings(hide)
    without = run(make_agent(), "backup_search")
    instrument("openai_agents")
    with_breakers = run(make_agent(), "backup_search")
    assert offered(with_breakers) == offered(without) == [BOTH, BOTH]
    assert outputs(with_breakers) == outputs(without)


def test_switch_off_an_open_tool_stays_on_the_menu(instrument):
    settings(hide=False)
    instrument("openai_agents")
    agent = make_agent()
    open_primary(agent)
    assert offered(run(agent)) == [BOTH]


def test_an_open_tool_leaves_the_menu_and_returns_at_half_open(instrument, registry_clock):
    settings(hide=True)
    instrument("openai_agents")
    agent = make_agent()
    open_primary(agent)
    assert offered(run(agent)) == [["backup_search"]]
    registry_clock.advance(61)  # past the cooldown: half-open, back for its probe
    assert offered(run(agent)) == [BOTH]


def test_a_call_to_a_hidden_tool_still_gets_the_rejection(instrument):
    settings(hide=True)
    instrument("openai_agents")
    agent = make_agent()
    open_primary(agent)
    model = run(agent, "primary_search")  # the model calls it although it was not offered
    assert offered(model)[0] == ["backup_search"]
    (output,) = outputs(model)
    assert REJECTED_TEXT in output
