"""A run around a framework call whose result decides how long the run lasts.

Some frameworks start a run with one method that returns a value, a coroutine, a
generator or an async generator depending on its arguments (Agno's ``Agent.run`` with
``stream=True``, ``arun`` without ``await``). A ``run_patch`` needs the kind up front;
:func:`run_around` looks at what came back instead: a value ends the run at once, a
coroutine is a run while it is awaited, a stream is a run step by step
(:func:`~otel_breaker.runs.steps_in_run`) and ends with its last item.
"""

from __future__ import annotations

import inspect
from collections.abc import Coroutine
from typing import Any

from otel_breaker.runs import Run, async_steps_in_run, close_run, enter, leave, open_run, run_closed, steps_in_run


def run_around(wrapped: Any, args: tuple, kwargs: dict, framework: str) -> Any:
    """Call ``wrapped`` as a run of ``framework`` (joining one open already), the run
    lasting as long as the call's result is being consumed."""
    opened, token = open_run(framework=framework)
    if token is None:
        return wrapped(*args, **kwargs)
    try:
        result = wrapped(*args, **kwargs)
    except BaseException:
        close_run(token)
        raise
    if inspect.iscoroutine(result):
        token.var.reset(token)
        return awaited_in_run(result, opened)
    if inspect.isgenerator(result):
        token.var.reset(token)
        return steps_in_run(result, opened)
    if inspect.isasyncgen(result):
        token.var.reset(token)
        return async_steps_in_run(result, opened)
    close_run(token)
    return result


async def awaited_in_run(coroutine: Coroutine[Any, Any, Any], opened: Run) -> Any:
    """``coroutine``'s result, awaited inside ``opened``; the run ends with it."""
    token = enter(opened)
    try:
        return await coroutine
    finally:
        leave(token)
        run_closed(opened)


def as_run(framework: str) -> Any:
    """A ``PatchTarget`` wrapper that makes the wrapped method a run (:func:`run_around`)."""

    def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        return run_around(wrapped, args, kwargs, framework)

    return wrapper
