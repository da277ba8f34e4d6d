"""What running a tool does to the world: its side-effect class.

A retry below the model is only safe for a tool that can run twice without
harm, so every tool has a class:

* ``read_only``: changes nothing (a search, a read);
* ``idempotent``: may change something, but running it again with the same
  arguments changes nothing more (set a value, delete by id);
* ``destructive``: each run changes something (send an email, pay an invoice);
* ``unknown``: nobody said. Treated as not safe to repeat.

Where a class comes from, first answer wins: the user's word (a breaker
configuration's ``effects``, ``OTEL_BREAKER_TOOL_EFFECTS`` through it, or
:func:`register_tool_effects`), then what the tool's server announced (MCP tool
annotations ``readOnlyHint``/``idempotentHint``/``destructiveHint``, noted by the
adapters and the proxy when they see a server's tool listing), then unknown.
Annotations are hints from a server the user may not control: the user's word
always wins, and a hint of the wrong type is no hint.
"""

from __future__ import annotations

import fnmatch
import os
import threading
from collections.abc import Mapping
from typing import Any

READ_ONLY = "read_only"
IDEMPOTENT = "idempotent"
DESTRUCTIVE = "destructive"
UNKNOWN = "unknown"

#: Every class, in the order the documentation lists them.
CLASSES = (READ_ONLY, IDEMPOTENT, DESTRUCTIVE, UNKNOWN)
#: The classes a retry may run again.
SAFE_TO_REPEAT = frozenset({READ_ONLY, IDEMPOTENT})

#: Tools whose announced class is remembered (per server and tool name); beyond it the
#: oldest is forgotten, and a forgotten tool is unknown again: the safe side.
MAX_ANNOUNCED = 10_000

_lock = threading.Lock()


def _reinit_after_fork() -> None:
    """A lock another thread held at a fork stays held in the child: replace it."""
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_reinit_after_fork)
_registered: list[tuple[str, str]] = []
_announced: dict[tuple[str | None, str], str] = {}


def parse_class(text: str) -> str:
    """One class as a user writes it (``read_only``, ``read-only``, ``idempotent`` ...);
    ValueError naming the allowed ones."""
    key = text.strip().lower().replace("-", "_")
    if key == "readonly":
        key = READ_ONLY
    if key not in CLASSES:
        raise ValueError(f"unknown side-effect class {text.strip()[:40]!r} (allowed: {', '.join(CLASSES)})")
    return key


def parse_tool_effects(text: str) -> tuple[tuple[str, str], ...]:
    """``search=read_only,get_*=idempotent,send_email=destructive`` -> ((glob, class), ...).

    ValueError names the first bad entry (an entry without ``=``, an empty tool
    pattern, an unknown class)."""
    entries: list[tuple[str, str]] = []
    for part in text.split(","):
        if not part.strip():
            continue
        pattern, sep, value = part.partition("=")
        if not sep or not pattern.strip():
            raise ValueError(f"entry {part.strip()[:60]!r} is not tool_or_glob=class")
        entries.append((pattern.strip(), parse_class(value)))
    return tuple(entries)


def register_tool_effects(pattern: str, effects: str) -> None:
    """Say what a tool (or every tool a glob pattern matches) does: ``read_only``,
    ``idempotent``, ``destructive`` or ``unknown``. Wins over what a server announces;
    the newest registration for a name wins."""
    checked = parse_class(effects)
    with _lock:
        _registered.insert(0, (pattern, checked))


def has_registrations() -> bool:
    """Whether any tool's class was registered (the quick route's failures ask)."""
    return bool(_registered)


def clear_registered_effects() -> None:
    """Forget every :func:`register_tool_effects` registration (and every announcement)."""
    with _lock:
        _registered.clear()
        _announced.clear()


def from_annotations(annotations: Any) -> str | None:
    """The class MCP tool annotations announce, or None when they say nothing usable.

    ``annotations`` is a mapping or an object with the hint attributes (the MCP SDK's
    ``ToolAnnotations``). Only booleans count: a hint of another type is ignored.
    ``readOnlyHint`` wins, then ``idempotentHint`` (running it again changes nothing
    more, whatever it does the first time), then ``destructiveHint``."""
    if annotations is None:
        return None
    read_only = _hint(annotations, "readOnlyHint")
    if read_only is True:
        return READ_ONLY
    if _hint(annotations, "idempotentHint") is True:
        return IDEMPOTENT
    if _hint(annotations, "destructiveHint") is True:
        return DESTRUCTIVE
    return None


#: Each hint's wire name and the attribute the MCP SDK's ``ToolAnnotations`` gives it (older
#: SDK versions kept the wire names).
_SNAKE = {"readOnlyHint": "read_only_hint", "idempotentHint": "idempotent_hint", "destructiveHint": "destructive_hint"}


def _hint(annotations: Any, name: str) -> bool | None:
    try:
        if isinstance(annotations, Mapping):
            value = annotations.get(name, annotations.get(_SNAKE[name]))
        else:  # the SDK's own name first: a compatibility layer warns on the other (FastMCP's)
            value = getattr(annotations, _SNAKE[name], None)
            if value is None:
                value = getattr(annotations, name, None)
    except Exception:
        return None
    return value if isinstance(value, bool) else None


def announce(source: str | None, tool: str, annotations: Any) -> None:
    """Remember the class a server's listing announced for ``tool`` (no usable hint: forget it)."""
    announced = from_annotations(annotations)
    key = (source, tool)
    with _lock:
        if announced is None:
            _announced.pop(key, None)
            return
        if key not in _announced and len(_announced) >= MAX_ANNOUNCED:
            _announced.pop(next(iter(_announced)))
        _announced[key] = announced


def announced(source: str | None, tool: str) -> str | None:
    """The class announced for ``tool`` of ``source`` (any source when none matches), or None."""
    found = _announced.get((source, tool))
    if found is None and source is not None:
        found = _announced.get((None, tool))
    return found


def effects_of(tool: str, source: str | None, configured: str | None) -> str:
    """The class of ``tool`` run on ``source``: the user's (``configured``, a breaker
    configuration's ``effects``; then the registrations), else the server's announcement,
    else ``unknown``."""
    if configured is not None:
        return configured
    if _registered:
        for pattern, effects in _registered:
            if fnmatch.fnmatchcase(tool, pattern):
                return effects
    found = _announced.get((source, tool))  # as :func:`announced`, read here: every traced call asks
    if found is None and source is not None:
        found = _announced.get((None, tool))
    return found if found is not None else UNKNOWN


def matching(rules: tuple[tuple[str, str], ...], tool: str) -> str | None:
    """The class of the first ``(glob, class)`` rule matching ``tool`` (``OTEL_BREAKER_TOOL_EFFECTS``)."""
    for pattern, effects in rules:
        if fnmatch.fnmatchcase(tool, pattern):
            return effects
    return None
