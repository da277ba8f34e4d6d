"""The run in Haystack beyond the contract: an Agent a tool runs joins its caller's run, and
``run_async`` is a run, on the real Agent loop with Haystack's ``MockChatGenerator``."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytest.importorskip("haystack")
sys.path.insert(0, str(Path(__file__).parent))

from contract import Tool, call
from driver import HaystackDriver, haystack_tool
from haystack.dataclasses import ChatMessage
from haystack.tools import create_tool_from_function
from run_contract import SPENT, UNAVAILABLE
from status_prompt import breaker_settings

DRIVER = HaystackDriver()


def _open_echo(*agents: str) -> Tool:
    """``echo`` fails once for each agent in an earlier run: its breaker opens for each
    (breakers are per agent; threshold 1, a long cooldown)."""
    echo = Tool.flaky("echo", failures=len(agents))
    for name in agents:
        assert DRIVER.run(DRIVER.build([echo], [call("echo", 1), "done"], name=name)) == "done"
    assert echo.runs == len(agents)
    return echo


def test_an_agent_a_tool_runs_joins_its_callers_run(instrument):
    breaker_settings(failure_threshold="1", recovery_timeout="600")
    instrument("haystack")
    echo = _open_echo("outer", "inner")
    inner = DRIVER.build([echo], [call("echo", 4), call("echo", 5), "helped"], name="inner")

    def helper(x: int) -> str:
        """Asks the inner agent."""
        return inner.run(messages=[ChatMessage.from_user(f"look up {x}")])["messages"][-1].text

    outer = DRIVER.build([echo], [call("echo", 2), call("echo", 3), call("helper", 1), "done"], name="outer")
    outer.tools = [haystack_tool(echo), create_tool_from_function(helper, name="helper")]
    assert DRIVER.run(outer) == "done"
    before = DRIVER.sent(outer)[2].tool_results  # the outer request before the helper ran
    after = DRIVER.sent(inner)[-1].tool_results
    # Two rejections in the outer agent; the inner agent's first call is the run's 3rd, its second the 4th.
    assert len(before) == 2 and all(UNAVAILABLE in text for text in before), before
    assert len(after) == 2, after
    assert UNAVAILABLE in after[0] and SPENT in after[1], after
    assert echo.runs == 2


def test_run_async_is_a_run(instrument):
    breaker_settings(failure_threshold="1", recovery_timeout="600")
    instrument("haystack")
    echo = _open_echo("assistant")
    steps = [call("echo", i) for i in range(2, 8)]
    for _ in range(2):  # the next run starts with its budget whole
        agent = DRIVER.build([echo], [*steps, "done"])
        assert asyncio.run(DRIVER.arun(agent)) == "done"
        read = DRIVER.sent(agent)[-1].tool_results
        assert len(read) == 6 and echo.runs == 1
        assert all(UNAVAILABLE in text for text in read[:3]), read
        assert all(SPENT in text for text in read[3:]), read
