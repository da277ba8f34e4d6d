"""An ordinary offline AutoGen program, with no breaker code in it.

A replayed model asks an AssistantAgent to call a tool whose backend is down
four times, then answers "done". It prints one JSON line: how often the tool
body ran and the tool results the model read back, so a test can see whether
the calls were guarded when the program is started with
``OTEL_BREAKER_ENABLED=true`` or through ``opentelemetry-instrument``.
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


async def inventory(sku: str) -> str:
    """Looks up the stock of a product."""
    BODY_RUNS[0] += 1
    raise ConnectionError("inventory service unreachable")


class RecordingClient(ReplayChatCompletionClient):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tool_results = []

    async def create(self, messages, **kwargs):
        last = messages[-1]
        if isinstance(last, FunctionExecutionResultMessage):
            self.tool_results.extend({"is_error": r.is_error, "content": r.content} for r in last.content)
        return await super().create(messages, **kwargs)


async def main():
    usage = RequestUsage(prompt_tokens=0, completion_tokens=0)
    script = [
        CreateResult(
            finish_reason="function_calls",
            usage=usage,
            cached=False,
            content=[FunctionCall(id=f"call_{i}", name="inventory", arguments=json.dumps({"sku": f"A{i}"}))],
        )
        for i in range(1, 5)
    ] + ["done"]
    model_info = {
        "vision": False,
        "function_calling": True,
        "json_output": False,
        "family": "unknown",
        "structured_output": False,
    }
    client = RecordingClient(script, model_info=model_info)
    agent = AssistantAgent(
        "shop", model_client=client, tools=[FunctionTool(inventory, description="stock")], max_tool_iterations=6
    )
    result = await agent.run(task="check the stock of four products")
    report = {"final": result.messages[-1].content, "body_runs": BODY_RUNS[0], "tool_results": client.tool_results}
    print(json.dumps({"autogen_report": report}))


if __name__ == "__main__":
    asyncio.run(main())
