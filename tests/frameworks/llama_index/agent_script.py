"""An ordinary offline LlamaIndex FunctionAgent whose tool always fails (no otel-breaker import).

Prints JSON: how often the tool body ran and what the model read back.
"""

import asyncio
import json

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

BODY_RUNS = 0
SEEN: list = []


def weather(city: str) -> str:
    """Looks up the weather."""
    global BODY_RUNS
    BODY_RUNS += 1
    raise RuntimeError("weather service down")


def scripted_model(messages, **kwargs):
    results = [m for m in messages if m.role == MessageRole.TOOL]
    if len(results) < 5:
        block = ToolCallBlock(tool_call_id=f"c{len(results)}", tool_name="weather", tool_kwargs={"city": "Oslo"})
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])
    SEEN[:] = [m.content for m in results]
    return ChatMessage(role=MessageRole.ASSISTANT, content="done")


async def main() -> None:
    agent = FunctionAgent(
        name="forecaster",
        description="answers weather questions",
        tools=[FunctionTool.from_defaults(weather)],
        llm=MockFunctionCallingLLM(response_generator=scripted_model),
    )
    response = await agent.run(user_msg="weather in Oslo?")
    print(json.dumps({"body_runs": BODY_RUNS, "tool_results": SEEN, "final": str(response)}))


if __name__ == "__main__":
    asyncio.run(main())
