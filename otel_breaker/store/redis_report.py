"""Each worker's rejections and call durations, added to the shared breakers about once a second.

A worker rejects the calls of an open tool from its mirror of the shared state,
without a round trip, and times calls in its own memory; the fleet's board
reads only the store. So a daemon thread of each store (started with its first
breaker, again in a forked child) sends, every ``interval`` seconds, what its
breakers counted since the last report: the rejections (from the breakers'
own lifetime counts) and the calls' durations in fixed buckets (from
:data:`~otel_breaker.latency.LATENCY`). It is one pipeline of script runs per
interval, one per breaker that had anything, never on a tool call's path;
``redis_figures`` says where the figures go.

Nothing is lost to an outage and nothing counts twice: a report that fails is
kept as it was and sent again at the next interval (new counts wait for it),
and each report carries a number the script remembers per worker and breaker,
so a report Redis ran but whose answer was lost is not added again. A failing
report is logged once, and once more when reports go through again.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from otel_breaker.breaker import CircuitBreaker
from otel_breaker.latency import BUCKET_COUNT, LATENCY
from otel_breaker.loglines import logger
from otel_breaker.store.redis_figures import SLICE_MS, SLICES, encode_counts
from otel_breaker.store.redis_keys import reported_key
from otel_breaker.store.redis_setup import describe_error

if TYPE_CHECKING:
    from otel_breaker.store.redis_link import ReportStore


#: Seconds between a worker's reports.
REPORT_INTERVAL = 1.0
#: Milliseconds Redis remembers a worker's last report number to a breaker (longer than any outage
#: after which a report that did reach Redis is sent again).
REMEMBER_MS = 3_600_000


@dataclass
class _Counts:
    """What a worker has not reported yet of one breaker (all its breakers at one key)."""

    rejected: int = 0
    durations: list[int] = field(default_factory=lambda: [0] * BUCKET_COUNT)

    def add(self, rejected: int, durations: list[int] | None) -> None:
        self.rejected += rejected
        if durations is not None:
            for index, count in enumerate(durations):
                self.durations[index] += count


@dataclass(frozen=True)
class _Report:
    """One report, sent as it is until Redis has it."""

    key: str
    number: int
    counts: _Counts


class Reporter:
    """Adds one worker's rejections and call durations to its shared breakers every ``interval`` seconds."""

    def __init__(self, store: ReportStore, interval: float = REPORT_INTERVAL) -> None:
        self._store = store
        self.interval = interval
        self._lock = threading.Lock()
        self._sending = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._collecting = False
        #: Each breaker's rejections counted into a report so far.
        self._taken: weakref.WeakKeyDictionary[CircuitBreaker, int] = weakref.WeakKeyDictionary()
        self._pending: dict[str, _Counts] = {}
        self._unsent: dict[str, _Report] = {}
        self._number = 0
        self._failing = False
        #: Reports Redis took, and sends that failed (tests and the curious read them).
        self.reports = 0
        self.failures = 0

    def start(self) -> None:
        """Report in a daemon thread from now on (calls are timed from now on too)."""
        with self._lock:
            if self._thread is not None:
                return
            if not self._collecting:
                LATENCY.collect()
                self._collecting = True
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._loop, name="otel-breaker-redis-report", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread, and send what is left once (the store is closing)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)
        self._thread = None
        if self._collecting:
            self.flush()
            self._collecting = False
            LATENCY.stop_collecting()

    def after_fork(self) -> None:
        """In a forked child: no thread, and what the parent counted is the parent's to report."""
        self._lock = threading.Lock()
        self._sending = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        self._pending = {}
        self._unsent = {}
        self._failing = False
        self._taken = weakref.WeakKeyDictionary()
        for breaker in self._store.breakers():
            self._taken[breaker] = _rejections(breaker)

    def forget(self, breaker: CircuitBreaker) -> None:
        """``breaker`` is dropped: keep what it counted since the last report for the next one."""
        with self._lock:
            self._take(breaker)
            self._taken.pop(breaker, None)

    def _loop(self) -> None:
        stop = self._stop
        while not stop.wait(self.interval):
            try:
                self.flush()
            except Exception:  # never let the thread die; the next interval tries again
                logger.debug("otel-breaker: reporting to Redis failed", exc_info=True)

    # -- one report ---------------------------------------------------------------------------------

    def flush(self) -> bool:
        """Send what this worker's breakers counted since the last report; True when Redis has it all."""
        with self._sending:
            with self._lock:
                for breaker in self._store.breakers():
                    self._take(breaker)
                reports = self._due()
            if not reports:
                return True
            try:
                replies = self._send(reports)
            except Exception as exc:
                self._failed(exc)
                return False
            problem: BaseException | None = None
            with self._lock:
                for report, reply in zip(reports, replies, strict=True):
                    if isinstance(reply, BaseException):
                        problem = problem or reply
                    else:
                        del self._unsent[report.key]
                        self.reports += 1
            if problem is not None:
                self._failed(problem)
                return False
            if self._failing:
                self._failing = False
                logger.warning("otel-breaker: rejections and latency reach Redis again")
            return True

    def _take(self, breaker: CircuitBreaker) -> None:
        """Move what ``breaker`` counted since it was last taken into the pending counts (under the lock)."""
        storage = breaker.storage
        key = getattr(storage, "key", None)
        if key is None:
            return
        rejected = _rejections(breaker)
        new = rejected - self._taken.get(breaker, 0)
        self._taken[breaker] = rejected
        durations = LATENCY.take_counts(breaker)
        if new <= 0 and durations is None:
            return
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = _Counts()
        pending.add(max(0, new), durations)

    def _due(self) -> list[_Report]:
        """The reports to send now (under the lock): each one not yet acknowledged as it was,
        and a new one for each breaker that has none waiting."""
        for key in [k for k in self._pending if k not in self._unsent]:
            self._number += 1
            self._unsent[key] = _Report(key, self._number, self._pending.pop(key))
        return list(self._unsent.values())

    def _send(self, reports: list[_Report]) -> list[Any]:
        """One pipeline: a script run per report (on a Cluster, redis-py splits it by node)."""
        script = self._store.sync_script()  # loads the script, and checks the permissions, on a new client
        client = self._store.client
        origin = self._store.origin
        pipe = client.pipeline(transaction=False)
        for report in reports:
            counts = report.counts
            durations = encode_counts(counts.durations) if any(counts.durations) else ""
            pipe.evalsha(
                script.sha,
                2,
                report.key,
                reported_key(report.key, origin),
                "report",
                report.number,
                counts.rejected,
                durations,
                SLICE_MS,
                SLICES,
                REMEMBER_MS,
            )
        replies = pipe.execute(raise_on_error=False)
        if any(_no_script(reply) for reply in replies):
            client.script_load(script.script)  # a restarted or new primary: the next report runs it
        return replies

    def _failed(self, exc: BaseException) -> None:
        self.failures += 1
        if not self._failing:
            self._failing = True
            logger.warning(
                "otel-breaker: rejections and latency could not be reported to Redis (%s); kept for the next report",
                describe_error(exc),
            )
        else:
            logger.debug("otel-breaker: reporting to Redis still fails: %s", exc)


def _rejections(breaker: CircuitBreaker) -> int:
    """Every call ``breaker`` rejected in this process (open or half-open), never reset."""
    counts = breaker.lifetime_counts()
    return counts[3] + counts[4]


def _no_script(reply: Any) -> bool:
    return isinstance(reply, BaseException) and "NOSCRIPT" in str(reply)
