"""Every line the ``otel_breaker`` logger writes is bounded and free of control characters.

Log messages quote the user's text (a bad setting, an address, an exception from a
client library). Each call site keeps its quotes short; this filter is the promise
for all of them: whatever a message would have said, the record leaves with at most
:data:`~otel_breaker.sanitize.MAX_LOG_CHARS` characters and no newline, escape
sequence or other control character. A traceback attached to a debug record keeps
its lines, each bounded the same way. Records below the logger's level are never
created, so the filter costs nothing for them.

The filter is attached here, where the logger is made, and the package's
``__init__`` imports this module: whichever of ``logging`` and ``otel_breaker`` a
program imports first, and whichever module of ours logs, every record of the
``otel_breaker`` logger passes the filter.
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
            record.msg = clean
            record.args = None
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            text = "".join(traceback.format_exception(*record.exc_info))[-MAX_STACKTRACE_CHARS:]
            record.exc_text = "\n".join(log_line(line) for line in text.splitlines())
        return True


def bounded_logger(name: str = LOGGER_NAME) -> logging.Logger:
    """The logger ``name`` with the filter on it (added once, whoever asks first).

    A filter on a logger sees only the records logged on that logger, not those a
    child logger propagates to it, so every module of ours logs on this one name."""
    made = logging.getLogger(name)
    if not any(isinstance(existing, BoundedLines) for existing in made.filters):
        made.addFilter(BoundedLines())
    return made


#: The ``otel_breaker`` logger every module of the package logs on.
logger = bounded_logger()


_bookkeeping_warned = False


def bookkeeping_failed(where: str) -> None:
    """Log a failure of our own bookkeeping, loudly the first time and at debug level after:
    the call goes on unguarded (the middleware never turns a healthy call into a failure),
    and a fault hit on every call must not flood the user's log."""
    global _bookkeeping_warned
    if not _bookkeeping_warned:
        _bookkeeping_warned = True
        logger.exception("otel-breaker: %s failed; the call runs unguarded (logged once)", where)
    else:
        logger.debug("otel-breaker: %s failed", where, exc_info=True)
