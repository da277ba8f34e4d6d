"""How long a failed call's server asked us to wait: the retry hint.

A rate-limited API says when to come back (HTTP 429 or 503 with ``Retry-After``,
``x-ratelimit-reset*`` headers, a ``retry_after`` attribute on an SDK error).
Calling it again before then is certain to fail and costs a model turn each
time, so a failure that carries a hint opens the breaker at once, for as long
as the server asked (capped at ``max_recovery_timeout``).

The readers are duck-typed: ``httpx``, ``requests``, ``aiohttp`` and the
``openai``/``anthropic`` SDKs are never imported here, only their exceptions'
attributes read (``exc.response.status_code``/``.headers``, ``exc.status``,
``exc.headers``). A hint that is negative, zero, a date in the past, not a
number or a date, or not finite is no hint; one that is enormous is returned
as read and capped by the breaker. Nothing here ever raises.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("otel_breaker")

#: A reader: the seconds to wait that an exception carries, or None.
RetryHintReader = Callable[[BaseException], "float | None"]

#: HTTP statuses whose ``Retry-After`` means "the service asks you to wait".
HINT_STATUSES = frozenset({429, 503})
#: Above this a bare number in a reset header is a Unix time, not a duration.
_EPOCH_FLOOR = 1_000_000_000.0
#: How many headers are looked at for ``x-ratelimit-reset*`` (a response is not a trust boundary
#: we control: a huge header list must not cost more than this).
_MAX_HEADERS = 200
#: How deep the ``__cause__``/``__context__`` chain is followed (frameworks wrap errors).
_MAX_CHAIN = 4
_DATA_KEYS = ("retry_after", "retryAfter", "retry_after_s", "retry_after_seconds", "retry-after", "Retry-After")
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+(?:\.\d+)?)ms)?$")

_readers: list[RetryHintReader] = []


def register_retry_hint(reader: RetryHintReader) -> RetryHintReader:
    """Add a reader of retry hints (usable as a decorator).

    ``reader(exc)`` returns the seconds the failed call's service asked to wait,
    or None. Registered readers are asked before the built-in ones, newest first;
    a reader that raises or returns a bad value is skipped (logged at debug).
    """
    _readers.insert(0, reader)
    return reader


def unregister_retry_hint(reader: RetryHintReader) -> None:
    """Remove a reader added with :func:`register_retry_hint` (absent: nothing happens)."""
    try:
        _readers.remove(reader)
    except ValueError:
        pass


def retry_hint(exc: BaseException, wall: Callable[[], float] = time.time) -> float | None:
    """Seconds ``exc`` asks to wait before calling again, or None when it carries no hint.

    ``wall`` is the wall clock (an HTTP date and a Unix reset time are wall times).
    The exception and up to a few of its causes are read.
    """
    try:
        seen = 0
        current: BaseException | None = exc
        while current is not None and seen < _MAX_CHAIN:
            for reader in _readers:
                try:
                    found = _valid(reader(current))
                except Exception:
                    logger.debug("otel-breaker: retry hint reader %r failed", reader, exc_info=True)
                    found = None
                if found is not None:
                    return found
            found = _builtin(current, wall)
            if found is not None:
                return found
            seen += 1
            current = current.__cause__ or current.__context__
    except Exception:
        logger.debug("otel-breaker: reading a retry hint failed", exc_info=True)
    return None


def _valid(value: Any) -> float | None:
    """A positive number of seconds (infinity allowed: the breaker caps it), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    seconds = float(value)
    if math.isnan(seconds) or seconds <= 0:
        return None
    return seconds


def _builtin(exc: BaseException, wall: Callable[[], float]) -> float | None:
    found = _valid(getattr(exc, "retry_after", None))
    if found is not None:
        return found
    found = _from_response(exc, wall)
    if found is not None:
        return found
    return _from_data(exc)


def _status(*objects: Any) -> int | None:
    for obj in objects:
        if obj is None:
            continue
        for name in ("status_code", "status"):
            value = getattr(obj, name, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def _from_response(exc: BaseException, wall: Callable[[], float]) -> float | None:
    """``Retry-After`` (or a reset header) of a 429/503 answer the exception carries."""
    response = getattr(exc, "response", None)
    status = _status(exc, response)
    if status not in HINT_STATUSES:
        return None
    headers = getattr(response, "headers", None) if response is not None else None
    if headers is None:
        headers = getattr(exc, "headers", None)
    if headers is None:
        return None
    found = _valid(_number(_header(headers, "retry-after-ms")))
    if found is not None:
        return found / 1000.0
    found = _http_retry_after(_header(headers, "retry-after"), wall)
    if found is not None:
        return found
    return _reset_headers(headers, wall)


def _header(headers: Any, name: str) -> str | None:
    """A header's value, case-insensitively, from any mapping-like headers object."""
    try:
        value = headers.get(name)
        if value is None:
            value = headers.get(name.title())
        if value is None and hasattr(headers, "items"):
            for count, (key, val) in enumerate(headers.items()):
                if count >= _MAX_HEADERS:
                    break
                if isinstance(key, str) and key.lower() == name:
                    value = val
                    break
    except Exception:
        return None
    return value if isinstance(value, str) else None


def _number(text: str | None) -> float | None:
    if text is None or len(text) > 64:
        return None
    try:
        return float(text.strip())
    except ValueError:
        return None


def _http_retry_after(text: str | None, wall: Callable[[], float]) -> float | None:
    """``Retry-After``: delay-seconds or an HTTP date (RFC 9110 section 10.2.3)."""
    if text is None or len(text) > 64:
        return None
    seconds = _number(text)
    if seconds is not None:
        return _valid(seconds)
    from email.utils import parsedate_to_datetime  # only for a date (``email`` costs a framework's import)

    try:
        when = parsedate_to_datetime(text.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:
        return None
    try:
        return _valid(when.timestamp() - wall())
    except (OverflowError, OSError, ValueError):
        return None


def _reset_headers(headers: Any, wall: Callable[[], float]) -> float | None:
    """The longest of the ``x-ratelimit-reset*`` headers: seconds, a duration such as
    ``6m0s`` or ``20ms`` (OpenAI), or a Unix time. Which limit was hit is not said,
    so the longest wait is the one that is sure to be over."""
    if not hasattr(headers, "items"):
        return None
    longest: float | None = None
    try:
        for count, (key, value) in enumerate(headers.items()):
            if count >= _MAX_HEADERS:
                break
            if not isinstance(key, str) or not key.lower().startswith("x-ratelimit-reset"):
                continue
            seconds = _reset_value(value, wall)
            if seconds is not None and (longest is None or seconds > longest):
                longest = seconds
    except Exception:
        return longest
    return longest


def _reset_value(value: Any, wall: Callable[[], float]) -> float | None:
    if not isinstance(value, str) or len(value) > 64:
        return None
    text = value.strip()
    number = _number(text)
    if number is not None:
        if number >= _EPOCH_FLOOR:
            return _valid(number - wall())
        return _valid(number)
    match = _DURATION.match(text)
    if match is None or not any(match.groups()):
        return None
    hours, minutes, seconds, millis = (float(g) if g else 0.0 for g in match.groups())
    return _valid(hours * 3600 + minutes * 60 + seconds + millis / 1000.0)


def _from_data(exc: BaseException) -> float | None:
    """An MCP error (``McpError.error.data``, or ``exc.data``) whose data carries a retry time."""
    for holder in (getattr(exc, "error", None), exc):
        data = getattr(holder, "data", None) if holder is not None else None
        if isinstance(data, dict):
            for key in _DATA_KEYS:
                value = data.get(key)
                if isinstance(value, str):
                    value = _number(value)
                found = _valid(value)
                if found is not None:
                    return found
    return None
