"""Drives an Agno ``Agent`` offline against a scripted OpenAI-compatible model on 127.0.0.1."""

from __future__ import annotations

import atexit
import os
import pathlib
from typing import Any

os.environ.setdefault("AGNO_TELEMETRY", "false")

from agno.agent import Agent
from agno.models.openai import OpenAIChat
from contract import PROMPT, Sent, Step, Tool
from scripted_openai import ScriptedOpenAI

_server: ScriptedOpenAI | None = None


def server() -> ScriptedOpenAI:
    global _server
    if _server is None:
        _server = ScriptedOpenAI().start()
        atexit.register(_server.stop)
    return _server


def agno_tool(tool: Tool) -> Any:
    def fn(x: int) -> str:
        return tool(x)

    fn.__name__ = tool.name
    fn.__doc__ = f"Looks up {tool.name} for x."
    return fn


class AgnoDriver:
    framework = "agno"
    script = pathlib.Path(__file__).with_name("agent_script.py")

    def build(self, tools: list[Tool], steps: list[Step], *, name: str = "assistant", instructions: str = PROMPT):
        model = OpenAIChat(id=server().script(steps), base_url=server().base_url, api_key="sk-local")
        return Agent(name=name, model=model, tools=[agno_tool(t) for t in tools], system_message=instructions)

    def run(self, agent: Any, prompt: str = "go") -> str:
        return agent.run(prompt).content

    async def arun(self, agent: Any, prompt: str = "go") -> str:
        return (await agent.arun(prompt)).content

    def sent(self, agent: Any) -> list[Sent]:
        return [Sent(system, results) for system, results in server().sent_by_model[agent.model.id]]

    def tools_sent(self, agent: Any) -> list[dict[str, Any]]:
        return list(server().tools_by_model.get(agent.model.id, []))
