"""Which tools leave the model's menu while their breaker is open.

With ``OTEL_BREAKER_HIDE_OPEN_TOOLS=true`` (off by default) an adapter asks,
before each model request, which of the agent's tools are open and drops them
from the tool definitions the model is sent: the cheapest rejected call is the
one the model never makes. A tool comes back as soon as its breaker is
half-open (reading the state past the cooldown moves it there), so the probe
can happen. Where a framework cannot remove a tool, its description is marked
with :func:`unavailable_description` instead.

Hiding is only a hint to the model: a call to a hidden tool (the model saw it
earlier in the conversation) still goes through the guard and gets the usual
rejection.

Why off by default: a changing tool list defeats providers' prompt caching, and
some loops validate a model's calls against the list they sent.

Every helper returns its input unchanged (the same object) when the switch is
off or nothing is open, so a healthy agent's requests are exactly what they
were without otel-breaker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from otel_breaker.degrade import breakers_for
from otel_breaker.runs import Run, current_run
from otel_breaker.upstream import upstream_name, upstream_of

T = TypeVar("T")

#: Appended to a tool's description where a framework cannot remove the tool.
UNAVAILABLE_NOTE = "[Temporarily unavailable after repeated failures; do not call this tool now.]"


def hide_open_tools_enabled() -> bool:
    """Whether adapters take open tools out of the model's menu
    (``OTEL_BREAKER_HIDE_OPEN_TOOLS``, off by default)."""
    from otel_breaker.config import get_settings

    return bool(get_settings().hide_open_tools)


class OpenTools(frozenset):
    """``(tool, source)`` pairs of open tools, plus the open upstreams: a pair is
    ``in`` it when its tool is open or the upstream it runs behind is (so every
    tool of a dead server leaves the menu, called before or not)."""

    upstreams: frozenset[str] = frozenset()

    def __contains__(self, key: object) -> bool:
        if frozenset.__contains__(self, key):
            return True
        if self.upstreams and isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str):
            return upstream_of(key[0], key[1]) in self.upstreams
        return False

    def __bool__(self) -> bool:
        return bool(len(self) or self.upstreams)


def open_tools(agent: Any = None, registry: Any = None) -> frozenset[tuple[str, str | None]]:
    """``(tool, source)`` of every tool a call of ``agent`` would find open now,
    including every tool behind an open upstream (see :class:`OpenTools`).

    ``source`` is None for a tool keyed by name alone; :func:`is_hidden` treats
    an open breaker without a source as covering the name from any source only
    when the tool itself has no source. Half-open tools are not listed.
    """
    if registry is None:
        from otel_breaker.registry import default_registry

        registry = default_registry()
    found: set[tuple[str, str | None]] = set()
    upstreams: set[str] = set()
    for breaker in breakers_for(registry, agent):
        if breaker.state.value == "open":
            name = upstream_name(breaker)
            if name is not None:
                upstreams.add(name)
            else:
                found.add((breaker.name, breaker.source))
    result = OpenTools(found)
    result.upstreams = frozenset(upstreams)
    return result


def menu_may_change() -> bool:
    """Whether a model request's menu may lose tools now: the switch is on, or the run open
    here took tools out of its own menu (adapters amend menus only then, so a healthy
    agent's requests stay exactly what they were)."""
    return hide_open_tools_enabled() or hiding_run() is not None


def hiding_run() -> Run | None:
    """The run open here when its waste budget took tools out of its menu (``run_budget.py``),
    else None: such a tool leaves this run's menu whatever ``OTEL_BREAKER_HIDE_OPEN_TOOLS`` says."""
    opened = current_run()
    if opened is None or not opened.hidden:
        return None
    return opened


def is_hidden(tool: str, source: str | None = None, *, agent: Any = None, opened: frozenset | None = None) -> bool:
    """Whether ``tool`` (from ``source``) is out of the menu now: the switch is
    on and a breaker that would reject its next call is open, or this run's waste
    budget took it out."""
    run = hiding_run()
    if run is not None and run.hides(tool, source):
        return True
    if opened is None:
        if not hide_open_tools_enabled():
            return False
        opened = open_tools(agent)
    return (tool, source) in opened


def visible_tools(
    tools: Sequence[T],
    name_of: Callable[[T], str | None],
    source_of: Callable[[T], str | None] | None = None,
    *,
    agent: Any = None,
) -> Sequence[T]:
    """``tools`` without the open ones; the very same object when nothing is
    hidden (switch off, nothing open), so unchanged requests stay identical."""
    if not tools:
        return tools
    run = hiding_run()
    if hide_open_tools_enabled():
        opened: frozenset = open_tools(agent)
    elif run is None:
        return tools
    else:
        opened = frozenset()
    if not opened and run is None:
        return tools
    kept = [t for t in tools if not _hidden(t, name_of, source_of, opened, run)]
    if len(kept) == len(tools):
        return tools
    return type(tools)(kept) if isinstance(tools, (list, tuple)) else kept


def hidden_names(names: Iterable[str], *, source: str | None = None, agent: Any = None) -> frozenset[str]:
    """Which of ``names`` are out of the menu now (empty when the switch is off and the
    run's waste budget took nothing out)."""
    run = hiding_run()
    if hide_open_tools_enabled():
        opened: frozenset = open_tools(agent)
    elif run is None:
        return frozenset()
    else:
        opened = frozenset()
    if not opened and run is None:
        return frozenset()
    return frozenset(n for n in names if (n, source) in opened or (run is not None and run.hides(n, source)))


def unavailable_description(description: str | None) -> str:
    """``description`` marked unavailable, for frameworks that cannot drop a tool."""
    text = description or ""
    if UNAVAILABLE_NOTE in text:
        return text
    return f"{text} {UNAVAILABLE_NOTE}".strip()


def _hidden(
    tool: T,
    name_of: Callable[[T], str | None],
    source_of: Callable[[T], str | None] | None,
    opened: frozenset,
    run: Run | None = None,
) -> bool:
    name = name_of(tool)
    if name is None:
        return False
    source = source_of(tool) if source_of is not None else None
    if run is not None and run.hides(name, source):
        return True
    return (name, source) in opened
