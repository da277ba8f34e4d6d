"""The board's documents: what a snapshot reads, history, filters, caching (no browser)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from otel_breaker import CircuitBreakerConfig
from otel_breaker.board.model import Board, QueryError
from otel_breaker.board.window import Totals, Window
from otel_breaker.registry import BreakerRegistry
from otel_breaker.status_server import ProcessSource, StatusServer


def boom():
    raise ConnectionError("down")


class Ticks:
    """The board's clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def registry(clock):
    registry = BreakerRegistry(clock=clock, max_breakers=1000)
    for index in range(50):
        registry.get(f"tool_{index:02d}").call(lambda: 1)
    return registry


def document(board: Board, **query: str) -> dict:
    return json.loads(board.board_document(query, "&".join(f"{k}={v}" for k, v in query.items()))[0])


def tile(doc: dict, tool: str) -> dict:
    columns = doc["columns"]
    for row in doc["rows"] + doc["upstream_rows"]:
        if row[0] == tool:
            return dict(zip(columns, row, strict=True))
    raise KeyError(tool)


def test_a_state_change_shows_at_the_next_snapshot_even_outside_the_turn(registry):
    ticks = Ticks()
    board = Board(ProcessSource(registry, per_read=1), clock=ticks)
    assert tile(document(board), "tool_30")["state"] == "closed"
    breaker = registry.get("tool_30", CircuitBreakerConfig(failure_threshold=1))
    with pytest.raises(ConnectionError):
        breaker.call(boom)
    ticks.now += 1
    doc = document(board)
    assert tile(doc, "tool_30")["state"] == "open" and doc["rows"][0][0] == "tool_30"  # open first
    assert doc["counts"] == {"open": 1, "half_open": 0, "closed": 49}


def test_counts_catch_up_within_a_full_turn(registry):
    ticks = Ticks()
    source = ProcessSource(registry, per_read=10)
    board = Board(source, clock=ticks)
    document(board)
    for _ in range(7):
        registry.get("tool_42").call(lambda: 1)
    for _ in range(5):  # 50 breakers, 10 a read: every row is at most five reads old
        ticks.now += 1
        doc = document(board)
    assert tile(doc, "tool_42")["calls_per_min"] == 7


def test_window_rates_and_sparkline():
    window = Window()
    window.record("k", Totals(100, 10, 3), now=0.0, baseline=True)  # the past is not recent
    assert window.rates("k", 0.0) == (0, 0, 0, None, [0] * 12)
    window.record("k", Totals(104, 11, 3), now=5.0, baseline=True)
    window.record("k", Totals(110, 13, 5), now=15.0, baseline=True)
    rates = window.rates("k", 15.0)
    assert (rates.calls, rates.failures, rates.rejected, rates.failure_rate) == (10, 3, 2, 0.3)
    assert rates.spark[-2:] == [4, 6]
    window.record("k", Totals(0, 0, 0), now=20.0, baseline=True)  # a reset: nothing negative
    assert min(window.rates("k", 20.0).spark) == 0
    assert window.rates("k", 500.0) == (0, 0, 0, None, [0] * 12)  # long quiet: all gone
    assert window.rates("fleet", 1.0).rejected is None  # never counted: unknown, not zero
    window.record("fleet", Totals(5, 1, None), now=1.0, baseline=False)
    assert window.rates("fleet", 1.0)[:3] == (5, 1, None)


def test_a_minute_unwatched_reads_the_same_as_a_minute_watched(registry):
    """Counts land in the second they happened, whenever the first look is: 48 calls a
    minute for 65 s, sampled every second and read once at the end, read 48 a minute
    in an even sparkline (before, the first look put all 65 s into its last bucket)."""
    ticks = Ticks()
    board = Board(ProcessSource(registry), clock=ticks)
    board.document_for_start()
    busy = registry.get("tool_07")
    for second in range(65):
        calls = 4 if second % 5 == 0 else 0  # 4 calls every 5 s: 48 a minute
        for _ in range(calls):
            busy.call(lambda: 1)
        ticks.now += 1
        board.sample()
    row = tile(document(board), "tool_07")
    assert row["calls_per_min"] == 48
    assert row["spark"][-6:] == [8, 8, 8, 8, 8, 8] and sum(row["spark"]) == 4 * 13


def test_filters_paging_and_bad_queries(registry):
    board = Board(ProcessSource(registry))
    assert document(board, q="TOOL_1")["matching"] == 10
    assert document(board, state="half-open")["matching"] == 0
    assert len(document(board, limit="5")["rows"]) == 5
    with pytest.raises(QueryError):
        document(board, state="broken")
    with pytest.raises(QueryError):
        document(board, limit="0")
    with pytest.raises(QueryError):
        document(board, agent="x" * 300)


def test_an_unchanged_board_answers_304(registry):
    server = StatusServer("127.0.0.1", 0, registry=registry)
    try:
        with urllib.request.urlopen(server.url + "/board.json", timeout=10) as response:
            etag = response.headers["ETag"]
        server.board.invalidate()
        request = urllib.request.Request(server.url + "/board.json", headers={"If-None-Match": etag})
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(request, timeout=10)
        assert answer.value.code == 304
    finally:
        server.close()


def test_breakers_with_the_same_names_get_a_tile_each(clock):
    from otel_breaker.config import load_settings
    from otel_breaker.toolcall import ToolCall

    registry = BreakerRegistry(clock=clock, settings=load_settings({"OTEL_BREAKER_SCOPE": "instance"}))
    first, second = type("A", (), {})(), type("A", (), {})()
    for agent in (first, second):
        registry.breaker_for(ToolCall("search", agent=agent, agent_name="planner")).call(lambda: 1)
    assert len(registry.breakers()) == 2  # per agent object, both named "planner"
    doc = document(Board(ProcessSource(registry)))
    assert doc["total"] == 2 and len(doc["rows"]) == 2


def test_the_process_board_links_to_the_fleet_board(registry):
    board = Board(ProcessSource(registry), fleet_url="http://127.0.0.1:9465/")
    assert document(board)["fleet"] == "http://127.0.0.1:9465/"
