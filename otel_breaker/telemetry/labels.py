"""The attributes that name a tool in spans, events and metric series.

Series labels are the bounded parts of a tool's identity, so two same-named
tools of different sources or code are two series, and never an object id or a
per-request value (those go on spans and events only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from otel_breaker.sanitize import bounded
from otel_breaker.semconv import ATTR_AGENT, ATTR_ORIGIN, ATTR_SOURCE, ATTR_TOOL, ATTR_TOOL_CALL_ID, ATTR_UPSTREAM
from otel_breaker.upstream import label_of as _upstream_label

if TYPE_CHECKING:
    from otel_breaker.breaker import CircuitBreaker
    from otel_breaker.toolcall import ToolCall


def key_labels(tool: str, agent: str | None, source: str | None = None, origin: str | None = None) -> dict[str, str]:
    """Series labels of the tool with this identity."""
    labels = {ATTR_TOOL: bounded(tool)}
    if agent:
        labels[ATTR_AGENT] = bounded(agent)
    if source:
        labels[ATTR_SOURCE] = bounded(source)
    if origin:
        labels[ATTR_ORIGIN] = bounded(origin)
    upstream = _upstream_label(tool, source)
    if upstream:
        labels[ATTR_UPSTREAM] = bounded(upstream)
    return labels


def breaker_labels(breaker: CircuitBreaker) -> dict[str, str]:
    """Series labels of ``breaker``'s tool."""
    return key_labels(breaker.name, breaker.agent_name, breaker.source, breaker.origin)


def call_labels(call: ToolCall) -> dict[str, Any]:
    """Attributes of one call's event: its tool, agent, call id and upstream."""
    labels: dict[str, Any] = {ATTR_TOOL: bounded(call.tool)}
    if call.agent_name:
        labels[ATTR_AGENT] = bounded(call.agent_name)
    if call.call_id is not None:
        labels[ATTR_TOOL_CALL_ID] = bounded(call.call_id)
    upstream = _upstream_label(call.tool, call.source)
    if upstream:
        labels[ATTR_UPSTREAM] = bounded(upstream)
    return labels
