"""Recent call durations per breaker, for the board's latency (p50, p99) over the last minute.

An operator's board shows how long each tool's calls take, as Hystrix and
resilience4j show it. Timing every call costs two clock reads, so durations are
kept only while something shows them: a status endpoint or board switches the
recorder on (:meth:`LatencyRecorder.enable`). Until then the call path does not
time a call it has no other reason to time.

Per breaker, at most :data:`MAX_SAMPLES` of the most recent durations are kept
with the second each ended in; percentiles are read over the last
:data:`SPAN_S` seconds. The samples go with the breaker (weak keys).
"""

from __future__ import annotations

import math
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

#: Durations kept per breaker (the most recent).
MAX_SAMPLES = 256
#: Seconds the percentiles are read over.
SPAN_S = 60.0


class LatencyRecorder:
    """Call durations per breaker while a board or status endpoint shows them."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.enabled = False
        self._samples: weakref.WeakKeyDictionary[Any, deque[tuple[float, float]]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def enable(self) -> None:
        """Start keeping durations (a status endpoint or board started)."""
        self.enabled = True

    def disable(self) -> None:
        """Stop, and forget what was kept."""
        self.enabled = False
        with self._lock:
            self._samples.clear()

    def record(self, breaker: Any, seconds: float) -> None:
        """One call of ``breaker``'s tool that ran for ``seconds``. Never raises."""
        if not self.enabled or not seconds >= 0:
            return
        try:
            now = self.clock()
            with self._lock:
                samples = self._samples.get(breaker)
                if samples is None:
                    samples = self._samples[breaker] = deque(maxlen=MAX_SAMPLES)
                samples.append((now, seconds))
        except Exception:  # a breaker that cannot be a weak key: no latency for it
            return

    def percentiles(self, breaker: Any, now: float | None = None) -> tuple[float, float] | None:
        """(p50, p99) in seconds of ``breaker``'s calls in the last :data:`SPAN_S` seconds,
        None when it had none (nearest-rank percentiles)."""
        now = self.clock() if now is None else now
        with self._lock:
            samples = self._samples.get(breaker)
            recent = [seconds for ended, seconds in samples if now - ended <= SPAN_S] if samples else []
        if not recent:
            return None
        recent.sort()
        return _rank(recent, 0.50), _rank(recent, 0.99)


def _rank(ordered: list[float], share: float) -> float:
    """The nearest-rank percentile of an ordered list."""
    index = max(0, math.ceil(share * len(ordered)) - 1)
    return ordered[index]


LATENCY = LatencyRecorder()


def _reinit_after_fork() -> None:
    """A lock another thread held at a fork stays held in the child: replace it."""
    LATENCY._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)
