"""Drives a praisonaiagents ``Agent`` offline: its async loop against a local
OpenAI-compatible server (praisonaiagents has no fake model of its own) that
answers with the scripted steps of the agent being run."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import pathlib
from collections.abc import Iterator
from typing import Any

from contract import PROMPT, Sent, Step, Tool
from fake_openai_server import FakeOpenAI
from praisonaiagents import Agent
from praisonaiagents.config.feature_configs import ToolConfig
from praisonaiagents.tools.retry import RetryPolicy

QUIET = {"PRAISONAI_TELEMETRY_DISABLED": "true", "PRAISONAI_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}


def praisonai_tool(tool: Tool) -> Any:
    def fn(x: int) -> str:
        return tool(x)

    fn.__name__ = tool.name
    fn.__doc__ = f"Looks up {tool.name} for x.\n\nArgs:\n    x: the item\n"
    return fn


class ScriptedModel:
    """Answers with ``steps`` in turn; records what each request carried."""

    def __init__(self, steps: list[Step], instructions: str) -> None:
        self.steps, self.instructions, self.sent, self.tools_sent = list(steps), instructions, [], []

    def __call__(self, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        messages = body.get("messages", [])
        system = next((m.get("content") for m in messages if m.get("role") == "system"), None)
        if system and self.instructions in system:
            # praisonaiagents puts its own guidance before the agent's instructions.
            system = system[system.index(self.instructions) :]
        self.sent.append(Sent(system, [str(m.get("content")) for m in messages if m.get("role") == "tool"]))
        self.tools_sent.append({t["function"]["name"]: t for t in body.get("tools") or ()})
        step = self.steps[min(len(self.sent), len(self.steps)) - 1]
        if isinstance(step, str):
            return {"role": "assistant", "content": step}, "stop"
        name, arguments = step
        call = {
            "id": f"call_{len(self.sent)}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"


class PraisonAIDriver:
    framework = "praisonai"
    script = pathlib.Path(__file__).with_name("agent_script.py")

    def __init__(self) -> None:
        self._server: FakeOpenAI | None = None

    @contextlib.contextmanager
    def _local_model(self, model: ScriptedModel) -> Iterator[None]:
        """The OpenAI variables point at the local server, which answers as ``model``."""
        if self._server is None:
            self._server = FakeOpenAI().start()
            logging.getLogger("praisonaiagents").setLevel(logging.CRITICAL)
        env = {**self._server.env(), **QUIET}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        self._server.responder = model
        try:
            yield
        finally:
            self._server.responder = None
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def build(self, tools: list[Tool], steps: list[Step], *, name: str = "assistant", instructions: str = PROMPT):
        model = ScriptedModel(steps, instructions)
        with self._local_model(model):
            agent = Agent(
                name=name,
                instructions=instructions,
                tools=[praisonai_tool(t) for t in tools],
                model="gpt-4o-mini",
                # One attempt per call keeps praisonaiagents' own retry back-off out of the way.
                tool_config=ToolConfig(retry_policy=RetryPolicy(max_attempts=1, initial_delay_ms=1, max_delay_ms=2)),
            )
        agent.scripted_model = model
        return agent

    def run(self, agent: Any, prompt: str = "go") -> str:
        with self._local_model(agent.scripted_model):
            return str(asyncio.run(agent.achat(prompt, stream=False)))

    def sent(self, agent: Any) -> list[Sent]:
        return list(agent.scripted_model.sent)

    def tools_sent(self, agent: Any) -> list[dict[str, Any]]:
        return list(agent.scripted_model.tools_sent)
