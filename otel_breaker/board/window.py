"""Per-second counts of each breaker over the last two minutes: the board's rates.

The board reads its source (a process's registry or the shared store) about
once a second whether anyone watches or not, and each read gives every
breaker's running totals: calls that ran (successes plus failures, the two
counts ``/status`` shows), failures and rejections. :class:`Window` keeps,
per breaker, how much each total grew in each second of the last ``span``
seconds, in a ring that holds only the seconds that had any. Rates are sums
over fixed spans of those seconds, so the first look after an hour unwatched
shows the same calls per minute as a look every second would have: nothing
depends on when someone polled.

The clock is the caller's (``now`` in seconds), so tests drive minutes of
traffic without waiting.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

#: Seconds of history kept (the sparkline's two minutes).
SPAN_S = 120
#: Seconds a rate is taken over.
RATE_S = 60
#: Seconds per sparkline point.
SPARK_STEP_S = 10


class Totals(NamedTuple):
    """Running totals of one breaker at one read; ``rejected`` is None where the source does not count them."""

    calls: int
    failures: int
    rejected: int | None


class Rates(NamedTuple):
    """One breaker's figures over the last :data:`RATE_S` seconds, and its sparkline."""

    calls: int
    failures: int
    rejected: int | None
    failure_rate: float | None
    spark: list[int]


_QUIET = Rates(0, 0, None, None, [0] * (SPAN_S // SPARK_STEP_S))


class _Ring:
    """One breaker: its last totals, and [second, calls, failures, rejected] for each busy second."""

    __slots__ = ("last", "seconds")

    def __init__(self, last: Totals) -> None:
        self.last = last
        self.seconds: deque[list[int]] = deque()


class Window:
    """Per-second counts of many breakers (keys), from their running totals."""

    def __init__(self, span_s: int = SPAN_S, rate_s: int = RATE_S, step_s: int = SPARK_STEP_S) -> None:
        self.span_s = span_s
        self.rate_s = rate_s
        self.step_s = step_s
        self._rings: dict[str, _Ring] = {}

    def record(self, key: str, totals: Totals, now: float, baseline: bool) -> None:
        """The totals read at ``now``: what grew since the last read counts in ``now``'s
        second. A breaker first seen at the first read is a baseline (its past is not
        recent); one that appears later counts all it has as new. Totals that went down
        (a reset) start again from there."""
        second = int(now)
        ring = self._rings.get(key)
        if ring is None:
            ring = _Ring(totals if baseline else Totals(0, 0, None if totals.rejected is None else 0))
            self._rings[key] = ring
        last = ring.last
        calls = totals.calls - last.calls
        failures = totals.failures - last.failures
        rejected = 0
        if totals.rejected is not None and last.rejected is not None:
            rejected = totals.rejected - last.rejected
        ring.last = totals
        if calls < 0 or failures < 0 or rejected < 0:
            return  # a reset: nothing negative, nothing invented
        seconds = ring.seconds
        if calls or failures or rejected:
            if seconds and seconds[-1][0] == second:
                entry = seconds[-1]
                entry[1] += calls
                entry[2] += failures
                entry[3] += rejected
            else:
                seconds.append([second, calls, failures, rejected])
        oldest = second - self.span_s
        while seconds and seconds[0][0] <= oldest:
            seconds.popleft()

    def busy(self, key: str, now: float) -> bool:
        """Whether ``key`` had anything in the kept span (its figures still move with time)."""
        ring = self._rings.get(key)
        return ring is not None and bool(ring.seconds) and ring.seconds[-1][0] > int(now) - self.span_s

    def rates(self, key: str, now: float) -> Rates:
        """Calls, failures and rejections in the last ``rate_s`` seconds (``now``'s
        included), the failure rate among those calls, and calls per ``step_s`` over
        the span, oldest first."""
        ring = self._rings.get(key)
        counts_rejections = ring is not None and ring.last.rejected is not None
        if ring is None or not ring.seconds:
            return _QUIET._replace(rejected=0 if counts_rejections else None, spark=list(_QUIET.spark))
        second = int(now)
        points = self.span_s // self.step_s
        spark = [0] * points
        calls = failures = rejected = 0
        rate_from = second - self.rate_s
        first = second - self.span_s
        for at, c, f, r in ring.seconds:
            if at <= first or at > second:
                continue
            spark[min(points - 1, (at - first - 1) // self.step_s)] += c
            if at > rate_from:
                calls += c
                failures += f
                rejected += r
        rate = round(failures / calls, 3) if calls else None
        return Rates(calls, failures, rejected if counts_rejections else None, rate, spark)

    def keep_only(self, keys: set[str]) -> None:
        """Forget breakers that are gone."""
        if len(keys) != len(self._rings):
            for key in [k for k in self._rings if k not in keys]:
                del self._rings[key]
