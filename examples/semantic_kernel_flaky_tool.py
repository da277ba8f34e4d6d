"""A Semantic Kernel agent's flaky plugin function trips its circuit breaker, the model is told why,
and the breaker recovers.

Offline: the chat-completion service is a ``ChatCompletionClientBase`` whose model call is scripted
to call the function; the kernel's own auto function calling runs it. No API key needed.
Run:  pip install -e ".[semantic-kernel]"   (semantic-kernel)
      (in a clone of this repository; once released: pip install "otel-breaker[semantic-kernel]")
      python examples/semantic_kernel_flaky_tool.py
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, ClassVar

from semantic_kernel import Kernel
from semantic_kernel.agents import ChatCompletionAgent
from semantic_kernel.connectors.ai.chat_completion_client_base import ChatCompletionClientBase
from semantic_kernel.connectors.ai.function_choice_behavior import FunctionChoiceBehavior
from semantic_kernel.contents import AuthorRole, ChatMessageContent, FunctionCallContent, FunctionResultContent
from semantic_kernel.functions import kernel_function

from otel_breaker import CircuitBreakerConfig
from otel_breaker.breaker import add_global_listener
from otel_breaker.config import configure
from otel_breaker.instrumentation import BreakerInstrumentor

logging.getLogger("semantic_kernel").setLevel(logging.CRITICAL)  # it logs a traceback per failed call
BACKEND_UP = False
BODY_RUNS = 0


class Catalogue:
    @kernel_function(description="Searches the product catalogue.")
    def search(self, query: str) -> str:
        global BODY_RUNS
        BODY_RUNS += 1
        if not BACKEND_UP:
            raise ConnectionError("catalogue backend unreachable")
        return f"3 results for {query!r}"


class ScriptedService(ChatCompletionClientBase):
    """Calls ``Catalogue-search`` ``n_calls`` times, then answers "done" (printing what it read)."""

    SUPPORTS_FUNCTION_CALLING: ClassVar[bool] = True
    n_calls: int = 0
    label: str = ""
    turn: int = 0

    async def _inner_get_chat_message_contents(self, chat_history: Any, settings: Any) -> list[ChatMessageContent]:
        if self.turn < self.n_calls:
            self.turn += 1
            call = FunctionCallContent(
                id=f"{self.label}_{self.turn}", name="Catalogue-search", arguments='{"query": "lamps"}'
            )
            return [ChatMessageContent(role=AuthorRole.ASSISTANT, items=[call])]
        for message in chat_history.messages:
            for item in message.items:
                if isinstance(item, FunctionResultContent):
                    print(f"  model reads: {str(item.result)[:110]}")
        return [ChatMessageContent(role=AuthorRole.ASSISTANT, content="done")]


SERVICE = ScriptedService(ai_model_id="scripted")
kernel = Kernel()
kernel.add_service(SERVICE)
kernel.add_plugin(Catalogue(), "Catalogue")
agent = ChatCompletionAgent(
    kernel=kernel,
    name="shop_assistant",
    instructions="Find products.",
    function_choice_behavior=FunctionChoiceBehavior.Auto(),
)


async def run_agent(n_calls: int, label: str) -> None:
    SERVICE.n_calls, SERVICE.label, SERVICE.turn = n_calls, label, 0
    response = await agent.get_response("find lamps")
    print(f"  agent finished: {str(response.message.content)!r}")


async def main() -> None:
    BreakerInstrumentor().instrument(frameworks=["semantic_kernel"])
    # Open after 2 failures; allow a probe after a short cooldown; close after one good probe.
    configure(defaults=CircuitBreakerConfig(failure_threshold=2, recovery_timeout=0.5, success_threshold=1))
    add_global_listener(
        lambda change: print(
            f"  breaker {change.breaker.name} ({change.breaker.agent_name}): "
            f"{change.from_state.value} -> {change.to_state.value}"
        )
    )
    global BACKEND_UP

    print("1) backend down: one run of 4 function calls")
    await run_agent(4, "a")
    print(f"   function body ran {BODY_RUNS} times (2 failures, then the breaker answered instead)")

    print("2) backend back; cooldown passes; 2 function calls")
    BACKEND_UP = True
    time.sleep(0.6)
    await run_agent(2, "b")
    print(f"   function body ran {BODY_RUNS} times in total")


if __name__ == "__main__":
    asyncio.run(main())
