"""The process's settings: ``OTEL_BREAKER_*`` read once, or set from code.

:func:`get_settings` reads the environment leniently on first use (one log line
per bad value; the agent never crashes on our configuration); :func:`configure`
and :func:`set_settings` change them from code. The parts live in their own
modules: :mod:`.values` (one value -> a checked value), :mod:`.environment`
(the variables -> settings, and where each came from) and :mod:`.settings` (the
resolved settings). This module names the public ones.
"""

from __future__ import annotations

import os
import threading
from dataclasses import fields, replace
from typing import Any

from otel_breaker import loglines  # noqa: F401 - a bad setting is logged in one bounded line
from otel_breaker.config.environment import CODE_SOURCES, KNOWN_VARIABLES, PREFIX, describe_sources, load_settings
from otel_breaker.config.settings import ConfigError, Settings
from otel_breaker.config.values import (
    SCOPES,
    TOOL_NAME_PATTERN,
    normalize_framework,
    parse_fallbacks,
    parse_tool_overrides,
    parse_upstreams,
    validate_tool_name,
)

_lock = threading.Lock()
_settings: Settings | None = None
#: Bumped each time the settings are replaced (``set_settings``, ``configure``): a caller
#: that keeps something found under the settings (``@guard`` keeps its breaker) compares
#: this number on every call instead of asking for the settings.
settings_version = 0


def _reinit_after_fork() -> None:
    """A lock another thread held at a fork stays held in the child: replace it."""
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)


def get_settings() -> Settings:
    """The process-wide settings, read leniently from the environment once."""
    global _settings
    current = _settings
    if current is None:
        with _lock:
            if _settings is None:
                _settings = load_settings(strict=False)
            current = _settings
    return current


def set_settings(settings: Settings | None) -> None:
    """Replace the process-wide settings (``None``: re-read the environment on next use)."""
    global _settings, settings_version
    with _lock:
        _settings = settings
        settings_version += 1


def configure(**changes: Any) -> Settings:
    """Change process-wide settings from code (recorded as source ``code``)."""
    known = {f.name for f in fields(Settings)} - {"sources"}
    unknown = set(changes) - known
    if unknown:
        raise ValueError(f"unknown setting(s): {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
    updated = replace(get_settings(), **changes)
    for name in changes:
        CODE_SOURCES[name] = "code"
    set_settings(updated)
    return updated


__all__ = [
    "KNOWN_VARIABLES",
    "PREFIX",
    "SCOPES",
    "TOOL_NAME_PATTERN",
    "ConfigError",
    "Settings",
    "configure",
    "describe_sources",
    "get_settings",
    "load_settings",
    "normalize_framework",
    "parse_fallbacks",
    "parse_tool_overrides",
    "parse_upstreams",
    "set_settings",
    "validate_tool_name",
]
