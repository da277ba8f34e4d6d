"""The run in smolagents beyond the contract: a managed agent joins its manager's run, and a
streamed run is a run, on the real ``ToolCallingAgent`` loop with a scripted model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("smolagents")
sys.path.insert(0, str(Path(__file__).parent))

from contract import PROMPT, call
from driver import SmolagentsDriver, _Script, smol_tool
from run_contract import assert_each_run_budgeted, assert_inner_agent_joined, open_echo_for
from smolagents import ToolCallingAgent
from smolagents.monitoring import LogLevel

DRIVER = SmolagentsDriver()


def test_a_managed_agent_joins_its_managers_run(instrument):
    tool = open_echo_for(DRIVER, instrument, "manager", "helper")
    helper = DRIVER.build([tool], [call("echo", 4), call("echo", 5), "helped"], name="helper")
    helper.description = "Looks things up."
    steps = [call("echo", 2), call("echo", 3), ("helper", {"task": "look it up"}), "done"]
    manager = ToolCallingAgent(
        tools=[smol_tool(tool)],
        model=_Script(steps),
        managed_agents=[helper],
        instructions=PROMPT,
        max_steps=len(steps) + 2,
        verbosity_level=LogLevel.OFF,
        name="manager",
    )
    manager.instructions_under_test = PROMPT  # what the driver's ``sent`` reads
    assert manager.run("go") == "done"
    before = DRIVER.sent(manager)[2].tool_results  # the manager's request before the handover
    after = DRIVER.sent(helper)[-1].tool_results
    assert_inner_agent_joined(after, tool, outer_read=before)


def test_a_streamed_run_is_a_run(instrument):
    tool = open_echo_for(DRIVER, instrument, "assistant")

    def stream(agent: ToolCallingAgent) -> None:
        list(agent.run("go", stream=True))

    assert_each_run_budgeted(DRIVER, tool, stream)
