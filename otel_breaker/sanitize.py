"""One sanitiser and one length policy for every text otel-breaker emits.

Tool names, agent names and session ids come from frameworks, MCP servers and
users; exception messages come from failing tools. Any of them can carry
newlines, ANSI escapes, prompt markup (``<|im_start|>``, ``[INST]``), secrets or
megabytes. Each sink gets the same treatment, sized for what it is:

========================  =============================  ==========================
sink                      function                       bound
========================  =============================  ==========================
names a model reads       :func:`safe_name`              :data:`MAX_NAME_CHARS`
text a model reads        :func:`sanitize`               :data:`MAX_TEXT_CHARS`
span names, attributes,   :func:`bounded`                :data:`MAX_ATTRIBUTE_CHARS`
metric labels, terminal
exception text on spans   :func:`exception_message`,     :data:`MAX_EXCEPTION_CHARS`,
                          :func:`exception_stacktrace`   :data:`MAX_STACKTRACE_CHARS`
a line of our log         :func:`log_line`               :data:`MAX_LOG_CHARS`
========================  =============================  ==========================

This module is stdlib only and imports nothing from the package.
"""

from __future__ import annotations

import re
from typing import Any

from otel_breaker.patterns import LazyPattern

#: A tool, agent or fallback name, or a session id, in anything a model reads.
MAX_NAME_CHARS = 64
#: A sentence a model reads (a rejection's error, remediation, message).
MAX_TEXT_CHARS = 600
#: A span name, span or metric attribute value, or a cell the CLI prints.
MAX_ATTRIBUTE_CHARS = 256
#: ``exception.message`` and a span status description (content capture only).
MAX_EXCEPTION_CHARS = 1024
#: ``exception.stacktrace`` (content capture only); the innermost frames are kept.
MAX_STACKTRACE_CHARS = 4096
#: One line otel-breaker writes to its log (the ``otel_breaker`` logger).
MAX_LOG_CHARS = 1000
#: A piece of a user's value quoted in a log line or an error (a bad setting, an entry).
MAX_QUOTED_CHARS = 80
#: Fallback names listed in one rejection.
MAX_ALTERNATIVES = 5

ELLIPSIS = "…"

# ANSI/VT escape sequences (CSI, OSC, and two-character escapes), removed whole.
_ANSI = LazyPattern(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])|\x9b[0-?]*[ -/]*[@-~]")
# C0/C1 controls, DEL, zero-width and bidirectional format characters.
_CONTROL = LazyPattern(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
_MARKUP = LazyPattern(r"<\|?/?[A-Za-z_][\w\-|]*\|?>|\[/?(INST|SYS)\]|```|<<\s*/?SYS\s*>>", re.IGNORECASE)
_SPACES = LazyPattern(r"\s+")
_NOT_NAME = LazyPattern(r"[^\w.:/@+\-]")

# Obvious secrets in exception text: key=value pairs with secret-like keys,
# bearer tokens, credentials in URLs, and well-known key formats.
_SECRETS = (
    (
        LazyPattern(
            r"(?i)\b((?:api[_-]?key|access[_-]?key|secret|password|passwd|pwd|token|auth|authorization|"
            r"credentials?|private[_-]?key|session[_-]?key|client[_-]?secret)[\w\-]*[\"']?\s*[:=]\s*[\"']?)"
            r"(?:bearer\s+|basic\s+)?[^\s\"',;&}]+"
        ),
        r"\1***",
    ),
    (LazyPattern(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{8,}"), r"\1 ***"),
    (LazyPattern(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/@:]+:[^\s/@]+@"), r"\1***@"),
    (
        LazyPattern(
            r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{16,}|\bAKIA[0-9A-Z]{16}\b|\bgh[pousr]_[A-Za-z0-9]{20,}\b"
            r"|\bxox[abposr]-[A-Za-z0-9\-]{10,}|\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]+"
        ),
        "***",
    ),
)


def cap(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, marked with an ellipsis when cut."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 1)] + ELLIPSIS if limit > 0 else ""


def strip_controls(text: str) -> str:
    """``text`` without escape sequences; other control and format characters become spaces."""
    return _CONTROL.sub(" ", _ANSI.sub("", text))


def log_line(text: str, limit: int = MAX_LOG_CHARS) -> str:
    """One log line: no control characters (newlines included) or escape sequences,
    at most ``limit`` characters. A log is read in terminals and parsed line by line."""
    if len(text) <= limit and text.isprintable():
        return text
    if len(text) > 4 * limit:
        text = text[: 4 * limit]
    return cap(strip_controls(text), limit)


def quoted(value: Any, limit: int = MAX_QUOTED_CHARS) -> str:
    """``repr`` of a bounded, control-free piece of ``value``: how an error names the
    user's text without echoing all of it (a number is shown as it is)."""
    if not isinstance(value, str):
        return cap(strip_controls(repr(value)[: 4 * limit]), limit)
    text = value[: 4 * limit]
    return repr(cap(strip_controls(text), limit))


def bounded(value: Any, limit: int = MAX_ATTRIBUTE_CHARS) -> str:
    """A span name, attribute value, metric label or terminal cell: no control
    characters or escape sequences, at most ``limit`` characters.

    Plain short text (nearly every tool name) is returned as it is, cheaply.
    """
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit and text.isprintable():
        return text
    if len(text) > 4 * limit:
        text = text[: 4 * limit]  # never run the expressions over megabytes
    return cap(strip_controls(text), limit)


def sanitize(text: Any, limit: int = MAX_TEXT_CHARS) -> str:
    """Text a model reads: one line, no control characters or prompt-like
    markup, at most ``limit`` characters."""
    raw = str(text)
    if len(raw) > 4 * limit + 64:
        raw = raw[: 4 * limit + 64]
    cleaned = _MARKUP.sub("", strip_controls(raw))
    cleaned = _SPACES.sub(" ", cleaned).strip()
    return cap(cleaned, limit)


def safe_name(name: Any, limit: int = MAX_NAME_CHARS) -> str:
    """A tool, agent or fallback name (or a session id) fit for a prompt:
    letters, digits and ``_ . : / @ + -`` only, at most ``limit`` characters."""
    raw = str(name)[: 4 * limit]
    cleaned = _NOT_NAME.sub("_", _MARKUP.sub("", _ANSI.sub("", raw)))[:limit]
    return cleaned or "tool"


def optional_name(name: Any) -> str | None:
    """:func:`safe_name`, keeping ``None`` as ``None``."""
    return None if name is None else safe_name(name)


def redact(text: str) -> str:
    """``text`` with obvious secrets (keys, tokens, passwords, URL credentials) masked."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


def exception_message(exc: BaseException, limit: int = MAX_EXCEPTION_CHARS) -> str:
    """``str(exc)`` for a span: secrets masked, controls removed, capped."""
    try:
        text = str(exc)
    except Exception:  # a broken __str__ must not break the call path
        text = f"<{type(exc).__qualname__}>"
    return bounded(redact(text[: 4 * limit]), limit)


def exception_stacktrace(exc: BaseException, limit: int = MAX_STACKTRACE_CHARS) -> str:
    """The formatted traceback of ``exc`` for a span: secrets masked, capped to its
    last ``limit`` characters (the innermost frames and the message)."""
    try:
        import traceback  # loaded with the first stack trace kept, not with the package

        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:
        text = f"{type(exc).__qualname__}"
    if len(text) > 2 * limit:
        text = text[-2 * limit :]
    text = _ANSI.sub("", redact(text))
    text = re.sub(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", " ", text)  # newlines and tabs stay
    return text if len(text) <= limit else ELLIPSIS + text[-(limit - 1) :]
