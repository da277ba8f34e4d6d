"""The description of one tool call that every layer shares.

Adapters build it from whatever their framework exposes; the registry picks a
breaker from it, telemetry names spans after it, and rejection messages quote
it. Immutable, so a decorator can build one per function and reuse it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class ToolCall:
    """Who calls which tool, as far as the framework tells us."""

    tool: str
    framework: str = "python"
    agent: Any = None
    """The agent object: read for its name and, in ``instance`` scope only, keys breakers
    per object (held weakly by the registry)."""
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
    origin: str | None = None
    """The code behind a local tool (``module:qualname``, see :mod:`otel_breaker.identity`):
    where it runs when it has no ``source``. Same-named tools of different code never
    share a breaker, and the same code finds the same breaker in every process."""

    def __init__(
        self,
        tool: str,
        framework: str = "python",
        agent: Any = None,
        agent_name: str | None = None,
        session_id: str | None = None,
        call_id: str | None = None,
        tool_type: str = "function",
        source: str | None = None,
        arguments: Any = None,
        origin: str | None = None,
    ) -> None:
        # Adapters build one per tool call. The generated __init__ of a frozen
        # dataclass goes through object.__setattr__ for each field; the slots'
        # own setters do the same work in about half the time.
        _set_tool(self, tool)
        _set_framework(self, framework)
        _set_agent(self, agent)
        _set_agent_name(self, agent_name)
        _set_session_id(self, session_id)
        _set_call_id(self, call_id)
        _set_tool_type(self, tool_type)
        _set_source(self, source)
        _set_arguments(self, arguments)
        _set_origin(self, origin)

    @property
    def where(self) -> str | None:
        """Where the tool runs, for its key: its ``source``, else its code ``origin``."""
        return self.source if self.source is not None else self.origin

    def with_call_id(self, call_id: str | None) -> ToolCall:
        return replace(self, call_id=call_id)


(
    _set_tool,
    _set_framework,
    _set_agent,
    _set_agent_name,
    _set_session_id,
    _set_call_id,
    _set_tool_type,
    _set_source,
    _set_arguments,
    _set_origin,
) = (vars(ToolCall)[field.name].__set__ for field in fields(ToolCall))


def agent_display_name(agent: Any) -> str | None:
    """A readable name for an agent object, if it has one (an agent given by its name is that name):
    the name its breakers are keyed by."""
    if isinstance(agent, str):
        return agent or None
    for attribute in ("name", "role", "agent_name"):
        value = getattr(agent, attribute, None)
        if isinstance(value, str) and value:
            return value
    return None


class GuardedCall:
    """The tool call an adapter is guarding in a context, and what inner layers of
    it noticed: failures they saw in a returned value (``nested``, error types the
    outer call counts as its own) and an adapter's notes on the call (``notes``).

    A nested patched layer of the same call passes straight through, and the
    span processor skips spans of calls that are already guarded."""

    __slots__ = ("call", "nested", "notes", "swallowed")

    def __init__(self, call: ToolCall) -> None:
        self.call = call
        self.nested: list[str] = []
        self.notes: list[Any] = []
        #: The exception the framework turned into a returned value (its error text), where
        #: the adapter saw it: the verdict reads the exception itself, not the text.
        self.swallowed: BaseException | None = None

    def new_attempt(self) -> None:
        """Forget what the last attempt of the call showed: a retry below the model is
        judged on its own."""
        self.nested.clear()
        self.notes.clear()
        self.swallowed = None


#: The guarded call in progress in this context (None outside one). The adapters' base
#: sets it around each guarded call so nested patched layers of the same call pass
#: through; it lives here, not with the adapters, so the span processor and the call
#: path read it (:func:`active_call`, :func:`guarded_call`) without importing any adapter.
active_call_var: contextvars.ContextVar[GuardedCall | None] = contextvars.ContextVar(
    "otel_breaker_active_call", default=None
)


def active_call() -> ToolCall | None:
    """The tool call being guarded in this context, if any."""
    frame = active_call_var.get()
    return None if frame is None else frame.call


def guarded_call() -> GuardedCall | None:
    """The guarded call in progress in this context (with what inner layers noted), if any."""
    return active_call_var.get()


#: The longest agent name :func:`agent_scope` takes (it reaches metric labels).
MAX_AGENT_NAME_CHARS = 128

_named_agent: contextvars.ContextVar[str | None] = contextvars.ContextVar("otel_breaker_named_agent", default=None)


@contextlib.contextmanager
def agent_scope(name: str) -> Iterator[str]:
    """Within the block, tool calls of a framework that has no agent object of its own
    (Google GenAI's automatic function calling, a bare MCP client session, the Claude
    Agent SDK's tools) are the calls of agent ``name``: their breakers are keyed, and
    their spans and metrics labelled, by it. A framework's own agent, or an enclosing
    framework's, always wins. ``name`` is 1 to 128 printable characters."""
    if not isinstance(name, str) or not name or len(name) > MAX_AGENT_NAME_CHARS or not name.isprintable():
        raise ValueError(f"an agent name is 1 to {MAX_AGENT_NAME_CHARS} printable characters")
    token = _named_agent.set(name)
    try:
        yield name
    finally:
        _named_agent.reset(token)


def named_agent() -> str | None:
    """The agent :func:`agent_scope` names in this context, if any."""
    return _named_agent.get()
