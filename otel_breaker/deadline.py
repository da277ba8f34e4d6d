"""Cancel async tool calls that run past their breaker's timeout, cheaply.

``asyncio.timeout`` schedules and cancels a timer per call, which costs
microseconds, more than the rest of a guarded call together. Tool timeouts are
long (30 s by default) and nearly never fire, so instead each event loop keeps
one timer for the earliest deadline of all calls in flight; starting and
finishing a call is a dictionary insert and delete. The timer stays armed when
calls finish, so back-to-back calls never touch the loop's timer heap.
"""

from __future__ import annotations

import logging
import os
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

logger = logging.getLogger("otel_breaker")


class Deadline:
    """One async call's deadline; ``expired`` once the watch cancelled its task."""

    __slots__ = ("at", "expired", "task", "watch")

    def __init__(self, watch: _LoopWatch, task: asyncio.Task, at: float) -> None:
        self.watch = watch
        self.task = task
        self.at = at
        self.expired = False


class _LoopWatch:
    """Deadlines of the calls in flight on one event loop, and one timer for the earliest."""

    __slots__ = ("entries", "handle", "loop", "next_at")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.entries: dict[Deadline, None] = {}
        self.handle: asyncio.TimerHandle | None = None
        self.next_at = float("inf")

    def arm(self, at: float) -> None:
        if self.handle is not None:
            self.handle.cancel()
        self.next_at = at
        self.handle = self.loop.call_at(at, self.fire)

    def fire(self) -> None:
        self.handle = None
        self.next_at = float("inf")
        now = self.loop.time()
        earliest = float("inf")
        for deadline in list(self.entries):
            if deadline.at <= now:
                if not deadline.expired:
                    deadline.expired = True
                    deadline.task.cancel()
            elif deadline.at < earliest:
                earliest = deadline.at
        if earliest != float("inf"):
            self.arm(earliest)


_ATTRIBUTE = "_otel_breaker_deadlines"
# For event loops that take no attributes (e.g. uvloop); weak, so closed loops go.
_watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopWatch] = weakref.WeakKeyDictionary()


def _forget_after_fork() -> None:
    """Event loops of other threads do not run in a forked child: forget their watches."""
    _watches.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _watch_of(loop: asyncio.AbstractEventLoop) -> _LoopWatch:
    watch = getattr(loop, _ATTRIBUTE, None)
    if watch is None:
        watch = _watches.get(loop)
        if watch is None:
            watch = _LoopWatch(loop)
            try:
                setattr(loop, _ATTRIBUTE, watch)
            except AttributeError:
                _watches[loop] = watch
    return watch


def start(timeout: float) -> Deadline | None:
    """Watch the current task for ``timeout`` seconds (None outside an asyncio
    task, e.g. under trio: then :func:`foreign_scope` applies the timeout)."""
    import asyncio  # only timed calls reach this (a framework's import does not pay for asyncio)

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    task = asyncio.current_task(loop)
    if task is None:
        return None
    watch = _watch_of(loop)
    deadline = Deadline(watch, task, loop.time() + timeout)
    watch.entries[deadline] = None
    if deadline.at < watch.next_at:
        watch.arm(deadline.at)
    return deadline


def finish(deadline: Deadline) -> None:
    """The call ended: stop watching it (the loop's timer stays armed)."""
    del deadline.watch.entries[deadline]


def consume_cancellation(deadline: Deadline) -> bool:
    """Take back our cancellation request. After a CancelledError: True when it
    was our timeout alone (the caller raises a timeout error instead), False
    when someone else cancelled too. Also called when a call swallowed our
    cancellation and returned, so its task is not left marked as cancelling."""
    if not deadline.expired:
        return False
    uncancel = getattr(deadline.task, "uncancel", None)
    if uncancel is None:  # Python 3.10: no cancellation counting
        return True
    return uncancel() == 0


# -- event loops other than asyncio (trio, through anyio) --------------------------------------

_unsupported_logged = False


def foreign_scope(timeout: float) -> Any:
    """An anyio ``CancelScope`` that cancels the awaited call after ``timeout``
    seconds on whatever event loop runs it (trio included), or None when no
    timeout can be applied here; that is logged once and the call runs without one."""
    global _unsupported_logged
    try:
        import anyio

        return anyio.CancelScope(deadline=anyio.current_time() + timeout)
    except Exception as exc:
        if not _unsupported_logged:
            _unsupported_logged = True
            logger.warning(
                "otel-breaker: tool timeouts are not supported on this event loop (%s); calls run without one",
                type(exc).__name__,
            )
        return None
