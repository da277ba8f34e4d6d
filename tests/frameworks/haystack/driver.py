"""Drives a Haystack ``Agent`` offline with Haystack's own ``MockChatGenerator``."""

from __future__ import annotations

import os
import pathlib
from typing import Any

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

from contract import PROMPT, Sent, Step, Tool
from haystack.components.agents import Agent
from haystack.components.generators.chat.mock import MockChatGenerator
from haystack.dataclasses import ChatMessage, ToolCall
from haystack.tools import create_tool_from_function


def haystack_tool(tool: Tool) -> Any:
    def fn(x: int) -> str:
        return tool(x)

    fn.__name__ = tool.name
    fn.__doc__ = f"Looks up {tool.name} for x."
    return create_tool_from_function(fn, name=tool.name)


class ScriptedModel:
    """Answers with ``steps`` in turn; records what each request carried."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps, self.sent, self.tools_sent = list(steps), [], []

    def __call__(self, messages: list[ChatMessage], tools: Any = None) -> ChatMessage:
        self.tools_sent.append({t.name: t.tool_spec for t in tools or ()})
        system = next((m.text for m in messages if m.is_from("system")), None)
        results = [str(m.tool_call_result.result) for m in messages if m.tool_call_result is not None]
        self.sent.append(Sent(system, results))
        step = self.steps[min(len(self.sent), len(self.steps)) - 1]
        if isinstance(step, str):
            return ChatMessage.from_assistant(step)
        name, arguments = step
        return ChatMessage.from_assistant(
            tool_calls=[ToolCall(tool_name=name, arguments=arguments, id=f"call_{len(self.sent)}")]
        )


class HaystackDriver:
    framework = "haystack"
    script = pathlib.Path(__file__).with_name("agent_script.py")

    def build(self, tools: list[Tool], steps: list[Step], *, name: str = "assistant", instructions: str = PROMPT):
        from haystack import Pipeline

        model = ScriptedModel(steps)
        agent = Agent(
            chat_generator=MockChatGenerator(response_fn=model),
            tools=[haystack_tool(t) for t in tools],
            system_prompt=instructions,
            max_agent_steps=len(steps) + 2,
        )
        # In a pipeline the Agent's component name is its name.
        Pipeline().add_component(name, agent)
        agent.scripted_model = model
        return agent

    def run(self, agent: Any, prompt: str = "go") -> str:
        return agent.run(messages=[ChatMessage.from_user(prompt)])["messages"][-1].text

    async def arun(self, agent: Any, prompt: str = "go") -> str:
        return (await agent.run_async(messages=[ChatMessage.from_user(prompt)]))["messages"][-1].text

    def sent(self, agent: Any) -> list[Sent]:
        return list(agent.scripted_model.sent)

    def tools_sent(self, agent: Any) -> list[dict[str, Any]]:
        return list(agent.scripted_model.tools_sent)
