"""The shared framework contract, on an MCP client loop (real server, the SDK's ``Client``).

MCP has no agent and no model prompt of its own: a tool call belongs to the
agent of the framework that makes it (covered by those frameworks' suites), and
the status block is the host framework's to add. Those scenarios are skipped here.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")
sys.path.insert(0, str(Path(__file__).parent))

from contract import FrameworkContract
from driver import MCPDriver
from loop_contract import LoopContract
from run_contract import RunContract

NO_AGENT = "MCP has no agent of its own: the calling framework's suite covers agent names"
NO_PROMPT = "MCP sends no model prompt: the host framework adds the status block"


@pytest.fixture(autouse=True)
def quiet_server():
    """The server logs a traceback per failing tool."""
    logging.disable(logging.ERROR)
    yield
    logging.disable(logging.NOTSET)


class TestContract(FrameworkContract, LoopContract, RunContract):
    driver = MCPDriver()
    guards_unknown_tools = True

    @pytest.mark.skip(reason=NO_AGENT)
    def test_failures_counted_once_and_model_reads_rejection(self): ...

    @pytest.mark.skip(reason=NO_AGENT)
    def test_agents_sharing_a_tool_name_do_not_share_a_breaker(self): ...

    @pytest.mark.skip(reason=NO_AGENT)
    def test_each_agent_sees_only_the_breakers_that_can_reject_its_calls(self): ...

    @pytest.mark.skip(reason=NO_PROMPT)
    def test_status_block_follows_the_breaker_open_half_open_closed(self): ...

    @pytest.mark.skip(reason=NO_PROMPT)
    def test_hostile_tool_names_and_errors_never_reach_the_prompt_raw(self): ...
