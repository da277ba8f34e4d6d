"""Awaiting a blocking Redis call from any event loop: asyncio, uvloop, trio (directly or through anyio).

The store runs its sync client in a small thread pool so no event loop waits on a
socket. Awaiting that pool's future is the only part that depends on the loop:
asyncio awaits it through ``run_in_executor``; trio has no such call, so the task
sleeps until the future's done-callback wakes it through trio's token. A loop that
is neither (a bare coroutine driver) gets the call made inline: slower for that
loop, but the decision is still shared, never mistaken for a Redis outage.
"""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

T = TypeVar("T")


def running_asyncio() -> bool:
    """Whether this coroutine runs in an asyncio (or uvloop) event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def run_blocking(executor: Executor, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in ``executor``, awaited the way the running event loop awaits."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is not None:
        return await loop.run_in_executor(executor, functools.partial(fn, *args))
    trio = sys.modules.get("trio")  # a trio loop has imported trio; nothing to import otherwise
    if trio is not None:
        try:
            token = trio.lowlevel.current_trio_token()
        except RuntimeError:
            token = None
        if token is not None:
            return await _in_trio(trio, token, executor.submit(fn, *args))
    return fn(*args)


async def _in_trio(trio: Any, token: Any, future: Future[T]) -> T:
    """Sleep until ``future`` is done. A cancellation waits for the call in flight (a
    script is never left running behind the caller's back, and the pool's thread is not
    abandoned), then raises as trio raises it, as asyncio raises its ``CancelledError``."""
    task = trio.lowlevel.current_task()
    cancelled: list[Callable[[], Any]] = []

    def abort(raise_cancel: Callable[[], Any]) -> Any:
        cancelled.append(raise_cancel)
        return trio.lowlevel.Abort.FAILED  # woken by ``wake`` when the call is done

    def wake(_: Future[T]) -> None:
        try:
            token.run_sync_soon(trio.lowlevel.reschedule, task)
        except trio.RunFinishedError:  # pragma: no cover - the loop ended meanwhile
            pass

    future.add_done_callback(wake)
    await trio.lowlevel.wait_task_rescheduled(abort)
    result = future.result()
    if cancelled:
        cancelled[0]()  # raises trio.Cancelled
    return result
