"""Every line the ``otel_breaker`` logger writes is bounded and free of control characters.

Log messages quote the user's text (a bad setting, an address, an exception from a
client library). Each call site keeps its quotes short; this filter is the promise
for all of them: whatever a message would have said, the record leaves with at most
:data:`~otel_breaker.sanitize.MAX_LOG_CHARS` characters and no newline, escape
sequence or other control character. A traceback attached to a debug record keeps
its lines, each bounded the same way. Records below the logger's level are never
created, so the filter costs nothing for them.
"""

from __future__ import annotations

import logging
import traceback

from otel_breaker.sanitize import MAX_STACKTRACE_CHARS, log_line

LOGGER_NAME = "otel_breaker"


class BoundedLines(logging.Filter):
    """Rewrites a record's message (and traceback text) to bounded, clean lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed call: logging reports it as it always does
            return True
        clean = log_line(message)
        if clean != message or record.args:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            text = "".join(traceback.format_exception(*record.exc_info))[-MAX_STACKTRACE_CHARS:]
            record.exc_text = "\n".join(log_line(line) for line in text.splitlines())
        return True


_FILTER = BoundedLines()


def install() -> None:
    """Put the filter on the ``otel_breaker`` logger (once)."""
    logger = logging.getLogger(LOGGER_NAME)
    if not any(isinstance(existing, BoundedLines) for existing in logger.filters):
        logger.addFilter(_FILTER)
