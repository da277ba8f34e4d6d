"""Drives an AutoGen ``AssistantAgent`` offline with AutoGen's own ``ReplayChatCompletionClient``."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pathlib
import warnings
from typing import Any

os.environ.setdefault("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")

from autogen_agentchat.agents import AssistantAgent
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, FunctionExecutionResultMessage, RequestUsage, SystemMessage
from autogen_core.tools import FunctionTool
from autogen_ext.models.replay import ReplayChatCompletionClient
from contract import PROMPT, Sent, Step, Tool

logging.getLogger("autogen_core").setLevel(logging.ERROR)
warnings.filterwarnings("ignore", message=".*Token count.*")

MODEL_INFO = {
    "vision": False,
    "function_calling": True,
    "json_output": False,
    "family": "unknown",
    "structured_output": False,
}


def autogen_tool(tool: Tool) -> FunctionTool:
    async def fn(x: int) -> str:
        return tool(x)

    return FunctionTool(fn, description=f"Looks up {tool.name} for x.", name=tool.name)


def answers(steps: list[Step]) -> list[Any]:
    usage = RequestUsage(prompt_tokens=0, completion_tokens=0)
    scripted: list[Any] = []
    for i, step in enumerate(steps):
        if isinstance(step, str):
            scripted.append(step)
        else:
            name, arguments = step
            content = [FunctionCall(id=f"call_{i}", name=name, arguments=json.dumps(arguments))]
            scripted.append(CreateResult(finish_reason="function_calls", usage=usage, cached=False, content=content))
    return scripted


class RecordingClient(ReplayChatCompletionClient):
    """Records the messages and the tool names of every model call."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.requests: list[list[Any]] = []
        self.tools_sent: list[dict[str, Any]] = []

    def _record(self, messages: Any, tools: Any) -> None:
        self.requests.append(list(messages))
        schemas = [t if isinstance(t, dict) else t.schema for t in tools or ()]
        self.tools_sent.append({s["name"]: s for s in schemas})

    async def create(self, messages, *, tools=(), **kwargs):
        self._record(messages, tools)
        return await super().create(messages, tools=tools, **kwargs)

    async def create_stream(self, messages, *, tools=(), **kwargs):
        self._record(messages, tools)
        async for chunk in super().create_stream(messages, tools=tools, **kwargs):
            yield chunk


class AutoGenDriver:
    framework = "autogen"
    script = pathlib.Path(__file__).with_name("agent_script.py")

    def build(self, tools: list[Tool], steps: list[Step], *, name: str = "assistant", instructions: str = PROMPT):
        return AssistantAgent(
            name,
            model_client=RecordingClient(answers(steps), model_info=MODEL_INFO),
            tools=[autogen_tool(t) for t in tools],
            system_message=instructions,
            max_tool_iterations=len(steps) + 2,
        )

    def run(self, agent: Any, prompt: str = "go") -> str:
        return asyncio.run(self.arun(agent, prompt))

    async def arun(self, agent: Any, prompt: str = "go") -> str:
        return (await agent.run(task=prompt)).messages[-1].content

    def sent(self, agent: Any) -> list[Sent]:
        sent = []
        for messages in agent._model_client.requests:
            system = next((m.content for m in messages if isinstance(m, SystemMessage)), None)
            results = [r.content for m in messages if isinstance(m, FunctionExecutionResultMessage) for r in m.content]
            sent.append(Sent(system, results))
        return sent

    def tools_sent(self, agent: Any) -> list[dict[str, Any]]:
        return list(agent._model_client.tools_sent)
