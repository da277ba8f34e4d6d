"""The run in Strands beyond the contract: an agent a tool calls (an agent as a tool) joins
its caller's run, on the real event loop with the scripted model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("strands")
sys.path.insert(0, str(Path(__file__).parent))

from contract import PROMPT, call
from driver import StrandsDriver, strands_tool
from run_contract import assert_inner_agent_joined, open_echo_for
from scripted_model import ScriptedModel
from strands import Agent, tool

DRIVER = StrandsDriver()


def test_an_agent_called_as_a_tool_joins_its_callers_run(instrument):
    echo = open_echo_for(DRIVER, instrument, "outer", "inner")
    inner = DRIVER.build([echo], [call("echo", 4), call("echo", 5), "helped"], name="inner")

    @tool(name="helper", description="Asks the inner agent.")
    def helper(x: int) -> str:
        return str(inner(f"look up {x}"))

    steps = [call("echo", 2), call("echo", 3), call("helper", 1), "done"]
    outer = Agent(
        model=ScriptedModel(steps),
        tools=[strands_tool(echo), helper],
        system_prompt=PROMPT,
        name="outer",
        callback_handler=None,
    )
    assert DRIVER.run(outer) == "done"
    before = DRIVER.sent(outer)[2].tool_results  # the outer request before the helper ran
    after = DRIVER.sent(inner)[-1].tool_results
    assert_inner_agent_joined(after, echo, outer_read=before)
