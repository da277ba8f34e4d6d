"""The board's data: breaker rows in, cached compact documents out.

A *source* gives the rows (one process's registry, or the shared store): the
fields of ``otel-breaker status --json`` (``rejected`` among them, the rejections
since the breaker's last reset) plus ``upstream``. :class:`Board` reads
the source at most once per ``ttl`` however many clients poll, and
:meth:`Board.sample` reads it on a clock of its own, watched or not, so the
per-second counts in :class:`~otel_breaker.board.window.Window` (calls per
minute, failures, rejections, the sparkline) are the same whenever the page
first looks. Latency (``latency_p50_ms``, ``latency_p99_ms``) comes with the
rows: the source's own figures over the last minute, None where it has none
(a process times its calls while its status endpoint runs; in the shared store,
every worker's calls as the workers report them, see ``store.redis_figures``).
Each encoded answer is cached until the next read. A request
therefore costs the agent at most one read per second plus a filter over a
list, and its answer is bounded by ``limit``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from otel_breaker.board.window import Totals, Window

logger = logging.getLogger("otel_breaker")

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
_BOARD_ONLY = frozenset({"upstream", "read_ms"})
#: The columns of a board row, in order (the page reads them by position: compact JSON).
COLUMNS = (
    "tool",
    "agent",
    "session",
    "where",
    "upstream",
    "state",
    "failure_rate",
    "calls_per_min",
    "failures_per_min",
    "rejected_per_min",
    "spark",
    "retry_after_s",
    "forced_open",
    "consecutive_failures",
    "failures",
    "successes",
    "opened",
    "latency_p50_ms",
    "latency_p99_ms",
)
_C = {name: index for index, name in enumerate(COLUMNS)}
#: ``sort`` values of ``/board.json``: a column, and whether its natural order is highest first.
SORTS = {
    "state": False,
    "tool": False,
    "agent": False,
    "upstream": False,
    "calls_per_min": True,
    "failure_rate": True,
    "failures_per_min": True,
    "rejected_per_min": True,
    "consecutive_failures": True,
    "failures": True,
    "successes": True,
    "opened": True,
    "retry_after_s": False,
    "latency_p50_ms": True,
    "latency_p99_ms": True,
}


class Source(Protocol):
    """Where the rows come from."""

    def rows(self) -> list[dict[str, Any]]: ...

    def header(self) -> dict[str, Any]: ...


class QueryError(ValueError):
    """A filter or page parameter the endpoint cannot use."""


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
    """Cached documents over one source, and the per-second counts of its breakers."""

    def __init__(
        self,
        source: Source,
        *,
        ttl: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        window: Window | None = None,
        control: bool = False,
        fleet_url: str | None = None,
    ) -> None:
        self.source = source
        self.ttl = ttl
        self.control = control
        self.fleet_url = fleet_url
        self._clock = clock
        self._window = window or Window()
        self._lock = threading.Lock()
        self._snapshot: _Snapshot | None = None
        self._taken_at = float("-inf")
        self._version = 0
        self._interval = ttl
        self._compact: dict[str, tuple[tuple[Any, ...], int, list[Any]]] = {}
        self._by_row: dict[int, Any] = {}
        self._cache: dict[tuple[str, str], tuple[bytes, str]] = {}
        self._sampler: threading.Thread | None = None
        self._stop = threading.Event()
        _BOARDS.add(self)
        self.snapshots = 0  # how many times the source was read (tests and benchmarks look)

    # -- snapshots ---------------------------------------------------------------------------------

    def sample(self) -> None:
        """Read the source if a read is due: what the sampler does every second, watched or not."""
        self._fresh()

    def start_sampling(self) -> None:
        """Sample in a daemon thread about once per ``ttl`` (real time), so the counts of
        every second are kept while nobody watches; :meth:`stop_sampling` ends it."""
        if self._sampler is not None:
            return
        self._stop.clear()
        self._sampler = threading.Thread(target=self._sample_forever, name="otel-breaker-board-sampler", daemon=True)
        self._sampler.start()

    def stop_sampling(self) -> None:
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join(5)
            self._sampler = None

    def _sample_forever(self) -> None:
        while not self._stop.wait(self.ttl):
            try:
                self.sample()
            except Exception:  # a store that does not answer: the next second tries again
                logger.debug("otel-breaker: board sample failed", exc_info=True)

    def after_fork_in_child(self) -> None:
        """A forked child has only the forking thread: the sampler is gone, and a lock the
        sampler or a request held at the fork stays held there forever. Fresh lock and
        stop flag, and no sampler (:meth:`start_sampling` starts the child's own)."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sampler = None

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
        window = self._window
        second = int(now)
        previous = self._compact
        current: dict[str, tuple[tuple[Any, ...], int, list[Any]]] = {}
        changed = False
        by_row = self._by_row
        seen: dict[int, tuple[dict[str, Any], str, tuple[tuple[Any, ...], int, list[Any]]]] = {}
        for row in rows:
            hit = by_row.get(id(row))
            if hit is not None and hit[0] is row and (hit[2][1] == second or not window.busy(hit[1], now)):
                # the very row object of the last snapshot (a source kept it unchanged), and quiet
                current[hit[1]] = hit[2]
                seen[id(row)] = hit
                continue
            key = row_key(row)
            while key in current:  # two breakers with the same names (agents that share a name): two tiles
                key += "\x00+"
            failures = int(row.get("failures") or 0)
            successes = int(row.get("successes") or 0)
            rejected = row.get("rejected")
            signature = (
                failures,
                successes,
                rejected,
                row["state"],
                row.get("retry_after_s"),
                row.get("forced_open"),
                row.get("consecutive_failures"),
                row.get("opened"),
                row.get("upstream"),
                row.get("latency_p50_ms"),  # a minute without calls moves latency to None, counts not
                row.get("latency_p99_ms"),
            )
            known = previous.get(key)
            if known is not None and known[0] == signature and (known[1] == second or not window.busy(key, now)):
                current[key] = known  # unchanged, and its counts are quiet or of this very second
                seen[id(row)] = (row, key, known)
                continue
            changed = True
            window.record(key, Totals(failures + successes, failures, rejected), now, first)
            current[key] = (signature, second, _compact_row(row, window, key, now))
            seen[id(row)] = (row, key, current[key])
        if len(current) != len(previous) or (not changed and current.keys() != previous.keys()):
            changed = True
        self._compact = current
        self._by_row = seen
        if not changed and self._snapshot is not None:
            snap = _copy(self._snapshot)  # the same board (same version, same ETag); fresh rows for /status
            snap.rows = rows
            snap.read_ms = read_ms
            self.snapshots += 1
            return snap
        window.keep_only(set(current))
        board_rows: list[list[Any]] = []
        upstream_rows: list[list[Any]] = []
        counts = dict.fromkeys(STATES, 0)
        agents: set[str] = set()
        upstreams: set[str] = set()
        for _, _, compact in current.values():
            tool = str(compact[0])
            if tool.startswith(UPSTREAM_PREFIX):
                upstream_rows.append(compact)
                upstreams.add(tool[len(UPSTREAM_PREFIX) :])
                continue
            board_rows.append(compact)
            state = compact[_C["state"]]
            counts[state] = counts.get(state, 0) + 1
            agent = compact[_C["agent"]]
            if agent and len(agents) < MAX_FACETS:
                agents.add(agent)
            upstream = compact[_C["upstream"]]
            if upstream and len(upstreams) < MAX_FACETS:
                upstreams.add(upstream)
        board_rows.sort(key=_default_order)
        upstream_rows.sort(key=_default_order)
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
        """Take the first snapshot now: what exists at start is the counts' baseline, and
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
        rows matching ``query`` (state, agent, upstream, q), open first unless
        ``sort`` names a column (``dir`` asc or desc; the column's natural order
        without it). Sorted before ``limit``, so the first rows are the top of all."""
        wanted = _filters(query)
        limit, _ = _page(query)
        order = _sort(query)

        def build(snap: _Snapshot) -> bytes:
            matching = [r for r in snap.board_rows if _board_match(r, wanted)]
            if order is not None:
                matching = _sorted(matching, *order)
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
                "window_s": self._window.rate_s,
                "spark_step_s": self._window.step_s,
                "counts_rejections": bool(getattr(self.source, "counts_rejections", False)),
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
        ("state" not in wanted or row[_C["state"]] == wanted["state"])
        and ("agent" not in wanted or row[_C["agent"]] == wanted["agent"])
        and ("upstream" not in wanted or row[_C["upstream"]] == wanted["upstream"])
        and ("tool" not in wanted or row[_C["tool"]] == wanted["tool"])
        and ("q" not in wanted or wanted["q"] in str(row[_C["tool"]]).casefold())
    )


def _compact_row(row: dict[str, Any], window: Window, key: str, now: float) -> list[Any]:
    """A board row (:data:`COLUMNS`, by position): the source's fields and the window's figures."""
    rates = window.rates(key, now)
    retry = row.get("retry_after_s")
    return [
        row["tool"],
        row.get("agent"),
        row.get("session"),
        row.get("where"),
        row.get("upstream"),
        row["state"],
        rates.failure_rate,
        rates.calls,
        rates.failures,
        rates.rejected,
        rates.spark,
        None if retry is None else round(retry, 1),
        1 if row.get("forced_open") else 0,
        row.get("consecutive_failures", 0),
        row.get("failures", 0),
        row.get("successes", 0),
        row.get("opened", 0),
        row.get("latency_p50_ms"),
        row.get("latency_p99_ms"),
    ]


#: Every board made in this process, weakly: the fork handler gives each a fresh lock.
_BOARDS: weakref.WeakSet[Board] = weakref.WeakSet()


def _reinit_after_fork() -> None:
    """See :meth:`Board.after_fork_in_child`."""
    for board in list(_BOARDS):
        board.after_fork_in_child()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_reinit_after_fork)


def _identity(row: list[Any]) -> tuple[str, str, str]:
    return (str(row[_C["tool"]]), row[_C["agent"]] or "", row[_C["session"]] or "")


def _default_order(row: list[Any]) -> tuple[int, str, str, str]:
    """Open first, then half-open, then closed; by name within each."""
    return (_ORDER.get(row[_C["state"]], 3), *_identity(row))


def _sort(query: Mapping[str, str]) -> tuple[str, bool] | None:
    """(column, highest first) from ``sort`` and ``dir``; None for the default order."""
    column = query.get("sort") or ""
    if not column:
        return None
    if column not in SORTS:
        raise QueryError(f"sort must be one of {', '.join(SORTS)}")
    direction = query.get("dir") or ""
    if direction not in ("", "asc", "desc"):
        raise QueryError("dir must be asc or desc")
    return column, SORTS[column] if not direction else direction == "desc"


def _sorted(rows: list[Any], column: str, descending: bool) -> list[Any]:
    """Rows by ``column``; rows without a value (no rate yet, no retry) last either way;
    ties by the default order, so the order is stable from one second to the next."""
    if column == "state":
        rows = sorted(rows, key=_default_order, reverse=descending)
        return rows
    index = _C[column]
    present = [r for r in rows if r[index] is not None]
    absent = [r for r in rows if r[index] is None]
    present.sort(key=_default_order)
    if column in ("tool", "agent", "upstream"):
        present.sort(key=lambda r: str(r[index]).casefold(), reverse=descending)
    else:
        present.sort(key=lambda r: r[index], reverse=descending)
    absent.sort(key=_default_order)
    return present + absent


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
