"""``OTEL_BREAKER_*`` environment variables -> :class:`~otel_breaker.config.settings.Settings`.

Two ways to read them. ``load_settings(strict=True)`` raises one
:class:`ConfigError` naming every bad variable, its value and what is allowed:
for code and the command line. ``strict=False`` (what auto-instrumentation
uses) logs each problem and keeps the default: the user's agent never crashes
on our configuration.

Every resolved value remembers where it came from (default, env or code), so
``otel-breaker doctor`` can say why a breaker behaves as it does.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Mapping
from typing import Any

from otel_breaker.breaker import CircuitBreakerConfig
from otel_breaker.config.settings import ConfigError, Settings
from otel_breaker.config.values import (
    BREAKER_OPTIONS,
    TOOL_ONLY_OPTIONS,
    PartialValue,
    leniently,
    parse_error_patterns,
    parse_fallbacks,
    parse_frameworks,
    parse_tool_list,
    parse_tool_overrides,
    parse_upstreams,
    parse_value,
    store_url,
    validated_option,
)
from otel_breaker.effects import parse_tool_effects
from otel_breaker.sanitize import quoted
from otel_breaker.token_prices import MAX_PATH_CHARS, parse_prices

logger = logging.getLogger("otel_breaker")

PREFIX = "OTEL_BREAKER_"

#: Settings changed from code (``configure``): name -> ``"code"``, for ``doctor``.
CODE_SOURCES: dict[str, str] = {}

# Settings that are not breaker options: variable suffix -> (field, kind).
_PLAIN_SETTINGS: dict[str, tuple[str, str]] = {
    "ENABLED": ("enabled", "bool"),
    "SCOPE": ("scope", "scope"),
    "CAPTURE_CONTENT": ("capture_content", "bool"),
    "DURATION_METRIC": ("duration_metric", "bool"),
    "SPAN_EVENTS": ("span_events", "bool"),
    "STATUS_ALLOW_REMOTE": ("status_allow_remote", "bool"),
    "STATUS_CONTROL": ("status_control", "bool"),
    "TOKENS_PER_CALL": ("tokens_per_call", "int"),
    "STATUS_IN_PROMPT": ("status_in_prompt", "bool"),
    "HIDE_OPEN_TOOLS": ("hide_open_tools", "bool"),
    "MAX_BREAKERS": ("max_breakers", "int"),
}


# Free-text settings: variable suffix -> field.
_TEXT_SETTINGS = {
    "REDIS_PREFIX": "redis_prefix",
    "REDIS_PASSWORD": "redis_password",
    "PRICES": "prices",
    "STATUS_ADDR": "status_addr",
    "STATUS_TOKEN": "status_token",
    "STATUS_FLEET_URL": "status_fleet_url",
}


#: Every ``OTEL_BREAKER_*`` variable otel-breaker reads; any other is reported as misspelt.
KNOWN_VARIABLES = frozenset(
    [PREFIX + suffix for suffix in (*_PLAIN_SETTINGS, *_TEXT_SETTINGS)]
    + [PREFIX + option.upper() for option in BREAKER_OPTIONS if option not in TOOL_ONLY_OPTIONS]
    + [PREFIX + suffix for suffix in ("TOOLS", "FALLBACKS", "UPSTREAMS", "HIGH_STAKES", "FRAMEWORKS", "STORE")]
    + [PREFIX + suffix for suffix in ("NEUTRAL_ERRORS", "FAILURE_ERRORS", "TOOL_EFFECTS")]
)


def closest_variable(var: str) -> str | None:
    """The known ``OTEL_BREAKER_*`` variable a misspelt ``var`` most likely means (None: none is close)."""
    matches = difflib.get_close_matches(var, sorted(KNOWN_VARIABLES), n=1, cutoff=0.8)
    return matches[0] if matches else None


def load_settings(environ: Mapping[str, str] | None = None, *, strict: bool = True) -> Settings:
    """Read ``OTEL_BREAKER_*`` from ``environ`` (default ``os.environ``).

    strict: raise :class:`ConfigError` listing every bad value; otherwise log
    one line per bad value and use its default (for a list, its valid parts).
    """
    env = os.environ if environ is None else environ
    problems: list[str] = []
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    breaker_options: dict[str, Any] = {}

    def take(var: str, parser, allowed: str, apply) -> None:
        raw = env.get(var)
        if raw is None:
            return
        try:
            apply(parser(raw))
            sources[var] = "env"
        except PartialValue as partial:
            if not partial.value:  # nothing valid: as if unset
                problems.append(_problem(var, raw, partial, allowed, "using the default"))
                return
            apply(partial.value)
            sources[var] = "env"
            problems.append(_problem(var, raw, partial, allowed, "the valid parts apply"))
        except ValueError as exc:
            problems.append(_problem(var, raw, exc, allowed, "using the default"))

    for suffix, (name, kind) in _PLAIN_SETTINGS.items():
        take(
            PREFIX + suffix,
            lambda raw, kind=kind: parse_value(kind, raw),
            "",
            lambda v, name=name: values.__setitem__(name, v),
        )
    for option, kind in BREAKER_OPTIONS.items():
        if option in TOOL_ONLY_OPTIONS:
            continue
        take(
            PREFIX + option.upper(),
            lambda raw, kind=kind, option=option: validated_option(option, parse_value(kind, raw)),
            "",
            lambda v, option=option: breaker_options.__setitem__(option, v),
        )
    take(
        PREFIX + "TOOLS",
        leniently(parse_tool_overrides, ";", lambda parts: {k: v for part in parts for k, v in part.items()}),
        "format: tool=preset,option=value;tool2=...",
        lambda v: values.__setitem__("tools", v),
    )
    take(
        PREFIX + "FALLBACKS",
        leniently(parse_fallbacks, ";", lambda parts: {k: v for part in parts for k, v in part.items()}),
        "format: tool=alt1,alt2;tool2=alt3",
        lambda v: values.__setitem__("fallbacks", v),
    )
    take(
        PREFIX + "UPSTREAMS",
        leniently(parse_upstreams, ";", _merge_upstreams),
        "format: upstream=tool,glob*;upstream2=...",
        lambda v: values.__setitem__("upstreams", v),
    )
    take(
        PREFIX + "HIGH_STAKES",
        leniently(parse_tool_list, ",", lambda parts: tuple(t for part in parts for t in part)),
        "",
        lambda v: values.__setitem__("high_stakes", v),
    )
    take(
        PREFIX + "FRAMEWORKS",
        leniently(parse_frameworks, ",", lambda parts: tuple(dict.fromkeys(n for part in parts for n in part))),
        "",
        lambda v: values.__setitem__("frameworks", v or None),
    )
    for suffix, name in (("NEUTRAL_ERRORS", "neutral_errors"), ("FAILURE_ERRORS", "failure_errors")):
        take(
            PREFIX + suffix,
            leniently(parse_error_patterns, ";", lambda parts: tuple(entry for part in parts for entry in part)),
            "format: tool_or_glob=regex;@server_glob=regex",
            lambda v, name=name: values.__setitem__(name, v),
        )
    take(
        PREFIX + "TOOL_EFFECTS",
        leniently(parse_tool_effects, ",", lambda parts: tuple(entry for part in parts for entry in part)),
        "format: tool_or_glob=read_only|idempotent|destructive|unknown,...",
        lambda v: values.__setitem__("tool_effects", v),
    )
    take(PREFIX + "STORE", store_url, "", lambda v: values.__setitem__("store", v))
    for suffix, name in _TEXT_SETTINGS.items():
        raw = env.get(PREFIX + suffix)
        if raw:
            if suffix == "PRICES":
                try:
                    parse_prices(raw)
                except ValueError as exc:
                    problems.append(_problem(PREFIX + "PRICES", raw, exc, "", "no cost is estimated"))
                    continue
            values[name] = raw.strip()
            sources[PREFIX + suffix] = "env"
    for var in sorted(env):
        if var.startswith(PREFIX) and var not in KNOWN_VARIABLES:
            closest = closest_variable(var)
            hint = f"; did you mean {closest}?" if closest else ""
            problems.append(f"{quoted(var)[1:-1]} is not an otel-breaker setting (misspelt?); it is ignored{hint}")

    defaults = CircuitBreakerConfig()
    if breaker_options:
        try:
            defaults = CircuitBreakerConfig(**breaker_options)
        except ValueError as exc:
            problems.append(f"{exc}; using the defaults for these options")
    problems.extend(_conflicts(env, defaults, values.get("tools", {})))
    if problems:
        if strict:
            raise ConfigError(problems)
        for problem in problems:
            logger.warning("otel-breaker: %s", problem)
    return Settings(defaults=defaults, sources=sources, **values)


def _merge_upstreams(parts: list[dict[str, tuple[str, ...]]]) -> dict[str, tuple[str, ...]]:
    merged: dict[str, tuple[str, ...]] = {}
    for part in parts:
        for name, patterns in part.items():
            merged[name] = merged.get(name, ()) + patterns
    return merged


def _problem(var: str, raw: str, exc: Exception, allowed: str, consequence: str) -> str:
    """One line: the variable, its (bounded) value, what is wrong and allowed, what happens instead."""
    detail = f"{exc} ({allowed})" if allowed else str(exc)
    if len(detail) > _MAX_DETAIL_CHARS:  # many bad entries: the first ones say enough
        detail = detail[: _MAX_DETAIL_CHARS - 1] + "…"
    return f"{var}={quoted(raw, MAX_PATH_CHARS)}: {detail}; {consequence}"


#: What one problem line says about the value; with the variable and the quoted value
#: it stays under the log's line bound.
_MAX_DETAIL_CHARS = 600


def _conflicts(env: Mapping[str, str], defaults: CircuitBreakerConfig, tools: Mapping[str, Any]) -> list[str]:
    """Values that are fine alone but not together, named like any bad value."""
    problems = []
    var = PREFIX + "MAX_RECOVERY_TIMEOUT"
    if var in env and defaults.max_recovery_timeout < defaults.recovery_timeout:
        problems.append(
            f"{var}={quoted(env[var])}: below the recovery timeout ({defaults.recovery_timeout:g}s); "
            "the cooldown could never reach it (must be >= OTEL_BREAKER_RECOVERY_TIMEOUT)"
        )
    for tool, options in tools.items():
        try:
            defaults.with_changes(**options)
        except ValueError as exc:
            problems.append(f"{PREFIX}TOOLS entry for {quoted(tool)}: {str(exc).split(': ', 1)[-1]}")
    return problems


def describe_sources(settings: Settings) -> list[tuple[str, str, str]]:
    """(variable, value, source) rows for every setting, for ``doctor``."""
    rows: list[tuple[str, str, str]] = []
    for suffix, (name, _kind) in _PLAIN_SETTINGS.items():
        var = PREFIX + suffix
        rows.append((var, str(getattr(settings, name)), settings.sources.get(var, "default")))
    for option in BREAKER_OPTIONS:
        if option in TOOL_ONLY_OPTIONS:
            continue
        var = PREFIX + option.upper()
        rows.append((var, str(getattr(settings.defaults, option)), settings.sources.get(var, "default")))
    structured = {
        "TOOLS": "tools",
        "FALLBACKS": "fallbacks",
        "UPSTREAMS": "upstreams",
        "HIGH_STAKES": "high_stakes",
        "FRAMEWORKS": "frameworks",
        "STORE": "store",
        "NEUTRAL_ERRORS": "neutral_errors",
        "FAILURE_ERRORS": "failure_errors",
        "TOOL_EFFECTS": "tool_effects",
    }
    for suffix, name in {**structured, **_TEXT_SETTINGS}.items():
        var = PREFIX + suffix
        value = getattr(settings, name)
        if name in ("redis_password", "status_token") and value:
            value = "***"
        shown = str(dict(value) if isinstance(value, Mapping) else value)
        rows.append((var, shown, settings.sources.get(var, "default")))
    for name, source in CODE_SOURCES.items():
        rows.append((name, "(set in code)", source))
    return rows
