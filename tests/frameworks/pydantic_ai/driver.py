"""Drives PydanticAI's agent loop offline with its own scripted model, ``FunctionModel``."""

from __future__ import annotations

import pathlib
from typing import Any

from contract import PROMPT, Sent, Step, Tool
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelRetry, ToolFailed
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel


def pydantic_tool(tool: Tool):
    """The contract's tool as a PydanticAI tool: a failure is raised as ``ToolFailed``, the
    way a PydanticAI tool lets the run go on (any other exception ends the run)."""

    def fn(x: int) -> str:
        try:
            return tool(x)
        except ModelRetry:
            raise  # the tool asks the model to try again
        except Exception as exc:
            raise ToolFailed(str(exc)) from exc

    fn.__name__ = tool.name
    fn.__doc__ = f"Looks up {tool.name} for x."
    return fn


class _Script:
    """Answers each request with the next step; records what every request carried."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = list(steps)
        self.sent: list[Sent] = []
        self.tools_sent: list[dict[str, Any]] = []
        self.calls = 0

    def respond(self, messages: list, info: AgentInfo) -> ModelResponse:
        results = [
            p.model_response_str()
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        ]
        self.sent.append(Sent(info.instructions, results))
        self.tools_sent.append({t.name: t for t in info.function_tools})
        step = self.steps.pop(0)
        if isinstance(step, str):
            return ModelResponse(parts=[TextPart(step)])
        self.calls += 1
        name, arguments = step
        return ModelResponse(parts=[ToolCallPart(name, dict(arguments), tool_call_id=f"call_{self.calls}")])


class PydanticAIDriver:
    framework = "pydantic_ai"
    script = pathlib.Path(__file__).with_name("agent_script.py")

    def __init__(self, retries: int | None = None) -> None:
        #: The agent's retry budget per tool (PydanticAI's default, 1, when None).
        self.retries = retries

    def build(self, tools: list[Tool], steps: list[Step], *, name: str = "assistant", instructions: str = PROMPT):
        script = _Script(steps)
        options = {} if self.retries is None else {"retries": self.retries}
        agent = Agent(FunctionModel(script.respond), name=name, instructions=instructions, **options)
        for tool in tools:
            agent.tool_plain(name=tool.name)(pydantic_tool(tool))
        agent.script_under_test = script
        return agent

    def run(self, agent: Any, prompt: str = "go") -> str:
        return agent.run_sync(prompt).output

    def sent(self, agent: Any) -> list[Sent]:
        return list(agent.script_under_test.sent)

    def tools_sent(self, agent: Any) -> list[dict[str, Any]]:
        return list(agent.script_under_test.tools_sent)
