"""The description of one tool call that every layer shares.

Adapters build it from whatever their framework exposes; the registry picks a
breaker from it, telemetry names spans after it, and rejection messages quote
it. Immutable, so a decorator can build one per function and reuse it.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class ToolCall:
    """Who calls which tool, as far as the framework tells us."""

    tool: str
    framework: str = "python"
    agent: Any = None
    """The agent object (identity for per-agent breakers); held weakly by the registry."""
    agent_name: str | None = None
    session_id: str | None = None
    call_id: str | None = None
    tool_type: str = "function"
    source: str | None = None
    """Where the tool runs when a name alone does not say it (an MCP server's
    ``name@version``, a toolset): tools of the same name from different sources
    never share a breaker."""
    arguments: Any = None
    """The tool's arguments; only put on spans when content capture is on."""

    def with_call_id(self, call_id: str | None) -> ToolCall:
        return replace(self, call_id=call_id)


def agent_display_name(agent: Any) -> str | None:
    """A readable name for an agent object, if it has one."""
    for attribute in ("name", "role", "agent_name"):
        value = getattr(agent, attribute, None)
        if isinstance(value, str) and value:
            return value
    return None


# The call an adapter is guarding in this context: a nested patched layer of the
# same call passes straight through, and the span processor skips spans of calls
# that are already guarded.
_active_call: contextvars.ContextVar[ToolCall | None] = contextvars.ContextVar("otel_breaker_active_call", default=None)


def active_call() -> ToolCall | None:
    """The tool call being guarded in this context, if any."""
    return _active_call.get()
