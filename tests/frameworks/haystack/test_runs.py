"""The run in Haystack beyond the contract: an Agent a tool runs joins its caller's run, and
``run_async`` is a run, on the real Agent loop with Haystack's ``MockChatGenerator``."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytest.importorskip("haystack")
sys.path.insert(0, str(Path(__file__).parent))

from contract import call
from driver import HaystackDriver, haystack_tool
from haystack.components.agents import Agent
from haystack.dataclasses import ChatMessage
from haystack.tools import create_tool_from_function
from run_contract import assert_each_run_budgeted, assert_inner_agent_joined, open_echo_for

DRIVER = HaystackDriver()


def test_an_agent_a_tool_runs_joins_its_callers_run(instrument):
    echo = open_echo_for(DRIVER, instrument, "outer", "inner")
    inner = DRIVER.build([echo], [call("echo", 4), call("echo", 5), "helped"], name="inner")

    def helper(x: int) -> str:
        """Asks the inner agent."""
        return inner.run(messages=[ChatMessage.from_user(f"look up {x}")])["messages"][-1].text

    outer = DRIVER.build([echo], [call("echo", 2), call("echo", 3), call("helper", 1), "done"], name="outer")
    outer.tools = [haystack_tool(echo), create_tool_from_function(helper, name="helper")]
    assert DRIVER.run(outer) == "done"
    before = DRIVER.sent(outer)[2].tool_results  # the outer request before the helper ran
    after = DRIVER.sent(inner)[-1].tool_results
    assert_inner_agent_joined(after, echo, outer_read=before)


def test_run_async_is_a_run(instrument):
    echo = open_echo_for(DRIVER, instrument, "assistant")

    def run_async(agent: Agent) -> None:
        assert asyncio.run(DRIVER.arun(agent)) == "done"

    assert_each_run_budgeted(DRIVER, echo, run_async)
