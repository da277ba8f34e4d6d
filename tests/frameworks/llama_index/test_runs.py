"""The run in LlamaIndex beyond the contract: an agent a tool runs joins its caller's run (the
run is held by the workflow's tasks), on the real ``FunctionAgent`` with the mock LLM."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("llama_index.core")
sys.path.insert(0, str(Path(__file__).parent))

from contract import Tool, call
from driver import LlamaIndexDriver, llama_tool
from llama_index.core.tools import FunctionTool
from run_contract import SPENT, UNAVAILABLE
from status_prompt import breaker_settings

DRIVER = LlamaIndexDriver()


def _open_echo(*agents: str) -> Tool:
    """``echo`` fails once for each agent in an earlier run: its breaker opens for each
    (breakers are per agent; threshold 1, a long cooldown)."""
    echo = Tool.flaky("echo", failures=len(agents))
    for name in agents:
        assert DRIVER.run(DRIVER.build([echo], [call("echo", 1), "done"], name=name)) == "done"
    assert echo.runs == len(agents)
    return echo


def _results(agent) -> list[str]:
    """The tool results of the agent's last request."""
    return [m.content or "" for m in agent.script.requests[-1] if m.role.value == "tool"]


def test_an_agent_a_tool_runs_joins_its_callers_run(instrument):
    breaker_settings(failure_threshold="1", recovery_timeout="600")
    instrument("llama_index")
    echo = _open_echo("outer", "inner")
    inner = DRIVER.build([echo], [call("echo", 4), call("echo", 5), "helped"], name="inner")

    async def helper(x: int) -> str:
        return str(await inner.workflow.run(user_msg=f"look up {x}"))

    outer = DRIVER.build([echo], [call("echo", 2), call("echo", 3), call("helper", 1), "done"], name="outer")
    helper_tool = FunctionTool.from_defaults(async_fn=helper, name="helper", description="Asks the inner agent.")
    outer.workflow.tools = [llama_tool(echo), helper_tool]
    assert DRIVER.run(outer) == "done"
    after = _results(inner)
    # Two rejections in the outer agent; the inner agent's first call is the run's 3rd, its second the 4th.
    assert len(after) == 2, after
    assert UNAVAILABLE in after[0] and SPENT in after[1], after
    assert echo.runs == 2
