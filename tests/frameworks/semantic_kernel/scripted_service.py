"""A Semantic Kernel chat-completion service with a scripted model, for offline agent loops.

It is a ``ChatCompletionClientBase`` that supports function calling, so the
kernel's own auto function-invocation loop runs; only the model call
(``_inner_get_chat_message_contents``) is scripted. Every chat history it is
sent is recorded as it was at that call.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncGenerator, Sequence
from typing import Any, ClassVar

from pydantic import Field
from semantic_kernel.connectors.ai.chat_completion_client_base import ChatCompletionClientBase
from semantic_kernel.contents import (
    AuthorRole,
    ChatMessageContent,
    FunctionCallContent,
    FunctionResultContent,
    StreamingChatMessageContent,
)

#: One model turn: tool calls as (plugin-function name, arguments, call id), or the final text.
Turn = list[tuple[str, dict | str, str]] | str


class ScriptedChatService(ChatCompletionClientBase):
    """Answers each model call with the next scripted turn, then "done"."""

    SUPPORTS_FUNCTION_CALLING: ClassVar[bool] = True
    turns: list[Any] = Field(default_factory=list)
    sent: list[list[ChatMessageContent]] = Field(default_factory=list)
    #: The functions the kernel configured the service to offer (as a real connector puts them in its request).
    offered: dict[str, Any] = Field(default_factory=dict)
    tools_sent: list[dict[str, Any]] = Field(default_factory=list)

    def __init__(self, turns: Sequence[Turn] = (), **kwargs: Any) -> None:
        super().__init__(ai_model_id="scripted", **kwargs)
        self.turns = list(turns)
        self.sent = []

    def _update_function_choice_settings_callback(self) -> Any:
        def update(configuration: Any, settings: Any, choice_type: Any) -> None:
            self.offered = {
                f.fully_qualified_name: (f.description, [(p.name, p.schema_data) for p in f.parameters])
                for f in configuration.available_functions or ()
            }

        return update

    def _reset_function_choice_settings(self, settings: Any) -> None:
        self.offered = {}

    def _next(self, chat_history: Any) -> list[Any]:
        self.sent.append(copy.deepcopy(list(chat_history.messages)))  # as sent: later edits do not show
        self.tools_sent.append(dict(self.offered))
        turn = self.turns.pop(0) if self.turns else "done"
        if isinstance(turn, str):
            return [turn]
        return [
            FunctionCallContent(id=cid, name=name, arguments=args if isinstance(args, str) else json.dumps(args))
            for name, args, cid in turn
        ]

    async def _inner_get_chat_message_contents(self, chat_history: Any, settings: Any) -> list[ChatMessageContent]:
        parts = self._next(chat_history)
        if isinstance(parts[0], str):
            return [ChatMessageContent(role=AuthorRole.ASSISTANT, content=parts[0])]
        return [ChatMessageContent(role=AuthorRole.ASSISTANT, items=parts)]

    async def _inner_get_streaming_chat_message_contents(
        self, chat_history: Any, settings: Any, function_invoke_attempt: int = 0
    ) -> AsyncGenerator[list[StreamingChatMessageContent], Any]:
        parts = self._next(chat_history)
        if isinstance(parts[0], str):
            yield [StreamingChatMessageContent(role=AuthorRole.ASSISTANT, choice_index=0, content=parts[0])]
            return
        yield [StreamingChatMessageContent(role=AuthorRole.ASSISTANT, choice_index=0, items=parts)]

    # -- what the model read ------------------------------------------------------------------

    def tool_results(self) -> list[str]:
        """Every function result the model was sent, in order (from the last request)."""
        last = self.sent[-1] if self.sent else []
        return [str(i.result) for m in last for i in m.items if isinstance(i, FunctionResultContent)]

    def system_prompts(self) -> list[str]:
        """The system message of each model call."""
        return [msgs[0].content for msgs in self.sent if msgs and msgs[0].role == AuthorRole.SYSTEM]
