"""Drives a CrewAI crew offline, on the native function-calling path, with a
scripted model built on CrewAI's own ``BaseLLM`` (conftest.py keeps CrewAI offline)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from contract import PROMPT, Sent, Step, Tool
from crewai import Agent, Crew, Task
from crewai.llms.base_llm import BaseLLM
from crewai.tools import tool as crewai_tool
from pydantic import Field, PrivateAttr


def crew_tool(tool: Tool) -> Any:
    def fn(x: int) -> str:
        return tool(x)

    fn.__name__ = tool.name
    fn.__doc__ = f"Looks up {tool.name} for x."
    return crewai_tool(tool.name)(fn)


class StepLLM(BaseLLM):
    """Answers with the scripted steps in turn (native tool calls or the final
    text); records what each call carried."""

    steps: list[Any] = Field(default_factory=list)
    instructions: str = PROMPT
    _sent: list[Sent] = PrivateAttr(default_factory=list)
    _tools_sent: list[dict[str, Any]] = PrivateAttr(default_factory=list)

    def supports_function_calling(self) -> bool:
        return True

    def supports_stop_words(self) -> bool:
        return True

    def get_context_window_size(self) -> int:
        return 100_000

    def call(self, messages: Any, tools: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        system = next((str(m.get("content")) for m in messages if m.get("role") == "system"), None)
        if system and self.instructions in system:
            # CrewAI puts the agent's role before its instructions.
            system = system[system.index(self.instructions) :]
        self._sent.append(Sent(system, [str(m.get("content")) for m in messages if m.get("role") == "tool"]))
        self._tools_sent.append({t["function"]["name"]: t for t in tools or ()})
        step = self.steps[min(len(self._sent), len(self.steps)) - 1]
        if isinstance(step, str):
            return step
        name, arguments = step
        function = {"name": name, "arguments": json.dumps(arguments)}
        return [{"id": f"call_{len(self._sent)}", "type": "function", "function": function}]

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(*args, **kwargs)


class CrewAIDriver:
    framework = "crewai"
    script = pathlib.Path(__file__).with_name("agent_script.py")

    def build(self, tools: list[Tool], steps: list[Step], *, name: str = "assistant", instructions: str = PROMPT):
        llm = StepLLM(model="scripted", steps=list(steps), instructions=instructions)
        return Agent(
            role=name,
            goal="answer the task",
            backstory=instructions,
            llm=llm,
            tools=[crew_tool(t) for t in tools],
            max_iter=len(steps) + 2,
            verbose=False,
        )

    def run(self, agent: Any, prompt: str = "go") -> str:
        task = Task(description=prompt, expected_output="an answer", agent=agent)
        return Crew(agents=[agent], tasks=[task], verbose=False).kickoff().raw

    def sent(self, agent: Any) -> list[Sent]:
        return list(agent.llm._sent)

    def tools_sent(self, agent: Any) -> list[dict[str, Any]]:
        return list(agent.llm._tools_sent)
