"""Drives smolagents' ``ToolCallingAgent`` offline with a scripted ``Model``."""

from __future__ import annotations

import os
import pathlib
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from contract import PROMPT, Sent, Step, Tool
from smolagents import ToolCallingAgent
from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole, Model
from smolagents.monitoring import LogLevel
from smolagents.tools import Tool as SmolTool


def smol_tool(tool: Tool) -> SmolTool:
    class ContractTool(SmolTool):
        name = tool.name
        description = f"Looks up {tool.name} for x."
        inputs = {"x": {"type": "integer", "description": "the id"}}  # noqa: RUF012 - smolagents reads it from the class
        output_type = "string"

        def forward(self, x: int) -> str:
            return tool(x)

    return ContractTool()


def _text(message: ChatMessage) -> str:
    content = message.content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


class _Script(Model):
    """Answers each model call with the next step (a final text is smolagents'
    ``final_answer`` tool call); records the messages of every call."""

    def __init__(self, steps: list[Step]) -> None:
        super().__init__(model_id="scripted")
        self.steps = list(steps)
        self.received: list[list[ChatMessage]] = []
        self.tools_sent: list[dict[str, Any]] = []

    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kwargs):
        self.received.append(list(messages))
        self.tools_sent.append({t.name: (t.description, t.inputs) for t in tools_to_call_from or ()})
        step = self.steps.pop(0)
        name, arguments = ("final_answer", {"answer": step}) if isinstance(step, str) else step
        call = ChatMessageToolCall(
            id=f"call_{len(self.received)}",
            type="function",
            function=ChatMessageToolCallFunction(name=name, arguments=dict(arguments)),
        )
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])


class SmolagentsDriver:
    framework = "smolagents"
    script = pathlib.Path(__file__).with_name("agent_script.py")

    def build(self, tools: list[Tool], steps: list[Step], *, name: str = "assistant", instructions: str = PROMPT):
        agent = ToolCallingAgent(
            tools=[smol_tool(t) for t in tools],
            model=_Script(steps),
            instructions=instructions,
            max_steps=len(steps) + 2,
            verbosity_level=LogLevel.OFF,
            name=name,
        )
        agent.instructions_under_test = instructions
        return agent

    def run(self, agent: Any, prompt: str = "go") -> str:
        return agent.run(prompt)

    def sent(self, agent: Any) -> list[Sent]:
        """The system prompt is smolagents' template with the instructions inside: what the
        model read beyond the agent's own prompt (the status block) follows the instructions."""
        base = agent.system_prompt
        sent = []
        for messages in agent.model.received:
            system = _text(messages[0]) if messages and messages[0].role == MessageRole.SYSTEM else ""
            extra = system[len(base) :] if system.startswith(base) else system
            results = [_text(m) for m in messages if m.role == MessageRole.TOOL_RESPONSE]
            sent.append(Sent(agent.instructions_under_test + extra, results))
        return sent

    def tools_sent(self, agent: Any) -> list[dict[str, Any]]:
        return list(agent.model.tools_sent)
