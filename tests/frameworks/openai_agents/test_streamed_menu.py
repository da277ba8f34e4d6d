"""``OTEL_BREAKER_HIDE_OPEN_TOOLS`` in ``Runner.run_streamed`` (the shared contract drives
``Runner.run``): a streamed turn builds its model request inline, and the SDK's scripted
model shows what its ``stream_response`` was sent."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytest.importorskip("agents")
sys.path.insert(0, str(Path(__file__).parent))

from agents import Runner
from contract import UNAVAILABLE, Tool, call
from driver import OpenAIAgentsDriver
from status_prompt import COOLDOWN, breaker_settings, quick_breaker_settings

from otel_breaker.menu import UNAVAILABLE_NOTE

driver = OpenAIAgentsDriver()


def run_streamed(agent, prompt: str = "go") -> str:
    async def consume() -> str:
        result = Runner.run_streamed(agent, prompt)
        async for _ in result.stream_events():
            pass
        return result.final_output

    return asyncio.run(consume())


def healthy_menus() -> list[dict]:
    agent = driver.build(
        [Tool.healthy("primary"), Tool.healthy("backup")], [call("primary", 1), call("backup", 2), "done"]
    )
    assert run_streamed(agent) == "done"
    return driver.tools_sent(agent)


@pytest.mark.parametrize("hide", ["false", "true"])
def test_streamed_menu_unchanged_unless_a_tool_is_open(instrument, hide):
    breaker_settings(hide_open_tools=hide)
    baseline = healthy_menus()
    assert len(baseline) == 3 and all(set(m) == {"primary", "backup"} for m in baseline)
    instrument("openai_agents")
    assert healthy_menus() == baseline


def test_streamed_open_tool_leaves_the_menu_until_half_open(instrument, registry_clock):
    quick_breaker_settings(hide_open_tools="true")
    instrument("openai_agents")
    primary, backup = Tool.flaky("primary", failures=2), Tool.healthy("backup")
    steps = [call("primary", 1), call("primary", 2), call("primary", 3), call("backup", 1), "first"]
    agent = driver.build([primary, backup], [*steps, call("primary", 4), "second"])
    assert run_streamed(agent) == "first"
    registry_clock.advance(COOLDOWN * 2)  # past the cooldown: half-open, back for the probe
    assert run_streamed(agent, "again") == "second"
    menus = driver.tools_sent(agent)
    offered = ["primary" in m and UNAVAILABLE_NOTE not in str(m["primary"]) for m in menus]
    assert offered == [True, True, False, False, False, True, True]
    assert menus[5] == menus[0] and all(m["backup"] == menus[0]["backup"] for m in menus)
    # The model called the hidden tool anyway (third call): the usual rejection, the body never ran.
    results = driver.sent(agent)[4].tool_results
    assert [UNAVAILABLE in r for r in results] == [False, False, True, False]
    assert primary.runs == 3 and backup.runs == 1


def test_streamed_switch_off_an_open_tool_stays(instrument):
    quick_breaker_settings()
    instrument("openai_agents")
    primary = Tool.failing("primary")
    agent = driver.build(
        [primary, Tool.healthy("backup")], [call("primary", 1), call("primary", 2), call("primary", 3), "done"]
    )
    assert run_streamed(agent) == "done"
    assert all(set(m) == {"primary", "backup"} for m in driver.tools_sent(agent))
    assert primary.runs == 2
