"""The shared framework contract, on Agent Framework's own agent loop (offline)."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

from agent_framework import Agent, tool
from contract import PROMPT, FrameworkContract, Sent, Step, Tool
from loop_contract import LoopContract
from run_contract import RunContract
from scripted_client import ScriptedChatClient


class AgentFrameworkDriver:
    framework = "agent_framework"
    script = pathlib.Path(__file__).with_name("agent_script.py")
    native_tool_spans = True

    def build(self, tools: list[Tool], steps: list[Step], *, name: str = "assistant", instructions: str = PROMPT):
        turns = [[(s[0], s[1], f"call_{i}")] if isinstance(s, tuple) else s for i, s in enumerate(steps, 1)]
        # the contract's tools fail more than three times in a row, the framework's default limit
        # (and the loop scenarios make 20 identical invalid calls in a row)
        client = ScriptedChatClient(turns, function_invocation_configuration={"max_consecutive_errors_per_request": 25})
        functions = [tool(t.__call__, name=t.name, description=f"The {t.name} tool.") for t in tools]
        return Agent(client=client, name=name, instructions=instructions, tools=functions)

    def run(self, agent: Any, prompt: str = "go") -> str:
        return asyncio.run(agent.run(prompt)).text

    def sent(self, agent: Any) -> list[Sent]:
        found = []
        for messages in agent.client.sent:
            system = messages[0].text if messages and messages[0].role == "system" else None
            results = [str(c.result) for m in messages for c in m.contents if c.type == "function_result"]
            found.append(Sent(system, results))
        return found

    def tools_sent(self, agent: Any) -> list[dict[str, Any]]:
        return agent.client.tools_sent


class TestContract(FrameworkContract, LoopContract, RunContract):
    driver = AgentFrameworkDriver()
    guards_unknown_tools = True


def test_a_streamed_run_is_one_run(instrument):
    """``run(stream=True)``: every pull of the stream is inside one run, so the waste budget
    answers the 4th call of the open tool, and the next streamed run starts whole."""
    from contract import call
    from run_contract import SPENT, UNAVAILABLE
    from status_prompt import breaker_settings

    breaker_settings(failure_threshold="1", recovery_timeout="600")
    instrument("agent_framework")
    driver = TestContract.driver
    echo = Tool.flaky("echo", failures=1)
    assert driver.run(driver.build([echo], [call("echo", 1), "done"])) == "done"

    async def streamed(agent: Any) -> None:
        async for _ in agent.run("go", stream=True):
            pass

    for _ in range(2):
        agent = driver.build([echo, Tool.healthy("other")], [*(call("echo", i) for i in range(2, 8)), "done"])
        asyncio.run(asyncio.wait_for(streamed(agent), 60))
        read = driver.sent(agent)[-1].tool_results
        assert echo.runs == 1
        assert len(read) == 6
        assert all(UNAVAILABLE in r for r in read[:3]), read
        assert all(SPENT in r for r in read[3:]), read
        menus = driver.tools_sent(agent)
        assert all("echo" not in menu and "other" in menu for menu in menus[4:]), menus
