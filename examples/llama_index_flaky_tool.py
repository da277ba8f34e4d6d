"""A LlamaIndex agent's flaky tool trips its circuit breaker, the model is told why, and the breaker recovers.

Offline: the LLM is llama-index's own MockFunctionCallingLLM, scripted to call the tool.
Run:  pip install -e ".[llama-index]"   (llama-index-core)
      (in a clone of this repository; once released: pip install "otel-breaker[llama-index]")
      python examples/llama_index_flaky_tool.py
"""

from __future__ import annotations

import asyncio
import time

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from otel_breaker.breaker import add_global_listener
from otel_breaker.config import load_settings, set_settings
from otel_breaker.instrumentation import BreakerInstrumentor

BACKEND_UP = False
BODY_RUNS = 0


def search(query: str) -> str:
    """Searches the product catalogue."""
    global BODY_RUNS
    BODY_RUNS += 1
    if not BACKEND_UP:
        raise ConnectionError("catalogue backend unreachable")
    return f"3 results for {query!r}"


def scripted_llm(n_calls: int) -> MockFunctionCallingLLM:
    """Asks for the tool n times, printing each result it reads, then answers."""

    def respond(messages, **kwargs):
        results = [m for m in messages if m.role == MessageRole.TOOL]
        if results:
            print(f"  model reads: {results[-1].content[:110]}")
        if len(results) < n_calls:
            block = ToolCallBlock(tool_call_id=f"c{len(results)}", tool_name="search", tool_kwargs={"query": "lamps"})
            return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])
        return ChatMessage(role=MessageRole.ASSISTANT, content="done")

    return MockFunctionCallingLLM(response_generator=respond)


async def main() -> None:
    BreakerInstrumentor().instrument(frameworks=["llama_index"])
    # Breakers are per agent here, so configure the defaults every agent's breaker starts from:
    # open after 2 failures; allow a probe after a short cooldown; close after one good probe.
    set_settings(
        load_settings(
            {
                "OTEL_BREAKER_FAILURE_THRESHOLD": "2",
                "OTEL_BREAKER_RECOVERY_TIMEOUT": "0.5",
                "OTEL_BREAKER_SUCCESS_THRESHOLD": "1",
            }
        )
    )
    add_global_listener(
        lambda change: print(
            f"  breaker {change.breaker.name} ({change.breaker.agent_name}): "
            f"{change.from_state.value} -> {change.to_state.value}"
        )
    )
    global BACKEND_UP
    tool = FunctionTool.from_defaults(search)
    agent = FunctionAgent(name="shopper", description="finds products", tools=[tool], llm=scripted_llm(4))

    print("1) backend down: 4 tool calls")
    print(f"  agent answered: {await agent.run(user_msg='find lamps')}")
    print(f"   tool body ran {BODY_RUNS} times (2 failures, then the breaker answered instead)")

    print("2) backend back; cooldown passes; 2 tool calls")
    BACKEND_UP = True
    time.sleep(0.6)
    agent.llm = scripted_llm(2)
    print(f"  agent answered: {await agent.run(user_msg='find lamps')}")
    print(f"   tool body ran {BODY_RUNS} times in total")


if __name__ == "__main__":
    asyncio.run(main())
