"""The run in the OpenAI Agents SDK beyond the contract: a handoff is a turn of the same run,
and a streamed run is a run, on the real Runner with the SDK's scripted model."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytest.importorskip("agents")
sys.path.insert(0, str(Path(__file__).parent))

from agents import Agent, Runner
from agents.testing import ScriptedModel, assistant_message, function_call
from contract import call
from driver import OpenAIAgentsDriver, script, sdk_tool
from run_contract import SPENT, UNAVAILABLE, assert_budget_answers, open_echo_for

DRIVER = OpenAIAgentsDriver()


def _outputs(agent: Agent) -> list[str]:
    """The tool results the agent's model read in its last request."""
    return DRIVER.sent(agent)[-1].tool_results


def test_a_handoff_is_a_turn_of_the_same_run(instrument):
    tool = open_echo_for(DRIVER, instrument, "first", "second")
    second = DRIVER.build([tool], [], name="second")
    # Call ids of its own: the SDK refuses one an earlier turn of the run used.
    second.model = ScriptedModel(
        [
            [function_call("echo", {"x": 4}, call_id="second_1")],
            [function_call("echo", {"x": 5}, call_id="second_2")],
            [assistant_message("done")],
        ]
    )
    first = DRIVER.build([tool], [call("echo", 2), call("echo", 3)], name="first")
    first.handoffs = [second]
    first.model.enqueue([function_call("transfer_to_second", {}, call_id="handoff")])
    assert Runner.run_sync(first, "go").final_output == "done"
    read = _outputs(second)
    echoes = [text for text in read if "echo" in text]
    # Two rejections before the handoff, one after; the 4th call in the run spends its budget.
    assert len(echoes) == 4, read
    assert all(UNAVAILABLE in text for text in echoes[:3]), echoes
    assert SPENT in echoes[3], echoes
    assert tool.runs == 2


def test_a_streamed_run_is_a_run(instrument):
    tool = open_echo_for(DRIVER, instrument, "assistant")

    async def streamed(steps: list) -> Agent:
        agent = Agent(name="assistant", instructions="Use tools.", model=script(steps), tools=[sdk_tool(tool)])
        result = Runner.run_streamed(agent, "go")
        async for _ in result.stream_events():
            pass
        assert result.final_output == "done"
        return agent

    steps = [call("echo", i) for i in range(2, 8)]
    agent = asyncio.run(streamed([*steps, "done"]))
    assert_budget_answers(_outputs(agent), 6)
    assert tool.runs == 1
    # The next streamed run starts with its budget whole.
    again = _outputs(asyncio.run(streamed([*steps, "done"])))
    assert all(UNAVAILABLE in text for text in again[:3]) and SPENT in again[3], again
