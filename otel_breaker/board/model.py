"""The board's data: breaker rows in, cached compact documents out.

A *source* gives the rows (one process's registry, or the shared store): the
fields of ``otel-breaker status --json`` plus ``calls`` (lifetime calls) and
``upstream``. :class:`Board` takes one snapshot of the source at most once
per ``ttl`` however many clients poll, keeps a short history per breaker (the
sparkline, calls per minute and the recent failure rate come from the
deltas between snapshots, so both sources mean the same by them), and caches
each encoded answer until the next snapshot. A request therefore costs the
agent at most one snapshot per second plus a filter over a list, and its
answer is bounded by ``limit``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

STATES = ("open", "half_open", "closed")
_ORDER = {state: rank for rank, state in enumerate(STATES)}
#: At most this many rows in one answer (``limit`` is clamped to it).
MAX_ROWS = 1000
#: Distinct agents and upstreams offered as filters.
MAX_FACETS = 500
_MAX_CACHED = 64
#: A snapshot may take at most 1/BUSY_SHARE of the time between snapshots (5%).
BUSY_SHARE = 20
UPSTREAM_PREFIX = "upstream:"
#: Row fields only the board uses: ``/status`` keeps the shared store's fields exactly.
_BOARD_ONLY = frozenset({"calls", "upstream", "read_ms"})
#: The columns of a board row, in order (the page reads them by position: compact JSON).
COLUMNS = (
    "tool",
    "agent",
    "session",
    "upstream",
    "state",
    "failure_rate",
    "calls_per_min",
    "spark",
    "retry_after_s",
    "forced_open",
    "consecutive_failures",
    "failures",
    "opened",
)


class Source(Protocol):
    """Where the rows come from."""

    def rows(self) -> list[dict[str, Any]]: ...

    def header(self) -> dict[str, Any]: ...


class QueryError(ValueError):
    """A filter or page parameter the endpoint cannot use."""


class History:
    """Calls, failures and successes per breaker in ``buckets`` buckets of ``bucket_s`` seconds."""

    def __init__(self, bucket_s: float = 10.0, buckets: int = 12) -> None:
        self.bucket_s = bucket_s
        self.buckets = buckets
        self._seen: dict[str, list[Any]] = {}

    def update(self, key: str, totals: tuple[int, int, int], now: float, baseline: bool) -> list[Any]:
        """Record the lifetime (calls, failures, successes) seen now. A breaker seen
        for the first time at the very first snapshot is a baseline (its past is
        not "recent"); one that appeared later counts all its calls as new."""
        index = int(now // self.bucket_s)
        entry = self._seen.get(key)
        if entry is None:
            last = list(totals) if baseline else [0, 0, 0]
            entry = [last, index, [[0] * self.buckets for _ in range(3)]]
            self._seen[key] = entry
        shift = index - entry[1]
        if shift > 0:
            keep = self.buckets - min(shift, self.buckets)
            entry[2] = [series[self.buckets - keep :] + [0] * (self.buckets - keep) for series in entry[2]]
            entry[1] = index
        last = entry[0]
        new = [total - before for total, before in zip(totals, last, strict=True)]
        if min(new) < 0:  # a reset: start again from here
            new = [0, 0, 0]
        entry[0] = list(totals)
        for series, added in zip(entry[2], new, strict=True):
            series[-1] += added
        return entry

    def keep_only(self, keys: set[str]) -> None:
        if len(keys) != len(self._seen):
            for key in [k for k in self._seen if k not in keys]:
                del self._seen[key]

    def summary(self, entry: list[Any]) -> tuple[float | None, int, list[int]]:
        """(failure rate of the last minute's outcomes, calls in the last minute, calls per bucket)."""
        last_minute = max(1, round(60 / self.bucket_s))
        calls, failures, successes = (sum(series[-last_minute:]) for series in entry[2])
        outcomes = failures + successes
        rate = None if not outcomes else round(failures / outcomes, 3)
        return rate, calls, list(entry[2][0])


def row_key(row: Mapping[str, Any]) -> str:
    return f"{row.get('tool')}\x00{row.get('agent') or ''}\x00{row.get('session') or ''}"


class _Snapshot:
    __slots__ = (
        "board_rows",
        "counts",
        "facets",
        "read_ms",
        "rows",
        "total_upstreams",
        "upstream_rows",
        "version",
        "wall_ms",
    )


class Board:
    """Cached documents over one source."""

    def __init__(
        self,
        source: Source,
        *,
        ttl: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        history: History | None = None,
        control: bool = False,
        fleet_url: str | None = None,
    ) -> None:
        self.source = source
        self.ttl = ttl
        self.control = control
        self.fleet_url = fleet_url
        self._clock = clock
        self._history = history or History()
        self._lock = threading.Lock()
        self._snapshot: _Snapshot | None = None
        self._taken_at = float("-inf")
        self._version = 0
        self._interval = ttl
        self._compact: dict[str, tuple[tuple[Any, ...], int, list[Any], bool]] = {}
        self._by_row: dict[int, Any] = {}
        self._cache: dict[tuple[str, str], tuple[bytes, str]] = {}
        self.snapshots = 0  # how many times the source was read (tests and benchmarks look)

    # -- snapshots ---------------------------------------------------------------------------------

    def _fresh(self) -> _Snapshot:
        now = self._clock()
        snap = self._snapshot
        if snap is not None and now - self._taken_at < self._interval:
            return snap
        with self._lock:  # one reader of the source at a time; the others use its result
            now = self._clock()
            if self._snapshot is not None and now - self._taken_at < self._interval:
                return self._snapshot
            started = time.perf_counter()
            snap = self._take(now)
            # Snapshots may take at most 1/BUSY_SHARE of the time: a registry so large
            # that one takes 100 ms is read every 2 s, not every second.
            self._interval = max(self.ttl, (time.perf_counter() - started) * BUSY_SHARE)
            self._snapshot, self._taken_at = snap, now
            self._cache = {}
            return snap

    def _take(self, now: float) -> _Snapshot:
        rows = self.source.rows()
        read_ms = getattr(self.source, "read_ms", None)
        first = self._snapshot is None
        history = self._history
        index = int(now // history.bucket_s)
        previous: dict[str, tuple[tuple[Any, ...], int, list[Any], bool]] = self._compact
        current: dict[str, tuple[tuple[Any, ...], int, list[Any], bool]] = {}
        changed = False
        by_row = self._by_row
        seen: dict[int, tuple[dict[str, Any], str, tuple[tuple[Any, ...], int, list[Any], bool]]] = {}
        for row in rows:
            hit = by_row.get(id(row))
            if hit is not None and hit[0] is row and (hit[2][1] == index or hit[2][3]):
                # the very row object of the last snapshot: a source (the process's) kept it unchanged
                current[hit[1]] = hit[2]
                seen[id(row)] = hit
                continue
            key = row_key(row)
            while key in current:  # two breakers with the same names (agents that share a name): two tiles
                key += "\x00+"
            state = row["state"]
            retry = row.get("retry_after_s")
            signature = (
                row.get("calls"),
                row.get("failures"),
                row.get("successes"),
                state,
                retry,
                row.get("forced_open"),
                row.get("consecutive_failures"),
                row.get("opened"),
                row.get("upstream"),
            )
            known = previous.get(key)
            if known is not None and known[0] == signature and (known[1] == index or known[3]):
                current[key] = known  # unchanged, and its history is quiet or in the same bucket
                seen[id(row)] = (row, key, known)
                continue
            changed = True
            totals = (int(row.get("calls") or 0), int(row.get("failures") or 0), int(row.get("successes") or 0))
            entry = history.update(key, totals, now, first)
            rate, per_minute, spark = history.summary(entry)
            compact = [
                row["tool"],
                row.get("agent"),
                row.get("session"),
                row.get("upstream"),
                state,
                rate,
                per_minute,
                spark,
                None if retry is None else round(retry, 1),
                1 if row.get("forced_open") else 0,
                row.get("consecutive_failures", 0),
                row.get("failures", 0),
                row.get("opened", 0),
            ]
            current[key] = (signature, index, compact, not any(spark) and not per_minute)
            seen[id(row)] = (row, key, current[key])
        if len(current) != len(previous) or (not changed and current.keys() != previous.keys()):
            changed = True
        self._compact = current
        self._by_row = seen
        if not changed and self._snapshot is not None:
            snap = self._snapshot
            snap = _copy(snap)  # the same board (same version, same ETag); fresh rows for /status
            snap.rows = rows
            snap.read_ms = read_ms
            self.snapshots += 1
            return snap
        history.keep_only(set(current))
        board_rows: list[list[Any]] = []
        upstream_rows: list[list[Any]] = []
        counts = dict.fromkeys(STATES, 0)
        agents: set[str] = set()
        upstreams: set[str] = set()
        for _, _, compact, _ in current.values():
            tool = str(compact[0])
            if tool.startswith(UPSTREAM_PREFIX):
                upstream_rows.append(compact)
                upstreams.add(tool[len(UPSTREAM_PREFIX) :])
                continue
            board_rows.append(compact)
            counts[compact[4]] = counts.get(compact[4], 0) + 1
            if compact[1] and len(agents) < MAX_FACETS:
                agents.add(compact[1])
            if compact[3] and len(upstreams) < MAX_FACETS:
                upstreams.add(compact[3])
        order = _ORDER.get
        board_rows.sort(key=lambda r: (order(r[4], 3), r[0], r[1] or "", r[2] or ""))
        upstream_rows.sort(key=lambda r: (order(r[4], 3), r[0]))
        self._version += 1
        snap = _Snapshot()
        snap.version = self._version
        snap.rows = rows
        snap.read_ms = read_ms
        snap.board_rows = board_rows
        snap.upstream_rows = upstream_rows[:MAX_FACETS]
        snap.total_upstreams = len(upstream_rows)
        snap.counts = counts
        snap.facets = {"agents": sorted(agents), "upstreams": sorted(upstreams)}
        snap.wall_ms = int(time.time() * 1000)
        self.snapshots += 1
        return snap

    def document_for_start(self) -> None:
        """Take the first snapshot now: what exists at start is history's baseline, and
        whatever happens after it counts as recent. The first request reads again."""
        self._fresh()
        self.invalidate()

    def invalidate(self) -> None:
        """Read the source again at the next request (after a manual change)."""
        self._taken_at = float("-inf")

    # -- answers -----------------------------------------------------------------------------------

    def _cached(self, route: str, query: str, build: Callable[[_Snapshot], bytes]) -> tuple[bytes, str]:
        snap = self._fresh()
        found = self._cache.get((route, query))
        if found is not None:
            return found
        body = build(snap)
        answer = (body, f'"{snap.version}-{len(body)}"')
        if len(self._cache) < _MAX_CACHED:
            self._cache[(route, query)] = answer
        return answer

    def board_document(self, query: Mapping[str, str], raw_query: str = "") -> tuple[bytes, str]:
        """The page's JSON: header, counts, filter choices, upstream row and the
        tiles matching ``query`` (state, agent, upstream, q), open first."""
        wanted = _filters(query)
        limit, _ = _page(query)

        def build(snap: _Snapshot) -> bytes:
            matching = [r for r in snap.board_rows if _board_match(r, wanted)]
            document = {
                **self.source.header(),
                "control": self.control,
                "fleet": self.fleet_url,
                "t": snap.wall_ms,
                "version": snap.version,
                "columns": COLUMNS,
                "counts": snap.counts,
                "total": len(snap.board_rows),
                "matching": len(matching),
                "agents": snap.facets["agents"],
                "upstreams": snap.facets["upstreams"],
                "upstream_rows": snap.upstream_rows,
                "rows": matching[:limit],
            }
            return _encode(document)

        return self._cached("board", raw_query, build)

    def status_document(self, query: Mapping[str, str], raw_query: str = "") -> bytes:
        """``GET /status``: the full rows (the fields of ``otel-breaker status --json``),
        filtered by tool, state and agent, a page of at most ``limit`` from ``offset``."""
        wanted = _filters(query)
        limit, offset = _page(query)

        def build(snap: _Snapshot) -> bytes:
            matching = [r for r in snap.rows if _status_match(r, wanted)]
            page = [_status_row(r, snap.read_ms) for r in matching[offset : offset + limit]]
            document: dict[str, Any] = {**self.source.header(), "total": len(matching), "offset": offset}
            if offset + limit < len(matching):
                document["next_offset"] = offset + limit
            document["breakers"] = page
            return _encode(document)

        return self._cached("status", raw_query, build)[0]


def _status_row(row: dict[str, Any], read_ms: int | None) -> dict[str, Any]:
    """A row as ``/status`` shows it: the shared store's fields; a row a source kept
    from an earlier read has its age moved on to the latest read."""
    shown = {k: v for k, v in row.items() if k not in _BOARD_ONLY}
    built = row.get("read_ms")
    if read_ms is not None and built is not None and read_ms > built and shown.get("last_change_age_s") is not None:
        shown["last_change_age_s"] += (read_ms - built) / 1000
    return shown


def _copy(snap: _Snapshot) -> _Snapshot:
    twin = _Snapshot()
    for name in _Snapshot.__slots__:
        setattr(twin, name, getattr(snap, name))
    return twin


def _encode(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def _filters(query: Mapping[str, str]) -> dict[str, str]:
    wanted = {}
    for name in ("tool", "state", "agent", "upstream", "q"):
        value = query.get(name)
        if value:
            if len(value) > 256:
                raise QueryError(f"{name} is longer than 256 characters")
            wanted[name] = value
    state = wanted.get("state")
    if state is not None:
        state = state.replace("-", "_")
        if state not in STATES:
            raise QueryError(f"state must be one of {', '.join(STATES)}")
        wanted["state"] = state
    if "q" in wanted:
        wanted["q"] = wanted["q"].casefold()
    return wanted


def _page(query: Mapping[str, str]) -> tuple[int, int]:
    try:
        limit = int(query.get("limit") or MAX_ROWS)
        offset = int(query.get("offset") or 0)
    except ValueError:
        raise QueryError("limit and offset are whole numbers") from None
    if limit < 1 or offset < 0:
        raise QueryError("limit must be at least 1 and offset at least 0")
    return min(limit, MAX_ROWS), offset


def _board_match(row: list[Any], wanted: dict[str, str]) -> bool:
    if not wanted:
        return True
    return (
        ("state" not in wanted or row[4] == wanted["state"])
        and ("agent" not in wanted or row[1] == wanted["agent"])
        and ("upstream" not in wanted or row[3] == wanted["upstream"])
        and ("tool" not in wanted or row[0] == wanted["tool"])
        and ("q" not in wanted or wanted["q"] in str(row[0]).casefold())
    )


def _status_match(row: dict[str, Any], wanted: dict[str, str]) -> bool:
    if not wanted:
        return True
    return (
        ("state" not in wanted or row["state"] == wanted["state"])
        and ("agent" not in wanted or row.get("agent") == wanted["agent"])
        and ("upstream" not in wanted or row.get("upstream") == wanted["upstream"])
        and ("tool" not in wanted or row["tool"] == wanted["tool"])
        and ("q" not in wanted or wanted["q"] in str(row["tool"]).casefold())
    )
