"""``OTEL_BREAKER_*`` environment variables -> validated settings.

Two ways to read them. ``load_settings(strict=True)`` raises one
:class:`ConfigError` naming every bad variable, its value and what is allowed:
for code and the command line. ``strict=False`` (what auto-instrumentation
uses) logs each problem and keeps the default: the user's agent never crashes
on our configuration.

Every resolved value remembers where it came from (default, env or code), so
``otel-breaker doctor`` can say why a breaker behaves as it does.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from otel_breaker.breaker import PRESETS, CircuitBreakerConfig

logger = logging.getLogger("otel_breaker")

PREFIX = "OTEL_BREAKER_"
SCOPES = ("process", "agent", "session")
TOOL_NAME_PATTERN = re.compile(r"^[\w.:/@+\-]{1,128}$")
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})

# Breaker options settable from the environment, with their parsers' kinds.
_BREAKER_OPTIONS: dict[str, str] = {
    "failure_threshold": "int",
    "recovery_timeout": "float",
    "success_threshold": "int",
    "timeout": "float_or_none",
    "monitor_window": "float",
    "graceful_degradation": "bool",
    "failure_rate_threshold": "float_or_none",
    "minimum_calls": "int",
    "half_open_max_calls": "int",
    "backoff_multiplier": "float",
    "max_recovery_timeout": "float",
    "mode": "mode",
    "enable_health_check": "bool",
    "health_check_interval": "float",
    "high_stakes": "bool",
}


# Per-tool only (OTEL_BREAKER_TOOLS); globally, OTEL_BREAKER_HIGH_STAKES lists tools.
_TOOL_ONLY_OPTIONS = frozenset({"high_stakes"})


class ConfigError(ValueError):
    """Bad configuration; ``problems`` lists one line per bad value."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid otel-breaker configuration:\n  " + "\n  ".join(problems))


def _parse(kind: str, raw: str) -> Any:
    text = raw.strip()
    if kind == "bool":
        lowered = text.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ValueError("expected true/false (1/0, yes/no, on/off)")
    if kind == "int":
        try:
            value = int(text)
        except ValueError:
            raise ValueError("expected a whole number >= 1") from None
        if value < 1:
            raise ValueError("expected a whole number >= 1")
        return value
    if kind in ("float", "float_or_none"):
        if kind == "float_or_none" and text.lower() in ("none", "off", "0", ""):
            return None
        try:
            value = float(text)
        except ValueError:
            allowed = " or 'none'" if kind == "float_or_none" else ""
            raise ValueError(f"expected a number of seconds >= 0{allowed}") from None
        if not value >= 0 or value == float("inf"):
            raise ValueError("expected a finite number >= 0")
        return value
    if kind == "mode":
        if text not in ("enforce", "observe"):
            raise ValueError("expected 'enforce' or 'observe'")
        return text
    if kind == "scope":
        if text not in SCOPES:
            raise ValueError(f"expected one of {', '.join(SCOPES)}")
        return text
    raise AssertionError(kind)


def _validated_option(option: str, value: Any) -> Any:
    """Check one breaker option on its own, so the error names its variable."""
    try:
        CircuitBreakerConfig(**{option: value})
    except ValueError as exc:
        raise ValueError(str(exc).split(": ", 1)[-1]) from None
    return value


def validate_tool_name(name: str) -> str:
    """Tool names reach metric labels and prompts: keep them short and plain."""
    if not isinstance(name, str) or not TOOL_NAME_PATTERN.match(name):
        raise ValueError(f"invalid tool name {name!r}: 1-128 letters, digits or _ . : / @ + -")
    return name


def parse_tool_overrides(raw: str) -> dict[str, dict[str, Any]]:
    """Parse ``OTEL_BREAKER_TOOLS``: ``web_search=fast_api;run_code=code_executor,failure_threshold=1``.

    Each entry is ``tool=spec``; a spec is an optional preset name followed by
    ``option=value`` pairs, comma separated. Raises ValueError naming the entry.
    """
    result: dict[str, dict[str, Any]] = {}
    for entry in filter(None, (part.strip() for part in raw.split(";"))):
        tool, sep, spec = entry.partition("=")
        tool = tool.strip()
        if not sep or not spec.strip():
            raise ValueError(f"entry {entry!r}: expected tool=preset or tool=option=value,...")
        validate_tool_name(tool)
        options: dict[str, Any] = {}
        for index, item in enumerate(part.strip() for part in spec.split(",")):
            key, has_value, value = item.partition("=")
            key = key.strip()
            if not has_value:
                if index != 0 or key not in PRESETS:
                    raise ValueError(
                        f"entry {entry!r}: {key!r} is not a preset ({', '.join(PRESETS)}); "
                        "options are written option=value"
                    )
                options.update(PRESETS[key])
                continue
            if key not in _BREAKER_OPTIONS:
                raise ValueError(f"entry {entry!r}: unknown option {key!r} (allowed: {', '.join(_BREAKER_OPTIONS)})")
            try:
                options[key] = _parse(_BREAKER_OPTIONS[key], value)
            except ValueError as exc:
                raise ValueError(f"entry {entry!r}: {key}={value.strip()!r}: {exc}") from None
        result[tool] = options
    return result


def parse_fallbacks(raw: str) -> dict[str, tuple[str, ...]]:
    """Parse ``OTEL_BREAKER_FALLBACKS``: ``web_search=backup_search,bing;fetch=curl``."""
    result: dict[str, tuple[str, ...]] = {}
    for entry in filter(None, (part.strip() for part in raw.split(";"))):
        tool, sep, alternatives = entry.partition("=")
        if not sep:
            raise ValueError(f"entry {entry!r}: expected tool=alternative[,alternative...]")
        names = tuple(validate_tool_name(a.strip()) for a in alternatives.split(",") if a.strip())
        if not names:
            raise ValueError(f"entry {entry!r}: no alternative named")
        result[validate_tool_name(tool.strip())] = names
    return result


def _parse_tool_list(raw: str) -> tuple[str, ...]:
    return tuple(validate_tool_name(t.strip()) for t in raw.replace(";", ",").split(",") if t.strip())


def _parse_list(raw: str) -> tuple[str, ...]:
    return tuple(item.strip().lower() for item in raw.split(",") if item.strip())


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
    fallbacks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    high_stakes: tuple[str, ...] = ()
    max_breakers: int = 10_000
    store: str | None = None
    redis_prefix: str = "otel_breaker"
    redis_password: str | None = None
    status_addr: str | None = None
    status_allow_remote: bool = False
    status_control: bool = False
    status_token: str | None = None
    sources: Mapping[str, str] = field(default_factory=dict)

    def config_for(self, tool: str, base: CircuitBreakerConfig | None = None) -> CircuitBreakerConfig:
        """The configuration for ``tool``: code config, else env defaults, plus per-tool env overrides."""
        config = base if base is not None else self.defaults
        changes: dict[str, Any] = dict(self.tools.get(tool, {}))
        fallbacks = self.fallbacks.get(tool)
        if fallbacks and not config.fallbacks:
            changes["fallbacks"] = fallbacks
        if tool in self.high_stakes and not config.high_stakes:
            changes["high_stakes"] = True
        if not changes:
            return config
        try:
            return config.with_changes(**changes)
        except ValueError as exc:
            logger.warning("otel-breaker: OTEL_BREAKER_TOOLS for %r ignored: %s", tool, exc)
            return config


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
    "MAX_BREAKERS": ("max_breakers", "int"),
}


# Free-text settings: variable suffix -> field.
_TEXT_SETTINGS = {
    "STORE": "store",
    "REDIS_PREFIX": "redis_prefix",
    "REDIS_PASSWORD": "redis_password",
    "PRICES": "prices",
    "STATUS_ADDR": "status_addr",
    "STATUS_TOKEN": "status_token",
}


def load_settings(environ: Mapping[str, str] | None = None, *, strict: bool = True) -> Settings:
    """Read ``OTEL_BREAKER_*`` from ``environ`` (default ``os.environ``).

    strict: raise :class:`ConfigError` listing every bad value; otherwise log
    each one and use its default.
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
        except ValueError as exc:
            problems.append(f"{var}={raw!r}: {exc} ({allowed})" if allowed else f"{var}={raw!r}: {exc}")

    for suffix, (name, kind) in _PLAIN_SETTINGS.items():
        take(
            PREFIX + suffix,
            lambda raw, kind=kind: _parse(kind, raw),
            "",
            lambda v, name=name: values.__setitem__(name, v),
        )
    for option, kind in _BREAKER_OPTIONS.items():
        if option in _TOOL_ONLY_OPTIONS:
            continue
        take(
            PREFIX + option.upper(),
            lambda raw, kind=kind, option=option: _validated_option(option, _parse(kind, raw)),
            "",
            lambda v, option=option: breaker_options.__setitem__(option, v),
        )
    take(
        PREFIX + "TOOLS",
        parse_tool_overrides,
        "format: tool=preset,option=value;tool2=...",
        lambda v: values.__setitem__("tools", v),
    )
    take(
        PREFIX + "FALLBACKS",
        parse_fallbacks,
        "format: tool=alt1,alt2;tool2=alt3",
        lambda v: values.__setitem__("fallbacks", v),
    )
    take(PREFIX + "HIGH_STAKES", _parse_tool_list, "", lambda v: values.__setitem__("high_stakes", v))
    take(PREFIX + "FRAMEWORKS", _parse_list, "", lambda v: values.__setitem__("frameworks", v or None))
    for suffix, name in _TEXT_SETTINGS.items():
        raw = env.get(PREFIX + suffix)
        if raw:
            values[name] = raw.strip()
            sources[PREFIX + suffix] = "env"

    defaults = CircuitBreakerConfig()
    if breaker_options:
        try:
            defaults = CircuitBreakerConfig(**breaker_options)
        except ValueError as exc:
            problems.append(str(exc))
    if problems:
        if strict:
            raise ConfigError(problems)
        for problem in problems:
            logger.warning("otel-breaker: %s; using the default", problem)
    return Settings(defaults=defaults, sources=sources, **values)


def describe_sources(settings: Settings) -> list[tuple[str, str, str]]:
    """(variable, value, source) rows for every setting, for ``doctor``."""
    rows: list[tuple[str, str, str]] = []
    for suffix, (name, _kind) in _PLAIN_SETTINGS.items():
        var = PREFIX + suffix
        rows.append((var, str(getattr(settings, name)), settings.sources.get(var, "default")))
    for option in _BREAKER_OPTIONS:
        if option in _TOOL_ONLY_OPTIONS:
            continue
        var = PREFIX + option.upper()
        rows.append((var, str(getattr(settings.defaults, option)), settings.sources.get(var, "default")))
    structured = {"TOOLS": "tools", "FALLBACKS": "fallbacks", "HIGH_STAKES": "high_stakes", "FRAMEWORKS": "frameworks"}
    for suffix, name in {**structured, **_TEXT_SETTINGS}.items():
        var = PREFIX + suffix
        value = getattr(settings, name)
        if name in ("redis_password", "status_token") and value:
            value = "***"
        shown = str(dict(value) if isinstance(value, Mapping) else value)
        rows.append((var, shown, settings.sources.get(var, "default")))
    for name, source in _CODE_SOURCES.items():
        rows.append((name, "(set in code)", source))
    return rows


_lock = threading.Lock()
_settings: Settings | None = None
_CODE_SOURCES: dict[str, str] = {}


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
    global _settings
    with _lock:
        _settings = settings


def configure(**changes: Any) -> Settings:
    """Change process-wide settings from code (recorded as source ``code``)."""
    known = {f.name for f in fields(Settings)} - {"sources"}
    unknown = set(changes) - known
    if unknown:
        raise ValueError(f"unknown setting(s): {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
    from dataclasses import replace

    updated = replace(get_settings(), **changes)
    for name in changes:
        _CODE_SOURCES[name] = "code"
    set_settings(updated)
    return updated
