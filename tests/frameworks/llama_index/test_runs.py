"""The run in LlamaIndex beyond the contract: an agent a tool runs joins its caller's run (the
run is held by the workflow's tasks), on the real ``FunctionAgent`` with the mock LLM."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("llama_index.core")
sys.path.insert(0, str(Path(__file__).parent))

from contract import call
from driver import LlamaIndexDriver, llama_tool
from llama_index.core.tools import FunctionTool
from run_contract import assert_inner_agent_joined, open_echo_for

DRIVER = LlamaIndexDriver()


def _results(agent) -> list[str]:
    """The tool results of the agent's last request."""
    return [m.content or "" for m in agent.script.requests[-1] if m.role.value == "tool"]


def test_an_agent_a_tool_runs_joins_its_callers_run(instrument):
    echo = open_echo_for(DRIVER, instrument, "outer", "inner")
    inner = DRIVER.build([echo], [call("echo", 4), call("echo", 5), "helped"], name="inner")

    async def helper(x: int) -> str:
        return str(await inner.workflow.run(user_msg=f"look up {x}"))

    outer = DRIVER.build([echo], [call("echo", 2), call("echo", 3), call("helper", 1), "done"], name="outer")
    helper_tool = FunctionTool.from_defaults(async_fn=helper, name="helper", description="Asks the inner agent.")
    outer.workflow.tools = [llama_tool(echo), helper_tool]
    assert DRIVER.run(outer) == "done"
    assert_inner_agent_joined(_results(inner), echo)
