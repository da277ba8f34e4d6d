"""An ordinary offline Agent Framework program that knows nothing of otel-breaker.

One agent whose tool always fails is asked for five tool calls by a scripted
model (the framework's own chat-client layers, only the model call scripted),
then answers. The framework would end a request after three erroring turns in
a row; this program allows ten. It prints JSON: how often the tool body ran,
what the model read back, and the answer. The zero-code tests run it
unchanged, guarded from the environment.
"""

import asyncio
import json
import logging

from agent_framework import Agent, tool
from scripted_client import ScriptedChatClient

logging.disable(logging.WARNING)  # the framework logs every failed call
BODY_RUNS = 0


@tool
def inventory(x: int) -> str:
    """Stock level of an item (its backend is down)."""
    global BODY_RUNS
    BODY_RUNS += 1
    raise RuntimeError("inventory service unreachable")


async def main() -> None:
    turns = [[("inventory", {"x": i}, f"call_{i}")] for i in range(1, 6)]
    client = ScriptedChatClient(turns, function_invocation_configuration={"max_consecutive_errors_per_request": 10})
    agent = Agent(client=client, name="stock_agent", instructions="Answer with stock levels.", tools=[inventory])
    response = await agent.run("How many bolts?")
    print(json.dumps({"body_runs": BODY_RUNS, "tool_results": client.tool_results(), "final": response.text}))


asyncio.run(main())
