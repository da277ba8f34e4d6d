"""Drives a LangGraph ReAct agent offline with LangChain's own fake chat model."""

from __future__ import annotations

import pathlib
import warnings
from dataclasses import dataclass
from typing import Any

from contract import PROMPT, Sent, Step, Tool
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import ToolNode, create_react_agent


class RecordingModel(FakeMessagesListChatModel):
    """The framework's own fake chat model, binding tools as provider models do
    (``bind(tools=[<OpenAI tool dicts>])``) and recording every request's messages and tools."""

    seen: list = Field(default_factory=list)
    tools_sent: list = Field(default_factory=list)

    def bind_tools(self, tools, **kwargs):
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.seen.append(list(messages))
        self.tools_sent.append({t["function"]["name"]: t for t in kwargs.get("tools") or ()})
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def langchain_tool(tool: Tool) -> StructuredTool:
    def fn(x: int) -> str:
        return tool(x)

    return StructuredTool.from_function(fn, name=tool.name, description=f"Looks up {tool.name} for x.")


def responses(steps: list[Step]) -> list[AIMessage]:
    messages = []
    for i, step in enumerate(steps):
        if isinstance(step, str):
            messages.append(AIMessage(step))
        else:
            name, arguments = step
            messages.append(AIMessage("", tool_calls=[{"name": name, "args": arguments, "id": f"call_{i}"}]))
    return messages


@dataclass
class Agent:
    graph: Any
    model: RecordingModel


class LangChainDriver:
    framework = "langchain"
    script = pathlib.Path(__file__).with_name("agent_script.py")

    def build(self, tools: list[Tool], steps: list[Step], *, name: str = "assistant", instructions: str = PROMPT):
        model = RecordingModel(responses=responses(steps), seen=[], tools_sent=[])
        node = ToolNode([langchain_tool(t) for t in tools], handle_tool_errors=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = create_react_agent(model, node, prompt=instructions, name=name)
        return Agent(graph, model)

    def run(self, agent: Agent, prompt: str = "go") -> str:
        return agent.graph.invoke({"messages": [HumanMessage(prompt)]})["messages"][-1].text

    async def arun(self, agent: Agent, prompt: str = "go") -> str:
        return (await agent.graph.ainvoke({"messages": [HumanMessage(prompt)]}))["messages"][-1].text

    def sent(self, agent: Agent) -> list[Sent]:
        sent = []
        for messages in agent.model.seen:
            system = next((m for m in messages if m.type == "system"), None)
            results = [m.text for m in messages if isinstance(m, ToolMessage)]
            sent.append(Sent(system.text if system is not None else None, results))
        return sent

    def tools_sent(self, agent: Agent) -> list[dict[str, Any]]:
        return list(agent.model.tools_sent)
