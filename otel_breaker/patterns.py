"""Regular expressions compiled at their first use.

The sanitiser and the classifier hold a dozen patterns. Compiling them all when the
package loads costs milliseconds that every framework import would pay with
``OTEL_BREAKER_ENABLED`` on, before any tool call needs one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any


class LazyPattern:
    """``re.compile(source, flags)``, done the first time the pattern is used."""

    __slots__ = ("_compiled", "_flags", "_source")

    def __init__(self, source: str, flags: int = 0) -> None:
        self._source = source
        self._flags = flags
        self._compiled: re.Pattern[str] | None = None

    def _pattern(self) -> re.Pattern[str]:
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(self._source, self._flags)
        return compiled

    def sub(self, replacement: str | Callable[[re.Match[str]], str], text: str, count: int = 0) -> str:
        return self._pattern().sub(replacement, text, count)

    def search(self, text: str) -> re.Match[str] | None:
        return self._pattern().search(text)

    def __getattr__(self, name: str) -> Any:  # match, fullmatch, findall, ...: the compiled pattern's
        return getattr(self._pattern(), name)
