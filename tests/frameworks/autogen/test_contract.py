"""The shared framework contract on AutoGen's real ``AssistantAgent`` loop."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("autogen_agentchat")
sys.path.insert(0, str(Path(__file__).parent))

from contract import FrameworkContract
from driver import AutoGenDriver
from loop_contract import LoopContract


class TestContract(FrameworkContract, LoopContract):
    driver = AutoGenDriver()
    stop_not_reaching = "AutoGen's agent runtime does not pass a BaseException on: stop answers like reject there"


def test_loop_stop_answers_like_reject_and_the_run_ends(instrument):
    """A ``ToolLoopError`` would hang AutoGen's runtime: the model gets the loop text instead."""
    from contract import Tool
    from loop_contract import LOOP, invalid
    from status_prompt import breaker_settings

    breaker_settings(loop_action="stop")
    instrument("autogen")
    driver = TestContract.driver
    agent = driver.build([Tool.healthy("echo")], [*invalid(6), "done"])
    assert driver.run(agent) == "done"
    results = driver.sent(agent)[-1].tool_results
    assert all(LOOP in r for r in results[3:]) and not any(LOOP in r for r in results[:3])
