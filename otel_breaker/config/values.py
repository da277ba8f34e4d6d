"""One ``OTEL_BREAKER_*`` value -> a checked Python value, or a ValueError that says what is allowed.

The parsers of single values (numbers, switches, modes), of the list settings
(``OTEL_BREAKER_TOOLS``, ``FALLBACKS``, ``UPSTREAMS``, ``HIGH_STAKES``,
``FRAMEWORKS``) and of tool names. :mod:`.environment` applies them to the
environment; the command line uses some of them on their own.
"""

from __future__ import annotations

import re
from typing import Any

from otel_breaker.breaker import LOOP_ACTIONS, LOOP_COUNT_KINDS, PRESETS, CircuitBreakerConfig
from otel_breaker.breaker_config import RUN_ACTIONS, pattern_problem
from otel_breaker.catalogue import ALIASES, FRAMEWORK_IDS
from otel_breaker.sanitize import quoted
from otel_breaker.words import FALSE_WORDS, TRUE_WORDS

SCOPES = ("agent", "process", "instance", "session")
TOOL_NAME_PATTERN = re.compile(r"^[\w.:/@+\-]{1,128}$")
_TRUE = TRUE_WORDS
_FALSE = FALSE_WORDS | {""}  # an empty variable is off

# Breaker options settable from the environment, with their parsers' kinds.
BREAKER_OPTIONS: dict[str, str] = {
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
    "run_rejections": "int_or_off",
    "run_action": "run_action",
    "retry": "retry",
    "retry_attempts": "int",
    "retry_max_wait": "float",
}


def normalize_framework(name: str) -> str:
    """The framework identifier for a user-written name; ValueError naming the allowed ones."""
    key = name.strip().lower()
    key = ALIASES.get(key, key).replace("-", "_")
    if key not in FRAMEWORK_IDS:
        raise ValueError(f"unknown framework {quoted(name.strip())} (allowed: {', '.join(FRAMEWORK_IDS)})")
    return key


# Per-tool only (OTEL_BREAKER_TOOLS); globally, OTEL_BREAKER_HIGH_STAKES lists tools.
TOOL_ONLY_OPTIONS = frozenset({"high_stakes"})

#: Largest whole number any setting accepts; beyond it a value is a typo.
MAX_WHOLE_NUMBER = 10**9


def parse_value(kind: str, raw: str) -> Any:
    """``raw`` read as a value of ``kind`` (``int``, ``bool``, ``mode``, ...); ValueError says what is allowed."""
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
    if kind == "run_action":
        if text not in RUN_ACTIONS:
            raise ValueError(f"expected one of {', '.join(RUN_ACTIONS)}")
        return text
    if kind == "int_or_off":
        if text.lower() in _FALSE or text.lower() in ("none", "never"):
            return None
        return parse_value("int", text)
    if kind == "loop_count":
        kinds = tuple(k.strip() for k in text.replace("+", ",").replace("|", ",").split(",") if k.strip())
        if not all(k in LOOP_COUNT_KINDS for k in kinds):
            raise ValueError(f"expected a subset of {', '.join(LOOP_COUNT_KINDS)} (separated by , or +)")
        return kinds
    if kind == "retry":
        lowered = text.lower()
        if lowered == "transient":
            return "transient"
        if lowered in _FALSE or lowered in ("none", "never"):
            return None
        raise ValueError("expected 'transient' or off")
    if kind == "scope":
        if text not in SCOPES:
            raise ValueError(f"expected one of {', '.join(SCOPES)}")
        return text
    raise AssertionError(kind)


def validated_option(option: str, value: Any) -> Any:
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
            if key not in BREAKER_OPTIONS:
                raise ValueError(
                    f"entry {quoted(entry)}: unknown option {quoted(key)} (allowed: {', '.join(BREAKER_OPTIONS)})"
                )
            try:
                options[key] = parse_value(BREAKER_OPTIONS[key], value)
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


def parse_error_patterns(raw: str) -> tuple[tuple[str, str], ...]:
    """Parse ``OTEL_BREAKER_NEUTRAL_ERRORS`` / ``OTEL_BREAKER_FAILURE_ERRORS``:
    ``run_sql=no such (table|column);@filesystem*=ENOENT|outside allowed``.

    Each entry is ``target=regex``: the target is a tool name or glob pattern, or
    ``@`` and a glob of the server (source) the tool runs on; ``*`` is every tool.
    The regular expression is searched, case-insensitively, in
    ``"<rule> <ErrorType>: <message>"``. Entries are separated by ``;`` (a regex that
    needs one writes ``\\x3b``). An entry whose pattern does not compile raises
    ValueError naming it.
    """
    result: list[tuple[str, str]] = []
    for entry in filter(None, (part.strip() for part in raw.split(";"))):
        target, sep, pattern = entry.partition("=")
        target = target.strip()
        if not sep or not target or not pattern.strip():
            raise ValueError(f"entry {quoted(entry)}: expected tool_or_glob=regex or @server_glob=regex")
        if not _GLOB_PATTERN.match(target.removeprefix("@")):
            raise ValueError(f"entry {quoted(entry)}: invalid tool or server pattern {quoted(target)}")
        problem = pattern_problem(pattern.strip())
        if problem is not None:
            raise ValueError(f"entry {quoted(entry)}: the pattern {problem}")
        result.append((target, pattern.strip()))
    return tuple(result)


def parse_tool_list(raw: str) -> tuple[str, ...]:
    """Tool names separated by commas (or semicolons), each checked."""
    return tuple(validate_tool_name(t.strip()) for t in raw.replace(";", ",").split(",") if t.strip())


def parse_frameworks(raw: str) -> tuple[str, ...]:
    """Framework identifiers for the names in ``OTEL_BREAKER_FRAMEWORKS``, each once."""
    names: list[str] = []
    for item in raw.split(","):
        if item.strip() and normalize_framework(item) not in names:
            names.append(normalize_framework(item))
    return tuple(names)


class PartialValue(ValueError):
    """Some parts of a list setting were bad: ``value`` holds the good ones."""

    def __init__(self, value: Any, errors: list[str]) -> None:
        self.value = value
        super().__init__("; ".join(errors))


def leniently(parse, separator: str, merge):
    """A parser for a list setting that keeps every valid part.

    Each part (split on ``separator``) is parsed on its own; when some are bad,
    :class:`PartialValue` carries the merged good ones and one message per bad one.
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
            raise PartialValue(value, errors)
        return value

    return parse_all


def store_url(raw: str) -> str:
    """``OTEL_BREAKER_STORE``: ``memory`` or a URL (its scheme is checked when the store is built)."""
    text = raw.strip()
    if text != "memory" and "://" not in text:
        raise ValueError("expected 'memory' or a URL such as redis://host:6379/0")
    return text
