"""Recent call durations per breaker, for the board's latency (p50, p99) over the last minute.

An operator's board shows how long each tool's calls take, as Hystrix and
resilience4j show it. Timing every call costs two clock reads, so durations are
kept only while something shows them: a status endpoint or board switches the
recorder on (:meth:`LatencyRecorder.enable`). Until then the call path does not
time a call it has no other reason to time.

Per breaker, at most :data:`MAX_SAMPLES` of the most recent durations are kept
with the second each ended in; percentiles are read over the last
:data:`SPAN_S` seconds. The samples go with the breaker (weak keys).

A shared store also wants durations, to report them to the fleet's board: while
it collects (:meth:`LatencyRecorder.collect`), each call of a breaker with a
storage is also counted in the fixed buckets of
:data:`~otel_breaker.semconv.DURATION_BUCKETS` (the duration metric's, so the
fleet board and the dashboards agree), which the store takes and empties at each
report. Buckets add up across workers exactly, where percentiles would not.
"""

from __future__ import annotations

import math
import os
import threading
import time
import weakref
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from otel_breaker.semconv import DURATION_BUCKETS

#: Durations kept per breaker (the most recent).
MAX_SAMPLES = 256
#: Seconds the percentiles are read over.
SPAN_S = 60.0
#: Buckets a duration is counted in for a shared store: one per bound, and one above the last.
BUCKET_COUNT = len(DURATION_BUCKETS) + 1


class LatencyRecorder:
    """Call durations per breaker while a board or status endpoint shows them, or a
    shared store reports them."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        #: Whether the call path times calls: something shows or reports durations.
        self.enabled = False
        #: A status endpoint or board shows percentiles: samples are kept.
        self.showing = False
        self._collectors = 0
        self._samples: weakref.WeakKeyDictionary[Any, deque[tuple[float, float]]] = weakref.WeakKeyDictionary()
        self._counts: weakref.WeakKeyDictionary[Any, list[int]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def enable(self) -> None:
        """Start keeping durations (a status endpoint or board started)."""
        with self._lock:
            self.showing = True
            self.enabled = True

    def disable(self) -> None:
        """Stop keeping samples, and forget them; calls stay timed while a store collects."""
        with self._lock:
            self.showing = False
            self.enabled = self._collectors > 0
            self._samples.clear()

    def collect(self) -> None:
        """A shared store starts reporting durations: count them in buckets until it stops."""
        with self._lock:
            self._collectors += 1
            self.enabled = True

    def stop_collecting(self) -> None:
        """A shared store stopped reporting; when it was the last, the buckets are dropped."""
        with self._lock:
            self._collectors = max(0, self._collectors - 1)
            if not self._collectors:
                self._counts.clear()
                self.enabled = self.showing

    def record(self, breaker: Any, seconds: float) -> None:
        """One call of ``breaker``'s tool that ran for ``seconds``. Never raises."""
        if not self.enabled or not seconds >= 0:
            return
        try:
            now = self.clock()
            with self._lock:
                if self.showing:
                    samples = self._samples.get(breaker)
                    if samples is None:
                        samples = self._samples[breaker] = deque(maxlen=MAX_SAMPLES)
                    samples.append((now, seconds))
                # Only a breaker with a shared storage is reported; the others' counts would never be taken.
                if self._collectors and getattr(breaker, "storage", None) is not None:
                    counts = self._counts.get(breaker)
                    if counts is None:
                        counts = self._counts[breaker] = [0] * BUCKET_COUNT
                    counts[bucket_of(seconds)] += 1
        except Exception:  # a breaker that cannot be a weak key: no latency for it
            return

    def take_counts(self, breaker: Any) -> list[int] | None:
        """``breaker``'s bucket counts since the last take (None when it had no call), and start over."""
        with self._lock:
            return self._counts.pop(breaker, None)

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


def bucket_of(seconds: float) -> int:
    """The bucket a duration counts in: the first whose bound is at least ``seconds``
    (a bound belongs to its own bucket, as a Prometheus ``le`` bucket's does)."""
    return bisect_left(DURATION_BUCKETS, seconds)


def bucket_quantile(counts: Sequence[int], share: float) -> float | None:
    """The ``share`` quantile (0.5, 0.99) in seconds of durations counted in buckets, as
    Prometheus's ``histogram_quantile`` estimates it from the same buckets: linear within
    the bucket the rank falls in; in the bucket above the last bound, that bound. None
    without any duration."""
    total = sum(counts)
    if total <= 0:
        return None
    rank = share * total
    below = 0
    lower = 0.0
    for index, count in enumerate(counts):
        if index >= len(DURATION_BUCKETS):
            return lower  # above the last bound nothing is known but the bound
        upper = DURATION_BUCKETS[index]
        if count and below + count >= rank:
            return lower + (upper - lower) * (rank - below) / count
        below += count
        lower = upper
    return lower


def _rank(ordered: list[float], share: float) -> float:
    """The nearest-rank percentile of an ordered list."""
    index = max(0, math.ceil(share * len(ordered)) - 1)
    return ordered[index]


LATENCY = LatencyRecorder()


def _reinit_after_fork() -> None:
    """A lock another thread held at a fork stays held in the child: replace it. The
    bucket counts not yet reported are the parent's to report, not the child's too."""
    LATENCY._lock = threading.Lock()
    LATENCY._counts.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)
