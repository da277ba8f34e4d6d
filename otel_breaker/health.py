"""Health checks for open breakers, run in the background, never inside a tool call.

A tool may register ``health_check`` (a sync or async callable returning bool)
in its config. While its breaker is open, the check runs every
``health_check_interval`` seconds: a passing check moves the breaker to
half-open early (the next call is a probe); a failing or raising one keeps it
open. Without a check, recovery is by probe alone.

Sync checks run on one daemon thread shared by all breakers. An async check
runs on the event loop that was running when its breaker opened (or on its own
loop if that one is gone).
"""

from __future__ import annotations

import asyncio
import heapq
import inspect
import itertools
import logging
import os
import threading
import weakref
from typing import Any

from otel_breaker.breaker import CircuitBreaker, State, StateChange, add_global_listener

logger = logging.getLogger("otel_breaker")

_MAX_WAIT = 0.5


class HealthMonitor:
    """Schedules and runs the health checks of open breakers."""

    def __init__(self, *, background: bool = True) -> None:
        self._background = background
        self._lock = threading.Condition()
        self._queue: list[tuple[float, int, weakref.ref, Any]] = []
        self._sequence = itertools.count()
        self._thread: threading.Thread | None = None
        _MONITORS.add(self)

    def on_transition(self, change: StateChange) -> None:
        """Global listener: start checking a breaker when it opens."""
        breaker = change.breaker
        config = breaker.config
        if change.to_state is not State.OPEN or config.health_check is None or not config.enable_health_check:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        self.schedule(breaker, loop)

    def schedule(self, breaker: CircuitBreaker, loop: Any = None) -> None:
        due = breaker.clock() + breaker.config.health_check_interval
        with self._lock:
            heapq.heappush(self._queue, (due, next(self._sequence), weakref.ref(breaker), loop))
            self._lock.notify()
        if self._background and self._thread is None:
            self._start()

    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def run_pending(self) -> int:
        """Run every check that is due by its breaker's clock. Returns how many ran."""
        ran = 0
        while True:
            with self._lock:
                entry = self._pop_due()
            if entry is None:
                return ran
            self._check(entry)
            ran += 1

    def _pop_due(self) -> tuple | None:
        while self._queue:
            due, _, ref, _loop = self._queue[0]
            breaker = ref()
            if breaker is None or breaker.state is not State.OPEN:
                heapq.heappop(self._queue)  # gone, or recovered some other way
                continue
            if breaker.clock() < due:
                return None
            return heapq.heappop(self._queue)
        return None

    def _check(self, entry: tuple) -> None:
        _, _, ref, loop = entry
        breaker = ref()
        if breaker is None:
            return
        check = breaker.config.health_check
        passed = False
        try:
            result = check() if check is not None else False
            if inspect.isawaitable(result):
                passed = bool(self._await(result, loop, breaker.config.timeout))
            else:
                passed = bool(result)
        except Exception:
            logger.debug("otel-breaker: health check of %r raised; keeping it open", breaker.name, exc_info=True)
        if passed and breaker.health_check_passed():
            return
        if breaker.state is State.OPEN:
            self.schedule(breaker, loop)

    @staticmethod
    def _await(awaitable: Any, loop: Any, timeout: float | None) -> Any:
        async def run() -> Any:
            return await awaitable

        if loop is not None and loop.is_running() and not loop.is_closed():
            try:
                asyncio.get_running_loop()
                in_loop = True
            except RuntimeError:
                in_loop = False
            if not in_loop:
                return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout)
        return asyncio.run(run())

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._loop, name="otel-breaker-health", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            try:
                self.run_pending()
            except Exception:
                logger.exception("otel-breaker: health checks failed")
            with self._lock:
                self._lock.wait(_MAX_WAIT)

    def _after_fork(self) -> None:
        """In a forked child the checking thread is gone, its lock may be held
        by a thread that no longer exists, and event loops of other threads no
        longer run: start over, with the checks that were pending."""
        self._lock = threading.Condition()
        self._thread = None
        self._queue = [(due, seq, ref, None) for due, seq, ref, _loop in self._queue]
        heapq.heapify(self._queue)
        if self._background and self._queue:
            self._start()


_MONITORS: weakref.WeakSet[HealthMonitor] = weakref.WeakSet()


def _reinit_after_fork() -> None:
    for monitor in list(_MONITORS):
        monitor._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)

MONITOR = HealthMonitor()


def install() -> None:
    """Start health checks of breakers that open (the package does this on import;
    calling it again changes nothing)."""
    add_global_listener(MONITOR.on_transition)
