"""The figures workers report into a breaker's hash, and how the fleet's board reads them back.

Workers reject calls from their mirror of the shared state and time calls in
their own memory, so neither reaches the store by itself. Every worker adds
what it saw, about once a second (``redis_report``), to two kinds of field of
the breaker's hash:

* ``rejected``: every worker's rejections added up, a running total like
  ``successes`` and ``failures``, so the board's per-second sampling turns it
  into rejections per minute;
* ``lh0`` .. ``lh5``: call durations in the buckets of
  :data:`~otel_breaker.semconv.DURATION_BUCKETS`, one field per 10-second slice of
  the server's clock (``"<slice>:<count>,<count>,..."``), a ring the script
  reuses for a new slice. Counts in the same buckets add up exactly, so the
  fleet's p50 and p99 are read from the sum of every worker's calls over the
  last six slices (50 to 60 seconds).
"""

from __future__ import annotations

from collections.abc import Mapping

from otel_breaker.latency import bucket_quantile

#: The running total of rejections, added to by every worker.
REJECTED = "rejected"
#: Milliseconds of server time per latency slice.
SLICE_MS = 10_000
#: Slices kept in the ring, and read as "the last minute" (the current one included).
SLICES = 6
#: The hash fields of the ring.
LATENCY_FIELDS = tuple(f"lh{slot}" for slot in range(SLICES))


def encode_counts(counts: list[int]) -> str:
    """Bucket counts as the script's argument: ``"3,0,12,..."``."""
    return ",".join(str(count) for count in counts)


def recent_counts(fields: Mapping[str, str], now_ms: int) -> list[int]:
    """Every worker's bucket counts of the slices within the last :data:`SLICES` (the
    current one included), added up; slices older than that are a ring slot not yet reused."""
    current = now_ms // SLICE_MS
    total: list[int] = []
    for name in LATENCY_FIELDS:
        value = fields.get(name)
        if not value:
            continue
        at, _, counts = value.partition(":")
        if not at.isdigit() or not current - SLICES < int(at) <= current:
            continue
        for index, count in enumerate(counts.split(",")):
            if index == len(total):
                total.append(0)
            total[index] += int(count) if count.isdigit() else 0
    return total


def latency_ms(fields: Mapping[str, str], now_ms: int) -> tuple[float | None, float | None]:
    """(p50, p99) in milliseconds to a hundredth of the fleet's calls in the last minute,
    estimated from the reported buckets; (None, None) when no worker reported a call."""
    counts = recent_counts(fields, now_ms)
    p50 = bucket_quantile(counts, 0.50)
    p99 = bucket_quantile(counts, 0.99)
    if p50 is None or p99 is None:
        return None, None
    return round(p50 * 1000, 2), round(p99 * 1000, 2)


def rejected(fields: Mapping[str, str]) -> int:
    """Rejections every worker reported since the breaker was created or reset."""
    value = fields.get(REJECTED, "0")
    return int(value) if value.lstrip("-").isdigit() else 0
