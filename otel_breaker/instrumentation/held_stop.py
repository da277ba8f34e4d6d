"""A loop stop held past a framework that drops a ``BaseException`` in its tasks.

``loop_action=stop`` raises :class:`~otel_breaker.loops.ToolLoopError` where the
call runs. Some frameworks run each tool call in a task whose errors they turn
into results, or drop (Strands' concurrent executor): the stop would never reach
the caller of the run. The adapter then holds it, keyed by the run's owner (the
agent, weakly), ends the run the framework's own way, and the run's boundary
raises it: :func:`hold` where the call ran, :func:`raising_held` around the run's
event stream.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator
from typing import Any

from otel_breaker.loops import ToolLoopError

_held: weakref.WeakKeyDictionary[Any, ToolLoopError] = weakref.WeakKeyDictionary()


def hold(owner: Any, error: ToolLoopError) -> None:
    """Keep ``error`` for ``owner``'s run boundary (raises TypeError for an owner that
    cannot be held weakly: the caller raises the error as it is then)."""
    _held[owner] = error


async def raising_held(stream: AsyncIterator[Any], owner: Any) -> AsyncIterator[Any]:
    """``stream``'s events; then the loop stop held for ``owner`` during it, if any."""
    try:
        async for event in stream:
            yield event
    finally:
        try:
            error = _held.pop(owner, None)
        except TypeError:
            error = None
    if error is not None:
        raise error
