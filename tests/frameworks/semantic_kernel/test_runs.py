"""The run in Semantic Kernel beyond the contract: a ``ChatCompletionAgent``'s ``invoke_stream``
is a run, on the real agent with the scripted chat service."""

from __future__ import annotations

import asyncio
from typing import Any

import test_contract as sk
from contract import Tool, call
from run_contract import assert_each_run_budgeted
from status_prompt import breaker_settings

DRIVER = sk.SemanticKernelDriver()


def _streamed(agent: Any) -> str:
    async def consume() -> str:
        return "".join([str(chunk.message.content) async for chunk in agent.invoke_stream("go")])

    return asyncio.run(consume())


def test_invoke_stream_is_a_run(instrument):
    breaker_settings(failure_threshold="1", recovery_timeout="600")
    instrument("semantic_kernel")
    echo = Tool.flaky("echo", failures=1)
    assert DRIVER.run(DRIVER.build([echo], [call("echo", 1), "done"])) == "done"

    def stream(agent: Any) -> None:
        assert "done" in _streamed(agent)

    # Four calls: the kernel's own limit (5 auto-invoke attempts) ends a longer run.
    assert_each_run_budgeted(DRIVER, echo, stream, calls=4)
