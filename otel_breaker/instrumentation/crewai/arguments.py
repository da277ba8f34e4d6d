"""CrewAI's check of the model's arguments: what it raises is the model's mistake.

CrewAI validates a tool call's arguments against the tool's schema before the tool
runs (``BaseTool._validate_kwargs`` on the native path, ``CrewStructuredTool._parse_args``
on the ReAct path). An error raised there says nothing about the tool's health, so the
breaker must not count it; the loop guard still does (``MISTAKE``), or a model repeating
the same invalid call is never told to stop.

An :class:`ArgumentCheck` is the ``wrapt`` wrapper of such a check. It keeps the error
the check raised last in this context, where the tool wrapper the error propagates to
reads it (:meth:`ArgumentCheck.exception_hint`), and tells ``then`` as well: on the
ReAct path CrewAI turns the error into a result, so the action in progress must learn
that its tool never ran.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

from otel_breaker.classify import MISTAKE


class ArgumentCheck:
    """The wrapper of a CrewAI function whose ``errors`` are the model's mistake.
    ``name`` names its context variable (``otel_breaker_crewai_...``)."""

    def __init__(
        self,
        name: str,
        errors: tuple[type[Exception], ...] = (ValueError,),
        then: Callable[[Exception], Any] | None = None,
    ) -> None:
        self._raised: contextvars.ContextVar[Exception | None] = contextvars.ContextVar(name, default=None)
        self.errors = errors
        self.then = then

    def __call__(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        try:
            return wrapped(*args, **kwargs)
        except self.errors as exc:
            # Not reset: the caller's tool wrapper reads it after the error has propagated.
            self._raised.set(exc)
            if self.then is not None:
                self.then(exc)
            raise

    def exception_hint(self, exc: BaseException) -> str | None:
        """``MISTAKE`` for the error this check raised (propagated out of the tool), else None."""
        if exc is self._raised.get():
            return MISTAKE
        return None
