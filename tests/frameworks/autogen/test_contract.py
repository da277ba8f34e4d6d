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
from run_contract import RunContract


class TestContract(FrameworkContract, LoopContract, RunContract):
    driver = AutoGenDriver()


def test_loop_stop_reaches_the_caller_of_run_stream(instrument):
    """``stop`` ends a streamed run too: the error leaves ``run_stream``, after at most 4 model requests."""
    import asyncio

    from contract import Tool
    from loop_contract import invalid, loop_error
    from status_prompt import breaker_settings

    breaker_settings(loop_action="stop")
    instrument("autogen")
    driver = TestContract.driver
    agent = driver.build([Tool.healthy("echo")], [*invalid(20), "done"])

    async def stream() -> None:
        async for _ in agent.run_stream(task="go"):
            pass

    with pytest.raises(BaseException) as raised:
        asyncio.run(asyncio.wait_for(stream(), 60))
    error = loop_error(raised.value)
    assert error is not None and (error.tool, error.count) == ("echo", 3)
    assert len(driver.sent(agent)) <= 4


def test_a_teams_run_is_one_run_of_the_waste_budget(instrument):
    """A team's ``run`` is one run: its agent's two turns (handled in the team runtime's
    tasks) join it, so the 4th call of the open tool, in the second turn, reads that the run
    spent its budget; the next team run starts whole."""
    import asyncio

    from autogen_agentchat.conditions import TextMentionTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from contract import Tool, call
    from run_contract import SPENT, UNAVAILABLE
    from status_prompt import breaker_settings

    breaker_settings(failure_threshold="1", recovery_timeout="600")
    instrument("autogen")
    driver = TestContract.driver
    echo = Tool.flaky("echo", failures=1)
    assert driver.run(driver.build([echo], [call("echo", 1), "done"])) == "done"
    for _ in range(2):
        steps = [call("echo", 2), call("echo", 3), "first", call("echo", 4), call("echo", 5), "second"]
        agent = driver.build([echo, Tool.healthy("other")], steps)
        team = RoundRobinGroupChat([agent], termination_condition=TextMentionTermination("second"))
        asyncio.run(asyncio.wait_for(team.run(task="go"), 60))
        read = driver.sent(agent)[-1].tool_results  # the agent's context: both turns' results
        assert echo.runs == 1
        assert len(read) == 4
        assert all(UNAVAILABLE in r for r in read[:3]), read
        assert SPENT in read[3], read
