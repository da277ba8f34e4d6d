"""The resolved settings: what the environment (and code) configure, validated."""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from otel_breaker.breaker import CircuitBreakerConfig
from otel_breaker.effects import matching
from otel_breaker.sanitize import quoted

logger = logging.getLogger("otel_breaker")


class ConfigError(ValueError):
    """Bad configuration; ``problems`` lists one line per bad value."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid otel-breaker configuration:\n  " + "\n  ".join(problems))


@dataclass(frozen=True)
class Settings:
    """Everything the environment configures, resolved and validated."""

    enabled: bool = False
    defaults: CircuitBreakerConfig = field(default_factory=CircuitBreakerConfig)
    tools: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    scope: str = "agent"
    frameworks: tuple[str, ...] | None = None
    capture_content: bool = False
    duration_metric: bool = True
    span_events: bool = True
    tokens_per_call: int = 1500
    prices: str | None = None
    status_in_prompt: bool = False
    hide_open_tools: bool = False
    fallbacks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    upstreams: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Upstream name -> tool names or glob patterns (``OTEL_BREAKER_UPSTREAMS``)."""
    high_stakes: tuple[str, ...] = ()
    max_breakers: int = 10_000
    store: str | None = None
    redis_prefix: str = "otel_breaker"
    redis_password: str | None = None
    status_addr: str | None = None
    status_allow_remote: bool = False
    status_control: bool = False
    status_token: str | None = None
    status_fleet_url: str | None = None
    """The fleet board (``otel-breaker status --serve``) the process board links to."""
    neutral_errors: tuple[tuple[str, str], ...] = ()
    """(tool glob or ``@server`` glob, regex): errors that are the caller's mistake
    (``OTEL_BREAKER_NEUTRAL_ERRORS``)."""
    failure_errors: tuple[tuple[str, str], ...] = ()
    """(tool glob or ``@server`` glob, regex): errors that count as failures
    (``OTEL_BREAKER_FAILURE_ERRORS``)."""
    tool_effects: tuple[tuple[str, str], ...] = ()
    """(tool glob, side-effect class): what tools do, in the user's word
    (``OTEL_BREAKER_TOOL_EFFECTS``; docs/retries.md)."""
    sources: Mapping[str, str] = field(default_factory=dict)

    def config_for(
        self, tool: str, base: CircuitBreakerConfig | None = None, source: str | None = None
    ) -> CircuitBreakerConfig:
        """The configuration for ``tool`` (run on ``source``, an MCP server's identity, when it
        has one): code config, else env defaults, plus per-tool env overrides and the
        override patterns whose tool or ``@server`` glob matches."""
        config = base if base is not None else self.defaults
        changes: dict[str, Any] = dict(self.tools.get(tool, {}))
        for option, rules in (("neutral_errors", self.neutral_errors), ("failure_errors", self.failure_errors)):
            pattern = _matching_pattern(rules, tool, source, getattr(config, option))
            if pattern != getattr(config, option):
                changes[option] = pattern
        fallbacks = self.fallbacks.get(tool)
        if fallbacks and not config.fallbacks:
            changes["fallbacks"] = fallbacks
        if tool in self.high_stakes and not config.high_stakes:
            changes["high_stakes"] = True
        if self.tool_effects and config.effects is None and "effects" not in changes:
            effects = matching(self.tool_effects, tool)
            if effects is not None:
                changes["effects"] = effects
        if not changes:
            return config
        try:
            return config.with_changes(**changes)
        except ValueError as exc:
            logger.warning("otel-breaker: OTEL_BREAKER_TOOLS for %s ignored: %s", quoted(tool), exc)
            return config


def _matching_pattern(rules: tuple[tuple[str, str], ...], tool: str, source: str | None, own: str | None) -> str | None:
    """One regex for ``tool``: its configuration's own pattern and every rule whose target
    matches the tool name (``glob``) or its server (``@glob``), as alternatives."""
    if not rules:
        return own
    patterns = [own] if own else []
    for target, pattern in rules:
        if target.startswith("@"):
            matched = source is not None and fnmatch.fnmatchcase(source, target[1:])
        else:
            matched = fnmatch.fnmatchcase(tool, target)
        if matched and pattern not in patterns:
            patterns.append(pattern)
    if len(patterns) <= 1:
        return patterns[0] if patterns else None
    return "|".join(f"(?:{pattern})" for pattern in patterns)
