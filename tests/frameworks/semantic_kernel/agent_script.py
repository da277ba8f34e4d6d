"""An ordinary offline Semantic Kernel program that knows nothing of otel-breaker.

One ``ChatCompletionAgent`` whose plugin function always fails is asked for five
function calls by a scripted chat-completion service (the kernel's own auto
function calling, only the model call scripted), then answers. It prints JSON:
how often the function body ran, what the model read back, and the answer. The
zero-code tests run it unchanged, guarded from the environment.
"""

import asyncio
import json
import logging

from scripted_service import ScriptedChatService
from semantic_kernel import Kernel
from semantic_kernel.agents import ChatCompletionAgent
from semantic_kernel.connectors.ai.function_choice_behavior import FunctionChoiceBehavior
from semantic_kernel.functions import kernel_function

logging.disable(logging.CRITICAL)  # the kernel logs a traceback for every failed call
BODY_RUNS = 0


class Stock:
    @kernel_function(description="Stock level of an item (its backend is down).")
    def inventory(self, x: int) -> str:
        global BODY_RUNS
        BODY_RUNS += 1
        raise RuntimeError("inventory service unreachable")


async def main() -> None:
    service = ScriptedChatService([[("Stock-inventory", {"x": i}, f"call_{i}")] for i in range(1, 6)])
    kernel = Kernel()
    kernel.add_service(service)
    kernel.add_plugin(Stock(), "Stock")
    agent = ChatCompletionAgent(
        kernel=kernel,
        name="stock_agent",
        instructions="Answer with stock levels.",
        function_choice_behavior=FunctionChoiceBehavior.Auto(),
    )
    response = await agent.get_response("How many bolts?")
    report = {"body_runs": BODY_RUNS, "tool_results": service.tool_results(), "final": str(response.message.content)}
    print(json.dumps(report))


asyncio.run(main())
