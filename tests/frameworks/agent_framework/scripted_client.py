"""A chat client of Agent Framework's own layers with a scripted model, for offline agent loops.

It is the framework's ``FunctionInvocationLayer`` over ``BaseChatClient``, the
stack its own tests use: only the model call (``_inner_get_response``) is
scripted. It prepends the run's instructions as the system message, as the
provider clients do, and records every message list it was sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, MutableSequence, Sequence
from typing import Any

from agent_framework import (
    BaseChatClient,
    ChatResponse,
    ChatResponseUpdate,
    Content,
    FunctionInvocationLayer,
    Message,
    ResponseStream,
    prepend_instructions_to_messages,
)
from agent_framework.observability import ChatTelemetryLayer

#: One model turn: tool calls as (tool name, arguments, call id), or the final text.
Turn = list[tuple[str, dict, str]] | str


class ScriptedChatClient(FunctionInvocationLayer, ChatTelemetryLayer, BaseChatClient):
    """Answers each model call with the next scripted turn, then "done"."""

    def __init__(self, turns: Sequence[Turn], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.turns = list(turns)
        self.sent: list[list[Message]] = []
        self.tools_sent: list[dict[str, Any]] = []

    def _next(self, messages: MutableSequence[Message], options: dict[str, Any]) -> list[Content]:
        self.sent.append(prepend_instructions_to_messages(list(messages), options.get("instructions")))
        self.tools_sent.append({t.name: t.to_json_schema_spec() for t in options.get("tools") or ()})
        turn = self.turns.pop(0) if self.turns else "done"
        if isinstance(turn, str):
            return [Content.from_text(turn)]
        return [Content.from_function_call(call_id=cid, name=name, arguments=args) for name, args, cid in turn]

    def _inner_get_response(
        self, *, messages: MutableSequence[Message], stream: bool, options: dict[str, Any], **kwargs: Any
    ) -> Any:
        if stream:

            async def updates() -> AsyncIterable[ChatResponseUpdate]:
                yield ChatResponseUpdate(contents=self._next(messages, options), role="assistant", finish_reason="stop")

            return ResponseStream(updates(), finalizer=ChatResponse.from_updates)

        async def respond() -> ChatResponse:
            return ChatResponse(messages=Message(role="assistant", contents=self._next(messages, options)))

        return respond()

    # -- what the model read ------------------------------------------------------------------

    def tool_results(self) -> list[str]:
        """Every function result the model was sent, in order (from the last request)."""
        last = self.sent[-1] if self.sent else []
        return [str(c.result) for m in last for c in m.contents if c.type == "function_result"]

    def system_prompts(self) -> list[str]:
        """The system message of each model call."""
        return [m.text for msgs in self.sent for m in msgs[:1] if m.role == "system"]
