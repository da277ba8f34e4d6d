"""The description of one tool call that every layer shares.

Adapters build it from whatever their framework exposes; the registry picks a
breaker from it, telemetry names spans after it, and rejection messages quote
it. Immutable, so a decorator can build one per function and reuse it.
"""

from __future__ import annotations

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
