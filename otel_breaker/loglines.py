"""Every line the ``otel_breaker`` logger writes is bounded and free of control characters.

Log messages quote the user's text (a bad setting, an address, an exception from a
client library). Each call site keeps its quotes short; this filter is the promise
for all of them: whatever a message would have said, the record leaves with at most
:data:`~otel_breaker.sanitize.MAX_LOG_CHARS` characters and no newline, escape
sequence or other control character. A traceback attached to a debug record keeps
its lines, each bounded the same way. Records below the logger's level are never
created, so the filter costs nothing for them.

The modules a framework's import loads log through :data:`logger`, which creates the
logger (and installs the filter) at its first use: ``logging`` costs a framework that
does not load it itself (LangChain's core) several milliseconds. Everything else
installs the filter when it loads (the call path, the settings).
"""

from __future__ import annotations

import sys
from typing import Any

LOGGER_NAME = "otel_breaker"

_FILTER: list[Any] = []


def install() -> Any:
    """Put the filter on the ``otel_breaker`` logger (once); the logger."""
    import logging
    import traceback

    from otel_breaker.sanitize import MAX_STACKTRACE_CHARS, log_line

    if not _FILTER:

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

        _FILTER.append(BoundedLines())
    logger = logging.getLogger(LOGGER_NAME)
    if _FILTER[0] not in logger.filters:
        logger.addFilter(_FILTER[0])
    return logger


class _Logger:
    """The ``otel_breaker`` logger, made (with the filter) at its first use; each method
    is looked up once, then read as a plain attribute. Until the program imports
    ``logging``, no handler and no level can exist to want a debug or info record, so
    those are dropped without loading it; a warning loads it (and reaches stderr)."""

    def debug(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        if "logging" in sys.modules:
            self.__getattr__("debug")(msg, *args, **kwargs)

    def info(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        if "logging" in sys.modules:
            self.__getattr__("info")(msg, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        value = getattr(install(), name)
        if name in ("debug", "info", "warning", "error", "exception", "critical", "log", "isEnabledFor"):
            self.__dict__[name] = value
        return value


#: The ``otel_breaker`` logger for the modules a framework's import loads.
logger: Any = _Logger()
