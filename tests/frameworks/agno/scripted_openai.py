"""A scripted OpenAI-compatible model on 127.0.0.1 for offline Agno runs.

Agno has no fake model of its own; its ``OpenAIChat`` talks to any
OpenAI-compatible endpoint. Each agent gets its own model id; the server
answers that agent's scripted steps in turn, one per request (runs of the same
agent go on through its script), and records what every request carried as
(instructions, tool results).
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import pathlib
from typing import Any

_spec = importlib.util.spec_from_file_location(
    "fake_openai_server", pathlib.Path(__file__).parents[1] / "praisonai" / "fake_openai_server.py"
)
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
FakeOpenAI = _module.FakeOpenAI

_ids = itertools.count(1)


class ScriptedOpenAI(FakeOpenAI):
    def __init__(self) -> None:
        super().__init__(calls=0)
        self.scripts: dict[str, list[Any]] = {}
        self.sent_by_model: dict[str, list[tuple[str | None, list[str]]]] = {}
        self.tools_by_model: dict[str, list[dict[str, Any]]] = {}

    def script(self, steps: list[Any]) -> str:
        """A new model id answering ``steps``: ``(tool name, arguments)`` or the final text."""
        model = f"scripted-{next(_ids)}"
        self.scripts[model] = list(steps)
        self.sent_by_model[model] = []
        return model

    def reply(self, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        messages = body.get("messages", [])
        system = next((m.get("content") for m in messages if m.get("role") in ("system", "developer")), None)
        results = [str(m.get("content")) for m in messages if m.get("role") == "tool"]
        model = body.get("model", "")
        with self._lock:
            sent = self.sent_by_model.setdefault(model, [])
            sent.append((system, results))
            offered = {t["function"]["name"]: t for t in body.get("tools") or () if "function" in t}
            self.tools_by_model.setdefault(model, []).append(offered)
            steps = self.scripts.get(model) or ["done"]
            step = steps[min(len(sent), len(steps)) - 1]
        if isinstance(step, str):
            return {"role": "assistant", "content": step}, "stop"
        name, arguments = step
        call = {
            "id": f"call_{len(sent)}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
