"""An ordinary offline AutoGen program, with no breaker code in it.

A replayed model asks an AssistantAgent to call a tool whose backend is down
five times, then answers "done". It prints one JSON line: how often the tool
body ran, the tool results the model read and the final answer.
"""

import asyncio
import json
import logging
import os
import warnings

os.environ.setdefault("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")

from autogen_agentchat.agents import AssistantAgent
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, FunctionExecutionResultMessage, RequestUsage
from autogen_core.tools import FunctionTool
from autogen_ext.models.replay import ReplayChatCompletionClient

logging.getLogger("autogen_core").setLevel(logging.ERROR)
warnings.filterwarnings("ignore")

BODY_RUNS = [0]
SEEN = []


async def inventory(x: int) -> str:
    """Looks up the stock of product x."""
    BODY_RUNS[0] += 1
    raise ConnectionError("inventory service unreachable")


class RecordingClient(ReplayChatCompletionClient):
    async def create(self, messages, **kwargs):
        SEEN[:] = [r.content for m in messages if isinstance(m, FunctionExecutionResultMessage) for r in m.content]
        return await super().create(messages, **kwargs)


async def main():
    usage = RequestUsage(prompt_tokens=0, completion_tokens=0)
    script = [
        CreateResult(
            finish_reason="function_calls",
            usage=usage,
            cached=False,
            content=[FunctionCall(id=f"call_{i}", name="inventory", arguments=json.dumps({"x": i}))],
        )
        for i in range(5)
    ] + ["done"]
    model_info = {
        "vision": False,
        "function_calling": True,
        "json_output": False,
        "family": "unknown",
        "structured_output": False,
    }
    agent = AssistantAgent(
        "shop",
        model_client=RecordingClient(script, model_info=model_info),
        tools=[FunctionTool(inventory, description="Looks up the stock of product x.")],
        max_tool_iterations=7,
    )
    result = await agent.run(task="check the stock")
    print(json.dumps({"body_runs": BODY_RUNS[0], "tool_results": SEEN, "final": result.messages[-1].content}))


if __name__ == "__main__":
    asyncio.run(main())
