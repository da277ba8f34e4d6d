"""A framework's check of the model's arguments: what it raises is the model's mistake.

Frameworks validate a tool call's arguments against the tool's schema before the tool
runs. An error raised there says nothing about the tool's health, so the breaker must
not count it; the loop guard still does (``MISTAKE``), or a model repeating the same
invalid call is never told to stop. A :class:`Validator` is the ``wrapt`` wrapper of
such a check (a ``PatchTarget``'s): it keeps the error the check raised last in this
context, where the tool wrapper the error propagates to reads it (:meth:`exception_hint`),
and tells ``then`` as well, for a framework that turns the error into a result.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

from otel_breaker.classify import MISTAKE


class Validator:
    """The wrapper of a framework function whose ``errors`` are the model's mistake.
    ``name`` names its context variable (``otel_breaker_<framework>_...``)."""

    def __init__(
        self,
        name: str,
        errors: tuple[type[Exception], ...] = (ValueError,),
        then: Callable[[Exception], Any] | None = None,
    ) -> None:
        self._raised: contextvars.ContextVar[Exception | None] = contextvars.ContextVar(name, default=None)
        self.errors, self.then = errors, then

    def __call__(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        try:
            return wrapped(*args, **kwargs)
        except self.errors as exc:
            self._raised.set(exc)  # not reset: the caller's tool wrapper reads it after the raise
            if self.then is not None:
                self.then(exc)
            raise

    def exception_hint(self, exc: BaseException) -> str | None:
        """``MISTAKE`` for the error this check raised (propagated out of the tool), else None."""
        return MISTAKE if exc is self._raised.get() else None
