"""A scripted Strands model: the framework's ``Model`` interface, answering from a list.

Strands' own tests drive the agent loop with a mocked model provider of this
shape; each step is a tool call ``(name, input)`` or the final answer text, and
every request is recorded (system prompt, and the tool results it carried).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

from strands.models.model import Model


class ScriptedModel(Model):
    def __init__(self, steps: list[Any]) -> None:
        self.steps = list(steps)
        self.requests: list[dict[str, Any]] = []
        self._step = 0

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> dict[str, Any]:
        return {"model_id": "scripted"}

    async def structured_output(self, output_model, prompt, system_prompt=None, **kwargs):  # pragma: no cover
        raise NotImplementedError
        yield

    async def stream(
        self, messages, tool_specs=None, system_prompt=None, *, tool_choice=None, **kwargs
    ) -> AsyncGenerator[dict[str, Any], None]:
        results = [
            "".join(part.get("text", "") for part in block["toolResult"]["content"])
            for message in messages
            for block in message["content"]
            if "toolResult" in block
        ]
        tools = {spec["name"]: spec for spec in tool_specs or ()}
        self.requests.append({"system_prompt": system_prompt, "tool_results": results, "tools": tools})
        step = self.steps[min(self._step, len(self.steps) - 1)]
        self._step += 1
        yield {"messageStart": {"role": "assistant"}}
        if isinstance(step, str):
            yield {"contentBlockStart": {"start": {}}}
            yield {"contentBlockDelta": {"delta": {"text": step}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}
            return
        name, arguments = step
        start = {"toolUse": {"name": name, "toolUseId": f"call_{self._step}"}}
        yield {"contentBlockStart": {"start": start}}
        yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(arguments)}}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "tool_use"}}
