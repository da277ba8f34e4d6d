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

import json
import logging
import math
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from otel_breaker.breaker import LOOP_ACTIONS, LOOP_COUNT_KINDS, PRESETS, CircuitBreakerConfig
from otel_breaker.sanitize import quoted
from otel_breaker.words import FALSE_WORDS, TRUE_WORDS

logger = logging.getLogger("otel_breaker")

PREFIX = "OTEL_BREAKER_"
SCOPES = ("agent", "process", "instance", "session")
TOOL_NAME_PATTERN = re.compile(r"^[\w.:/@+\-]{1,128}$")
_TRUE = TRUE_WORDS
_FALSE = FALSE_WORDS | {""}  # an empty variable is off

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
    "count_model_retry": "bool",
    "slow_call_seconds": "float_or_none",
    "slow_call_rate": "float_or_none",
    "loop_limit": "int",
    "loop_action": "loop_action",
    "loop_count": "loop_count",
}


#: Identifiers of the supported frameworks (``OTEL_BREAKER_FRAMEWORKS``); each
#: has an adapter in ``otel_breaker.instrumentation``.
FRAMEWORKS = (
    "langchain",
    "openai_agents",
    "pydantic_ai",
    "llama_index",
    "smolagents",
    "crewai",
    "autogen",
    "praisonai",
    "mcp",
    "agno",
    "dspy",
    "haystack",
    "fastmcp",
    "google_adk",
    "strands",
    "agent_framework",
    "semantic_kernel",
)

#: Other spellings users write for them (distribution names, the graph layer).
FRAMEWORK_ALIASES = {
    "openai-agents": "openai_agents",
    "openai_agents_sdk": "openai_agents",
    "pydantic-ai": "pydantic_ai",
    "pydanticai": "pydantic_ai",
    "llama-index": "llama_index",
    "llamaindex": "llama_index",
    "langgraph": "langchain",
    "langchain-core": "langchain",
    "autogen-core": "autogen",
    "autogen_core": "autogen",
    "praisonaiagents": "praisonai",
    "praison": "praisonai",
    "google-adk": "google_adk",
    "adk": "google_adk",
    "strands-agents": "strands",
    "strands_agents": "strands",
    "agent-framework-core": "agent_framework",
    "microsoft-agent-framework": "agent_framework",
    "semantic-kernel": "semantic_kernel",
    "semantickernel": "semantic_kernel",
    "dspy-ai": "dspy",
    "haystack-ai": "haystack",
    "haystack_ai": "haystack",
}


def normalize_framework(name: str) -> str:
    """The framework identifier for a user-written name; ValueError naming the allowed ones."""
    key = name.strip().lower()
    key = FRAMEWORK_ALIASES.get(key, key).replace("-", "_")
    if key not in FRAMEWORKS:
        raise ValueError(f"unknown framework {quoted(name.strip())} (allowed: {', '.join(FRAMEWORKS)})")
    return key


# Per-tool only (OTEL_BREAKER_TOOLS); globally, OTEL_BREAKER_HIGH_STAKES lists tools.
_TOOL_ONLY_OPTIONS = frozenset({"high_stakes"})


class ConfigError(ValueError):
    """Bad configuration; ``problems`` lists one line per bad value."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid otel-breaker configuration:\n  " + "\n  ".join(problems))


#: Largest whole number any setting accepts; beyond it a value is a typo.
MAX_WHOLE_NUMBER = 10**9


def _parse(kind: str, raw: str) -> Any:
    text = raw.strip()
    if kind == "bool":
        lowered = text.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ValueError("expected true/false (1/0, yes/no, on/off)")
    if kind in ("int", "float", "float_or_none") and not text.isascii():
        raise ValueError(f"expected a number in ASCII digits (0-9), read {quoted(text)}")
    if kind == "int":
        try:
            value = int(text)
        except ValueError:
            raise ValueError("expected a whole number >= 1") from None
        if not 1 <= value <= MAX_WHOLE_NUMBER:
            raise ValueError(f"expected a whole number between 1 and {MAX_WHOLE_NUMBER:,}")
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
    if kind == "loop_action":
        if text not in LOOP_ACTIONS:
            raise ValueError(f"expected one of {', '.join(LOOP_ACTIONS)}")
        return text
    if kind == "loop_count":
        kinds = tuple(k.strip() for k in text.replace("+", ",").replace("|", ",").split(",") if k.strip())
        if not all(k in LOOP_COUNT_KINDS for k in kinds):
            raise ValueError(f"expected a subset of {', '.join(LOOP_COUNT_KINDS)} (separated by , or +)")
        return kinds
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
        raise ValueError(f"invalid tool name {quoted(name)}: 1-128 letters, digits or _ . : / @ + -")
    return name


#: A price above this (USD per token) is a typo: the dearest models cost well under a cent a token.
MAX_PRICE_PER_TOKEN = 1.0


@dataclass(frozen=True)
class Price:
    """USD per input and per output token of one model."""

    input: float
    output: float


def _price(model: str, input_price: Any, output_price: Any) -> Price:
    """A validated price: finite numbers, 0 <= price <= :data:`MAX_PRICE_PER_TOKEN`."""
    values = []
    for name, value in (("input", input_price), ("output", output_price)):
        if isinstance(value, bool):
            raise ValueError(f"model {quoted(model)}: {name} price {quoted(value)} is not a number")
        try:
            if isinstance(value, str) and not value.isascii():
                raise ValueError("not ASCII digits")
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"model {quoted(model)}: {name} price {quoted(value)} is not a number") from None
        if not math.isfinite(number) or not 0 <= number <= MAX_PRICE_PER_TOKEN:
            raise ValueError(
                f"model {quoted(model)}: {name} price {quoted(value)} must be a finite USD amount per token "
                f"between 0 and {MAX_PRICE_PER_TOKEN:g}"
            )
        values.append(number)
    if not model:
        raise ValueError("a price entry names no model")
    return Price(*values)


def parse_prices(raw: str | None) -> dict[str, Price]:
    """Prices from a JSON file path or an inline ``model=in:out;model2=in:out`` value.

    A JSON file maps model -> {"input": usd_per_token, "output": usd_per_token}.
    Raises ValueError naming what is wrong (NaN, infinite and negative prices included).
    """
    if not raw:
        return {}
    text = raw.strip()
    if os.path.exists(text):
        shown = quoted(text, _MAX_PATH_CHARS)
        try:
            with open(text, encoding="utf-8") as handle:
                data = json.load(handle)
        except OSError as exc:
            raise ValueError(f"price file {shown}: cannot be read ({exc.strerror or exc})") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"price file {shown}: not valid JSON ({exc})") from None
        if not isinstance(data, Mapping):
            raise ValueError(f"price file {shown}: expected an object of model -> {{input, output}}")
        prices = {}
        for model, entry in data.items():
            if not isinstance(entry, Mapping) or "input" not in entry or "output" not in entry:
                raise ValueError(f"price file {shown}: model {quoted(model)} needs numeric 'input' and 'output'")
            try:
                prices[str(model)] = _price(str(model), entry["input"], entry["output"])
            except ValueError as exc:
                raise ValueError(f"price file {shown}: {exc}") from None
        return prices
    prices = {}
    for entry in filter(None, (part.strip() for part in text.split(";"))):
        model, sep, pair = entry.partition("=")
        parts = pair.split(":")
        if not sep or len(parts) != 2:
            expected = "model=usd_per_input_token:usd_per_output_token"
            raise ValueError(f"prices entry {quoted(entry)}: expected {expected}")
        try:
            prices[model.strip()] = _price(model.strip(), parts[0].strip(), parts[1].strip())
        except ValueError as exc:
            raise ValueError(f"prices entry {quoted(entry)}: {exc}") from None
    return prices


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
            raise ValueError(f"entry {quoted(entry)}: expected tool=preset or tool=option=value,...")
        validate_tool_name(tool)
        options: dict[str, Any] = {}
        for index, item in enumerate(part.strip() for part in spec.split(",")):
            key, has_value, value = item.partition("=")
            key = key.strip()
            if not has_value:
                if index != 0 or key not in PRESETS:
                    raise ValueError(
                        f"entry {quoted(entry)}: {quoted(key)} is not a preset ({', '.join(PRESETS)}); "
                        "options are written option=value"
                    )
                options.update(PRESETS[key])
                continue
            if key not in _BREAKER_OPTIONS:
                raise ValueError(
                    f"entry {quoted(entry)}: unknown option {quoted(key)} (allowed: {', '.join(_BREAKER_OPTIONS)})"
                )
            try:
                options[key] = _parse(_BREAKER_OPTIONS[key], value)
            except ValueError as exc:
                raise ValueError(f"entry {quoted(entry)}: {key}={quoted(value.strip())}: {exc}") from None
        result[tool] = options
    return result


def parse_fallbacks(raw: str) -> dict[str, tuple[str, ...]]:
    """Parse ``OTEL_BREAKER_FALLBACKS``: ``web_search=backup_search,bing;fetch=curl``."""
    result: dict[str, tuple[str, ...]] = {}
    for entry in filter(None, (part.strip() for part in raw.split(";"))):
        tool, sep, alternatives = entry.partition("=")
        if not sep:
            raise ValueError(f"entry {quoted(entry)}: expected tool=alternative[,alternative...]")
        names = tuple(validate_tool_name(a.strip()) for a in alternatives.split(",") if a.strip())
        if not names:
            raise ValueError(f"entry {quoted(entry)}: no alternative named")
        result[validate_tool_name(tool.strip())] = names
    return result


#: A glob pattern of tool names in ``OTEL_BREAKER_UPSTREAMS``: a tool name that may hold ``* ? [ ]``.
_GLOB_PATTERN = re.compile(r"^[A-Za-z0-9_.:/@+\-*?\[\]!]{1,128}$")


def parse_upstreams(raw: str) -> dict[str, tuple[str, ...]]:
    """Parse ``OTEL_BREAKER_UPSTREAMS``: ``serp=web_search,news_search;github=gh_*``.

    Each entry names an upstream and the tools behind it, as names or glob
    patterns (``fnmatch``: ``*``, ``?``, ``[...]``). A tool matching several
    upstreams belongs to the first one listed.
    """
    result: dict[str, tuple[str, ...]] = {}
    for entry in filter(None, (part.strip() for part in raw.split(";"))):
        name, sep, patterns = entry.partition("=")
        if not sep:
            raise ValueError(f"entry {quoted(entry)}: expected upstream=tool[,tool_or_glob...]")
        name = validate_tool_name(name.strip())
        found = []
        for pattern in filter(None, (p.strip() for p in patterns.split(","))):
            if not _GLOB_PATTERN.match(pattern):
                raise ValueError(f"entry {quoted(entry)}: invalid tool pattern {quoted(pattern)}")
            found.append(pattern)
        if not found:
            raise ValueError(f"entry {quoted(entry)}: no tool named")
        result[name] = result.get(name, ()) + tuple(found)
    return result


def _parse_tool_list(raw: str) -> tuple[str, ...]:
    return tuple(validate_tool_name(t.strip()) for t in raw.replace(";", ",").split(",") if t.strip())


def _parse_frameworks(raw: str) -> tuple[str, ...]:
    names: list[str] = []
    for item in raw.split(","):
        if item.strip() and normalize_framework(item) not in names:
            names.append(normalize_framework(item))
    return tuple(names)


class _Partial(ValueError):
    """Some parts of a list setting were bad: ``value`` holds the good ones."""

    def __init__(self, value: Any, errors: list[str]) -> None:
        self.value = value
        super().__init__("; ".join(errors))


def _leniently(parse, separator: str, merge):
    """A parser for a list setting that keeps every valid part.

    Each part (split on ``separator``) is parsed on its own; when some are bad,
    :class:`_Partial` carries the merged good ones and one message per bad one.
    """

    def parse_all(raw: str) -> Any:
        good, errors = [], []
        for part in raw.split(separator):
            if not part.strip():
                continue
            try:
                good.append(parse(part))
            except ValueError as exc:
                errors.append(str(exc))
        value = merge(good)
        if errors:
            raise _Partial(value, errors)
        return value

    return parse_all


def _store_url(raw: str) -> str:
    text = raw.strip()
    if text != "memory" and "://" not in text:
        raise ValueError("expected 'memory' or a URL such as redis://host:6379/0")
    return text


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
            logger.warning("otel-breaker: OTEL_BREAKER_TOOLS for %s ignored: %s", quoted(tool), exc)
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
    + [PREFIX + option.upper() for option in _BREAKER_OPTIONS if option not in _TOOL_ONLY_OPTIONS]
    + [PREFIX + suffix for suffix in ("TOOLS", "FALLBACKS", "UPSTREAMS", "HIGH_STAKES", "FRAMEWORKS", "STORE")]
)


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
        except _Partial as partial:
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
        _leniently(parse_tool_overrides, ";", lambda parts: {k: v for part in parts for k, v in part.items()}),
        "format: tool=preset,option=value;tool2=...",
        lambda v: values.__setitem__("tools", v),
    )
    take(
        PREFIX + "FALLBACKS",
        _leniently(parse_fallbacks, ";", lambda parts: {k: v for part in parts for k, v in part.items()}),
        "format: tool=alt1,alt2;tool2=alt3",
        lambda v: values.__setitem__("fallbacks", v),
    )
    take(
        PREFIX + "UPSTREAMS",
        _leniently(parse_upstreams, ";", _merge_upstreams),
        "format: upstream=tool,glob*;upstream2=...",
        lambda v: values.__setitem__("upstreams", v),
    )
    take(
        PREFIX + "HIGH_STAKES",
        _leniently(_parse_tool_list, ",", lambda parts: tuple(t for part in parts for t in part)),
        "",
        lambda v: values.__setitem__("high_stakes", v),
    )
    take(
        PREFIX + "FRAMEWORKS",
        _leniently(_parse_frameworks, ",", lambda parts: tuple(dict.fromkeys(n for part in parts for n in part))),
        "",
        lambda v: values.__setitem__("frameworks", v or None),
    )
    take(PREFIX + "STORE", _store_url, "", lambda v: values.__setitem__("store", v))
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
            problems.append(f"{quoted(var)[1:-1]} is not an otel-breaker setting (misspelt?); it is ignored")

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
    return f"{var}={quoted(raw, _MAX_PATH_CHARS)}: {detail}; {consequence}"


#: A value quoted whole up to this length (a price file's path fits).
_MAX_PATH_CHARS = 200
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
    for option in _BREAKER_OPTIONS:
        if option in _TOOL_ONLY_OPTIONS:
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
    }
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


def _reinit_after_fork() -> None:
    """A lock another thread held at a fork stays held in the child: replace it."""
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)
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
