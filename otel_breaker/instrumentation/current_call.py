"""The framework's own object of the tool call being guarded, in this context.

An adapter's ``result_error``, ``result_hint`` and ``rejection`` are told the
:class:`~otel_breaker.toolcall.ToolCall` and the result, not the framework object
the tool patch wrapped; some frameworks' answers can only be read, or given, with
it (Agno's ``FunctionCall`` names the function whose argument errors are the
model's, and carries the error the model reads; ADK's tool context holds a pending
confirmation). :class:`HoldsCurrentCall` keeps it in the adapter's context variable
for the length of the guarded call (sync and async tool patches).
"""

from __future__ import annotations

import contextvars
from typing import Any, ClassVar


class HoldsCurrentCall:
    """Mixin for a :class:`~otel_breaker.instrumentation.spec.SpecAdapter` (before it in
    the bases): ``current`` holds ``current_of(instance, args, kwargs)`` while a tool
    patch runs."""

    current: ClassVar[contextvars.ContextVar[Any]]

    def current_of(self, instance: Any, args: tuple, kwargs: dict) -> Any:
        return instance

    def _tool_sync(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        token = self.current.set(self.current_of(instance, args, kwargs))
        try:
            return super()._tool_sync(wrapped, instance, args, kwargs)  # type: ignore[misc]
        finally:
            self.current.reset(token)

    async def _tool_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        token = self.current.set(self.current_of(instance, args, kwargs))
        try:
            return await super()._tool_async(wrapped, instance, args, kwargs)  # type: ignore[misc]
        finally:
            self.current.reset(token)
