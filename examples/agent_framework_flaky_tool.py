"""A Microsoft Agent Framework agent's flaky tool trips its circuit breaker, the model is told why,
and the breaker recovers.

Offline: the chat client is the framework's own function-invocation layer over ``BaseChatClient``,
with only the model call scripted to call the tool; no API key needed.
Run:  pip install -e ".[agent-framework]"   (agent-framework-core)
      (in a clone of this repository; once released: pip install "otel-breaker[agent-framework]")
      python examples/agent_framework_flaky_tool.py
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from agent_framework import Agent, BaseChatClient, ChatResponse, Content, FunctionInvocationLayer, Message, tool

from otel_breaker import CircuitBreakerConfig
from otel_breaker.breaker import add_global_listener
from otel_breaker.config import configure
from otel_breaker.instrumentation import BreakerInstrumentor

logging.getLogger("agent_framework").setLevel(logging.CRITICAL)  # it logs every failed call
BACKEND_UP = False
BODY_RUNS = 0


@tool
def search(query: str) -> str:
    """Searches the product catalogue."""
    global BODY_RUNS
    BODY_RUNS += 1
    if not BACKEND_UP:
        raise ConnectionError("catalogue backend unreachable")
    return f"3 results for {query!r}"


class ScriptedClient(FunctionInvocationLayer, BaseChatClient):
    """Calls ``search`` ``n_calls`` times, then answers "done" (printing what it read)."""

    n_calls, label, turn = 0, "", 0

    def plan(self, n_calls: int, label: str) -> None:
        self.n_calls, self.label, self.turn = n_calls, label, 0

    def _inner_get_response(self, *, messages: Any, stream: bool, options: dict[str, Any], **kwargs: Any) -> Any:
        async def respond() -> ChatResponse:
            if self.turn < self.n_calls:
                self.turn += 1
                call = Content.from_function_call(
                    call_id=f"{self.label}_{self.turn}", name="search", arguments={"query": "lamps"}
                )
                return ChatResponse(messages=Message(role="assistant", contents=[call]))
            for message in messages:
                for content in message.contents:
                    if content.type == "function_result":
                        print(f"  model reads: {str(content.result)[:110]}")
            return ChatResponse(messages=Message(role="assistant", contents=["done"]))

        return respond()


CLIENT = ScriptedClient()
agent = Agent(client=CLIENT, name="shop_assistant", instructions="Find products.", tools=[search])


async def run_agent(n_calls: int, label: str) -> None:
    CLIENT.plan(n_calls, label)
    response = await agent.run("find lamps")
    print(f"  agent finished: {response.text!r}")


async def main() -> None:
    BreakerInstrumentor().instrument(frameworks=["agent_framework"])
    # Open after 2 failures; allow a probe after a short cooldown; close after one good probe.
    configure(defaults=CircuitBreakerConfig(failure_threshold=2, recovery_timeout=0.5, success_threshold=1))
    add_global_listener(
        lambda change: print(
            f"  breaker {change.breaker.name} ({change.breaker.agent_name}): "
            f"{change.from_state.value} -> {change.to_state.value}"
        )
    )
    global BACKEND_UP

    print("1) backend down: one run of 4 tool calls")
    await run_agent(4, "a")
    print(f"   tool body ran {BODY_RUNS} times (2 failures, then the breaker answered instead)")

    print("2) backend back; cooldown passes; 2 tool calls")
    BACKEND_UP = True
    time.sleep(0.6)
    await run_agent(2, "b")
    print(f"   tool body ran {BODY_RUNS} times in total")


if __name__ == "__main__":
    asyncio.run(main())
