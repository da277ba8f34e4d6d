"""Which upstream a tool runs behind, and that upstream's one breaker.

When an MCP server or an API host goes down, every tool behind it fails. With
a breaker per tool, each of them must fail ``failure_threshold`` times before
it opens: 20 tools on a dead server cost up to 20 x threshold wasted calls.
An upstream breaker counts the transport failures of all of them together, so
the dead server costs ``failure_threshold`` calls, and while it is open every
tool behind it is rejected without a round trip.

Grouping:

* configured, for any framework and ``@guard``:
  ``OTEL_BREAKER_UPSTREAMS="serp=web_search,news_search;github=gh_*"``
  (names or ``fnmatch`` globs; the first matching upstream wins);
* automatic for MCP: a tool's ``ToolCall.source`` (the server's
  ``name@version``, or its transport) is its upstream.

The upstream breaker is an ordinary breaker of the registry, named
``upstream:<name>``, process-wide (a dead server is dead for every agent),
created in the registry's store (so with ``OTEL_BREAKER_STORE=redis://...``
all workers share it) and pinned (never evicted). What it counts is decided in
``upstream_gate`` with :func:`otel_breaker.classify.is_transport_error`.
"""

from __future__ import annotations

import fnmatch
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from otel_breaker.breaker import CircuitBreaker
    from otel_breaker.config import Settings

#: Registry name of an upstream's breaker: ``upstream:<name>``.
UPSTREAM_PREFIX = "upstream:"
_MAX_CACHED = 4096

# Per settings object: the compiled groups and the (tool, source) -> upstream answers.
_compiled: tuple[Any, list[tuple[str, re.Pattern[str]]], dict[tuple[str, str | None], str | None]] | None = None


def _groups(settings: Settings) -> tuple[list[tuple[str, re.Pattern[str]]], dict]:
    global _compiled
    cached = _compiled
    if cached is not None and cached[0] is settings:
        return cached[1], cached[2]
    groups = [
        (name, re.compile("|".join(fnmatch.translate(p) for p in patterns)))
        for name, patterns in settings.upstreams.items()
    ]
    answers: dict[tuple[str, str | None], str | None] = {}
    _compiled = (settings, groups, answers)
    return groups, answers


def upstream_of(tool: str, source: str | None = None, settings: Settings | None = None) -> str | None:
    """The upstream ``tool`` (from ``source``) runs behind, or None.

    A configured group that matches the tool name wins; otherwise a tool with a
    source (an MCP server) is behind that source. Never raises.
    """
    if settings is None:
        from otel_breaker.config import get_settings

        settings = get_settings()
    try:
        groups, answers = _groups(settings)
        key = (tool, source)
        if key in answers:
            return answers[key]
        found = next((name for name, pattern in groups if pattern.match(tool)), None)
        if found is None and source:
            found = source
        if len(answers) < _MAX_CACHED:
            answers[key] = found
        return found
    except Exception:
        return None


def upstream_name(breaker: CircuitBreaker) -> str | None:
    """The upstream a breaker stands for, when it is an upstream's breaker."""
    name = breaker.name
    return name[len(UPSTREAM_PREFIX) :] if name.startswith(UPSTREAM_PREFIX) else None


def label_of(tool: str, source: str | None) -> str | None:
    """The ``otel_breaker.upstream`` value of a breaker's series: the upstream of a
    tool behind one, or the upstream an upstream's breaker stands for."""
    if tool.startswith(UPSTREAM_PREFIX):
        return tool[len(UPSTREAM_PREFIX) :]
    return upstream_of(tool, source)


def breaker_of(registry: Any, name: str) -> CircuitBreaker | None:
    """The breaker of upstream ``name`` in ``registry`` (created on first use), or
    None when the registry is full and it could not be made."""
    key = UPSTREAM_PREFIX + name
    breaker = registry.peek((None, key, None))
    if breaker is None:
        breaker = registry.get(key)
        if breaker.name != key:  # the registry's overflow breaker: no upstream guard
            return None
    return breaker


def breaker_for_call(registry: Any, call: Any) -> CircuitBreaker | None:
    """The upstream breaker that guards ``call`` too, or None (no upstream). Never raises."""
    try:
        settings = registry.settings
        if call.source is None and not settings.upstreams:
            return None  # the common case: nothing configured, not an MCP tool
        name = upstream_of(call.tool, call.source, settings)
        return None if name is None else breaker_of(registry, name)
    except Exception:
        return None
