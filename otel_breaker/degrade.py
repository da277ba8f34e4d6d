"""Graceful degradation: what the model reads when a tool is unavailable.

A breaker alone stops the waste but also stops progress. This module turns a
rejection into text an agent can act on (retry later, use an alternative, or
tell the user), lists unavailable tools for a system prompt, routes calls to
fallbacks, and gates high-stakes tools behind a human escalation hook.

Everything here that can reach a prompt goes through :mod:`otel_breaker.sanitize`:
names are reduced to plain characters and capped, text is length-capped and
stripped of control characters and prompt-like markup, and nothing a failing
tool returned is ever included. That holds for every field of a rejection
result, not only its texts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from otel_breaker.loglines import logger
from otel_breaker.rejection import (
    EscalationHook,
    Rejection,
    escalation_approves,
    healthy_alternatives,
    rejection_result,
    set_escalation,
    whole_seconds,
)
from otel_breaker.sanitize import (  # noqa: F401 - re-exported: the sanitiser adapters use
    MAX_ALTERNATIVES,
    MAX_NAME_CHARS,
    MAX_TEXT_CHARS,
    optional_name,
    safe_name,
    sanitize,
)
from otel_breaker.toolcall import agent_display_name
from otel_breaker.upstream import upstream_name

if TYPE_CHECKING:
    from otel_breaker.breaker import CircuitBreaker, State
    from otel_breaker.fallback import acall_with_fallback, call_with_fallback
    from otel_breaker.registry import BreakerRegistry


__all__ = [
    "STATUS_HEADER",
    "EscalationHook",
    "Rejection",
    "ToolStatus",
    "acall_with_fallback",
    "augment_instructions",
    "call_with_fallback",
    "escalation_approves",
    "healthy_alternatives",
    "rejection_result",
    "set_escalation",
    "status_in_prompt_enabled",
    "tool_status_block",
    "unavailable_tools",
]


# -- awareness: the tool-status block for system prompts -----------------------------

#: First line of the status block; :func:`augment_instructions` finds an earlier block by it.
STATUS_HEADER = "Tool status (circuit breakers):"
MAX_STATUS_TOOLS = 10
MAX_STATUS_LINE_CHARS = 240
MAX_STATUS_CHARS = 2000


class ToolStatus(NamedTuple):
    """One unavailable tool as the status block describes it."""

    tool: str
    state: State
    retry_after: int | None
    """Whole seconds until a call may be tried again; None while forced open."""
    alternatives: tuple[str, ...]
    source: str | None = None
    """Where the tool runs (an MCP server), when its name alone does not say it."""
    upstream: str | None = None
    """Set when this entry is an upstream's breaker: every tool behind it is unavailable."""


def status_in_prompt_enabled() -> bool:
    """Whether adapters add the tool-status block to system prompts
    (``OTEL_BREAKER_STATUS_IN_PROMPT``, off by default)."""
    from otel_breaker.config import get_settings

    return bool(get_settings().status_in_prompt)


def breakers_for(registry: BreakerRegistry, agent: Any) -> list[CircuitBreaker]:
    """The breakers that can reject a call of ``agent``: its own, the process-wide
    ones, and the current session's. Every breaker when ``agent`` is None."""
    from otel_breaker.registry import current_session

    everything = registry.breakers()
    if agent is None:
        return everything
    session = current_session()
    shared = [
        b
        for b in everything
        if (b.agent_name is None and b.session_id is None) or (session is not None and b.session_id == session)
    ]
    if isinstance(agent, str):
        own = [b for b in everything if b.agent_name == agent and b.session_id is None]
    else:
        own = registry.breakers_of(agent)
        if not own:
            name = agent_display_name(agent)
            own = [b for b in everything if name is not None and b.agent_name == name and b.session_id is None]
    seen: set[int] = set()
    return [b for b in (*own, *shared) if not (id(b) in seen or seen.add(id(b)))]


def unavailable_tools(agent: Any = None, registry: BreakerRegistry | None = None) -> list[ToolStatus]:
    """Tools whose breakers are open or half-open, sorted by name.

    ``agent``: an agent object or agent name, to list only the breakers that
    can reject its calls. A tool guarded by several breakers (several agents or
    sessions) is listed once, with the earliest time any of them allows a call.
    """
    if registry is None:
        from otel_breaker.registry import default_registry

        registry = default_registry()
    found: dict[tuple[str, str], ToolStatus] = {}
    for breaker in breakers_for(registry, agent):
        state = breaker.state
        if state.value == "closed":
            continue
        retry = whole_seconds(breaker.retry_after)
        source = breaker.source
        status = ToolStatus(
            breaker.name, state, retry, healthy_alternatives(breaker.config.fallbacks), source, upstream_name(breaker)
        )
        key = (breaker.name, source or "")
        known = found.get(key)
        if known is None or _sooner(status.retry_after, known.retry_after):
            found[key] = status
    return [found[key] for key in sorted(found)]


def _sooner(a: int | None, b: int | None) -> bool:
    return a is not None and (b is None or a < b)


def _status_line(status: ToolStatus) -> str:
    tool = safe_name(status.tool)
    state = status.state.value.replace("_", "-")
    if status.retry_after is None:
        when = "unavailable until an operator restores it"
    elif status.retry_after <= 0:
        when = "one trial call may be made now" if status.state.value == "half_open" else "may be retried now, once"
    else:
        when = f"may be retried in about {status.retry_after}s"
    if status.alternatives:
        advice = "Use " + ", ".join(f"'{safe_name(a)}'" for a in status.alternatives) + " instead."
    else:
        advice = "No alternative: tell the user this capability is temporarily degraded."
    where = f" on server '{safe_name(status.source)}'" if status.source else ""
    if status.upstream is not None:
        tool, where = f"every tool of upstream '{safe_name(status.upstream)}'", ""
        return "- " + sanitize(f"{tool} ({state}, unreachable): {when}. {advice}", MAX_STATUS_LINE_CHARS)
    return "- " + sanitize(f"'{tool}'{where} ({state}): {when}. {advice}", MAX_STATUS_LINE_CHARS)


def tool_status_block(agent: Any = None, registry: BreakerRegistry | None = None) -> str:
    """A short text for a system prompt naming the tools that are open or
    half-open and when they may be retried; ``""`` when every tool is healthy.

    Built only from validated tool names, breaker states and numbers: nothing
    a tool returned or raised can reach it. Each line is sanitised and capped,
    at most :data:`MAX_STATUS_TOOLS` tools are listed, and the whole block is
    capped at :data:`MAX_STATUS_CHARS` characters.
    """
    statuses = unavailable_tools(agent, registry)
    if not statuses:
        return ""
    lines = [
        STATUS_HEADER,
        "These tools are temporarily unavailable after repeated failures; calls to them are "
        "rejected without running. Do not retry them before the time shown.",
    ]
    lines.extend(_status_line(s) for s in statuses[:MAX_STATUS_TOOLS])
    if len(statuses) > MAX_STATUS_TOOLS:
        lines.append(f"- and {len(statuses) - MAX_STATUS_TOOLS} more unavailable tools.")
    block = "\n".join(lines)
    return block if len(block) <= MAX_STATUS_CHARS else block[: MAX_STATUS_CHARS - 1] + "…"


def augment_instructions(text: str | None, agent: Any = None, registry: BreakerRegistry | None = None) -> str | None:
    """``text`` (a system prompt or agent instructions) with the tool-status
    block appended, for adapters to call where the framework builds its
    system prompt.

    Unchanged when ``OTEL_BREAKER_STATUS_IN_PROMPT`` is off. A block appended
    by an earlier call is replaced (or removed once every tool is healthy), so
    calling this on every turn never stacks blocks. Never raises: on any
    internal error the text is returned unchanged.
    """
    try:
        if not status_in_prompt_enabled():
            return text
        base = text
        if base and STATUS_HEADER in base:
            base = base[: base.index(STATUS_HEADER)].rstrip()
        block = tool_status_block(agent, registry)
        if not block:
            return base
        return f"{base}\n\n{block}" if base else block
    except Exception:
        logger.debug("otel-breaker: building the tool-status block failed", exc_info=True)
        return text


def __getattr__(name: str) -> Any:
    """Fallback routing, importable from here, loaded with its first use: adapters
    import this module when a framework is imported, before any call."""
    if name in ("call_with_fallback", "acall_with_fallback"):
        from otel_breaker import fallback

        return getattr(fallback, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
