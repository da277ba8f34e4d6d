"""The run in smolagents beyond the contract: a managed agent joins its manager's run, and a
streamed run is a run, on the real ``ToolCallingAgent`` loop with a scripted model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("smolagents")
sys.path.insert(0, str(Path(__file__).parent))

from contract import PROMPT, Tool, call
from driver import SmolagentsDriver, _Script, smol_tool
from run_contract import SPENT, UNAVAILABLE
from smolagents import ToolCallingAgent
from smolagents.monitoring import LogLevel
from status_prompt import breaker_settings

DRIVER = SmolagentsDriver()


def _open_echo(*agents: str) -> Tool:
    """``echo`` fails once for each agent in an earlier run: its breaker opens for each
    (breakers are per agent; threshold 1, a long cooldown)."""
    tool = Tool.flaky("echo", failures=len(agents))
    for name in agents:
        assert DRIVER.run(DRIVER.build([tool], [call("echo", 1), "done"], name=name)) == "done"
    assert tool.runs == len(agents)
    return tool


def test_a_managed_agent_joins_its_managers_run(instrument):
    breaker_settings(failure_threshold="1", recovery_timeout="600")
    instrument("smolagents")
    tool = _open_echo("manager", "helper")
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
    # Two rejections in the manager, then the helper's first is the run's 3rd, its second the 4th.
    assert len(before) == 2 and all(UNAVAILABLE in text for text in before), before
    assert len(after) == 2, after
    assert UNAVAILABLE in after[0] and SPENT in after[1], after
    assert tool.runs == 2


def test_a_streamed_run_is_a_run(instrument):
    breaker_settings(failure_threshold="1", recovery_timeout="600")
    instrument("smolagents")
    tool = _open_echo("assistant")
    steps = [call("echo", i) for i in range(2, 8)]
    for _ in range(2):  # the next run starts with its budget whole
        agent = DRIVER.build([tool], [*steps, "done"])
        list(agent.run("go", stream=True))
        read = DRIVER.sent(agent)[-1].tool_results
        assert len(read) == 6 and tool.runs == 1
        assert all(UNAVAILABLE in text for text in read[:3]), read
        assert all(SPENT in text for text in read[3:]), read
