"""Drives a LlamaIndex ``FunctionAgent`` offline with the framework's ``MockFunctionCallingLLM``."""

from __future__ import annotations

import asyncio
import pathlib
from dataclasses import dataclass, field
from typing import Any

from contract import PROMPT, Sent, Step, Tool
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool


def llama_tool(tool: Tool) -> FunctionTool:
    def fn(x: int) -> str:
        return tool(x)

    return FunctionTool.from_defaults(fn, name=tool.name, description=f"Looks up {tool.name} for x.")


def _definition(tool: Any) -> tuple[str, Any]:
    """A tool as the model is offered it: name -> its OpenAI tool definition."""
    spec = tool if isinstance(tool, dict) else tool.metadata.to_openai_tool()
    return spec.get("function", spec)["name"], spec


@dataclass
class Script:
    """The scripted model: one step per request, every request recorded."""

    steps: list[Step]
    requests: list[list[ChatMessage]] = field(default_factory=list)
    tools_sent: list[dict[str, Any]] = field(default_factory=list)

    def generate(self, messages: Any, **kwargs: Any) -> ChatMessage:
        self.requests.append(list(messages))
        self.tools_sent.append(dict(_definition(t) for t in kwargs.get("tools") or ()))
        step = self.steps[len(self.requests) - 1]
        if isinstance(step, str):
            return ChatMessage(role=MessageRole.ASSISTANT, content=step)
        name, arguments = step
        block = ToolCallBlock(tool_call_id=f"call_{len(self.requests)}", tool_name=name, tool_kwargs=arguments)
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])


@dataclass
class Agent:
    workflow: FunctionAgent
    script: Script


class LlamaIndexDriver:
    framework = "llama_index"
    script = pathlib.Path(__file__).with_name("agent_script.py")

    def build(self, tools: list[Tool], steps: list[Step], *, name: str = "assistant", instructions: str = PROMPT):
        script = Script(steps)
        agent = FunctionAgent(
            name=name,
            description="a contract agent",
            system_prompt=instructions,
            tools=[llama_tool(t) for t in tools],
            llm=MockFunctionCallingLLM(response_generator=script.generate),
        )
        return Agent(agent, script)

    async def arun(self, agent: Agent, prompt: str = "go") -> str:
        return str(await agent.workflow.run(user_msg=prompt))

    def run(self, agent: Agent, prompt: str = "go") -> str:
        return asyncio.run(self.arun(agent, prompt))

    def sent(self, agent: Agent) -> list[Sent]:
        sent = []
        for messages in agent.script.requests:
            system = next((m for m in messages if m.role == MessageRole.SYSTEM), None)
            results = [m.content or "" for m in messages if m.role == MessageRole.TOOL]
            sent.append(Sent(system.content if system is not None else None, results))
        return sent

    def tools_sent(self, agent: Agent) -> list[dict[str, Any]]:
        return list(agent.script.tools_sent)
