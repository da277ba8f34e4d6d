"""A scripted ADK model: a ``BaseLlm`` answering from a list, as ADK's own tests'
mock model does, recording every request (system instruction, tool results)."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.genai import types
from pydantic import Field


class ScriptedLlm(BaseLlm):
    model: str = "scripted"
    steps: list[Any] = Field(default_factory=list)
    requests: list[dict[str, Any]] = Field(default_factory=list)

    @classmethod
    def supported_models(cls) -> list[str]:
        return ["scripted"]

    async def generate_content_async(self, llm_request, stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        results = [
            json.dumps(part.function_response.response)
            for content in llm_request.contents
            for part in content.parts or []
            if part.function_response
        ]
        tools = {
            d.name: d.model_dump(exclude_none=True)
            for tool in llm_request.config.tools or ()
            for d in getattr(tool, "function_declarations", None) or ()
        }
        self.requests.append(
            {"system_instruction": llm_request.config.system_instruction, "tool_results": results, "tools": tools}
        )
        step = self.steps[min(len(self.requests), len(self.steps)) - 1]
        if isinstance(step, str):
            part = types.Part.from_text(text=step)
        else:
            part = types.Part.from_function_call(name=step[0], args=step[1])
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


def error_response(tool, args, tool_context, error):
    """The usual ``on_tool_error_callback``: the model reads the error instead of the run ending."""
    return {"error": f"{type(error).__name__}: {error}"}


async def run(agent, prompt: str = "go") -> str:
    """Run ``agent`` to its end with an in-memory runner; its final text."""
    from google.adk.runners import InMemoryRunner

    runner = InMemoryRunner(agent=agent, app_name="contract")
    session = await runner.session_service.create_session(app_name="contract", user_id="u")
    message = types.Content(role="user", parts=[types.Part.from_text(text=prompt)])
    final = ""
    async for event in runner.run_async(user_id="u", session_id=session.id, new_message=message):
        for part in (event.content.parts if event.content else None) or []:
            if part.text:
                final = part.text
    return final
