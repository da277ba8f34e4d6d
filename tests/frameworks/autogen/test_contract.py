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
