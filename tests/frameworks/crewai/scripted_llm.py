"""A scripted CrewAI model: CrewAI's own ``BaseLLM`` with canned answers, for offline crews.

It asks for one tool ``calls`` times (a native tool call when ``native``, else a
ReAct ``Action``), then answers "done after N tool results". Every tool result it reads is
kept in ``seen``, so tests can check what the model was told.
"""

from __future__ import annotations

import json
from typing import Any

from crewai.llms.base_llm import BaseLLM
from pydantic import PrivateAttr


class ScriptedLLM(BaseLLM):
    native: bool = True
    tool_name: str = "lookup"
    calls: int = 4
    # The first ``bad_arguments`` tool calls send arguments the tool's schema rejects.
    bad_arguments: int = 0
    _step: int = PrivateAttr(default=0)
    _seen: list[str] = PrivateAttr(default_factory=list)

    @property
    def seen(self) -> list[str]:
        return self._seen

    def supports_function_calling(self) -> bool:
        return self.native

    def supports_stop_words(self) -> bool:
        return True

    def get_context_window_size(self) -> int:
        return 100_000

    def call(
        self,
        messages: Any,
        tools: Any = None,
        callbacks: Any = None,
        available_functions: Any = None,
        from_task: Any = None,
        from_agent: Any = None,
        response_model: Any = None,
        **kwargs: Any,
    ) -> Any:
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        if self._step:
            if self.native:  # the tool result is the last message
                text = str(messages[-1].get("content"))
            else:  # ReAct: "Observation: ..." follows the last assistant message's action
                text = str([m for m in messages if m.get("role") == "assistant"][-1].get("content"))
                text = text[text.find("Observation:") :]
            self._seen.append(text)
        self._step += 1
        arguments: dict[str, Any] = {"q": f"x{self._step}"}
        if self._step <= self.bad_arguments:
            arguments = {"q": ["not", "text"]}
        if self._step <= self.calls:
            if self.native:
                function = {"name": self.tool_name, "arguments": json.dumps(arguments)}
                return [{"id": f"call_{self._step}", "type": "function", "function": function}]
            return f"Thought: I should use the tool\nAction: {self.tool_name}\nAction Input: {json.dumps(arguments)}"
        answer = f"done after {len(self._seen)} tool results"
        return answer if self.native else f"Thought: I now know the final answer\nFinal Answer: {answer}"

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(*args, **kwargs)
