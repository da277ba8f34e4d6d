"""Workers report their rejections and call durations to the shared store, and the fleet board shows them.

Each worker rejects an open tool's calls from its own mirror and times calls in its own
memory; its store adds both to the breaker's hash about once a second. The fleet board
reads them like the successes and failures every worker already adds there.
"""

from __future__ import annotations

import json
import logging

from otel_breaker.board.model import COLUMNS, Board
from otel_breaker.breaker import CircuitBreakerConfig, State
from otel_breaker.cli.fleet import FleetSource
from otel_breaker.store.redis import RedisStore
from otel_breaker.store.redis_figures import SLICE_MS, SLICES
from otel_breaker.store.redis_keys import reported_key
from tests.store.conftest import wait_for, wait_watching
from tests.store.multiproc import run_workers

C = {name: index for index, name in enumerate(COLUMNS)}


class Ticks:
    """The board's clock: seconds moved by the test."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _fleet_row(board: Board, tool: str) -> list:
    document = json.loads(board.board_document({})[0])
    (row,) = [r for r in document["rows"] if r[C["tool"]] == tool]
    return row


def test_the_fleet_board_shows_every_workers_rejections_and_latency(redis_server, prefix, make_store):
    setup = make_store()
    setup.create("inventory", CircuitBreakerConfig()).force_open(None)
    # both breakers are in the store before the board's first look (a read makes the hash, no call is made)
    assert setup.create("search", CircuitBreakerConfig()).refresh()
    ticks = Ticks()
    board = Board(FleetSource(make_store()), clock=ticks)
    board.document_for_start()

    # Three workers: 40, 50 and 46 calls of the open tool, and 100 calls of a healthy one
    # lasting exactly 5 ms (50 calls), 30 ms (45) and 300 ms (5).
    plan = [(40, [0.005] * 50), (50, [0.03] * 45), (46, [0.3] * 5)]
    options = [
        {
            "store": redis_server.url,
            "prefix": prefix,
            "fake_clock": True,
            "open_tool": "inventory",
            "tool": "search",
            "rejects": rejects,
            "durations": durations,
        }
        for rejects, durations in plan
    ]
    results = run_workers(redis_server.client(), redis_server.url, "report", options)
    truth = sum(r["rejected"] for r in results)
    assert truth == 136, results
    assert all(r["errors"] == 0 for r in results), results

    ticks.now += 1
    shown = _fleet_row(board, "inventory")
    assert shown[C["state"]] == "open"
    assert shown[C["rejected_per_min"]] == truth
    # Latency from the duration buckets, as Grafana's histogram_quantile reads them: the 50th of 100
    # calls is the last of the 0-10 ms bucket (10 ms; the true p50 is 5 ms); the 99th is the 4th of
    # the 5 in the 160-320 ms bucket (160 + 160 * 4/5 = 288 ms; the true p99 is 300 ms).
    search = _fleet_row(board, "search")
    assert (search[C["latency_p50_ms"]], search[C["latency_p99_ms"]]) == (10.0, 288.0)
    assert search[C["rejected_per_min"]] == 0
    print(
        f"\nfleet board: inventory rejected/min {shown[C['rejected_per_min']]} (workers rejected {truth}); "
        f"search p50 {search[C['latency_p50_ms']]} ms / p99 {search[C['latency_p99_ms']]} ms "
        "(true 5 ms / 300 ms, each within its bucket)"
    )

    # A minute later the rejections are out of the rate, and the count stays in /status.
    ticks.now += 61
    board.invalidate()
    assert _fleet_row(board, "inventory")[C["rejected_per_min"]] == 0
    status = json.loads(board.status_document({"tool": "inventory"}))
    assert status["breakers"][0]["rejected"] == truth


def test_a_worker_reports_in_the_background(make_store, redis_server):
    store = make_store(report_interval=0.2)
    breaker = store.create("inventory", CircuitBreakerConfig(failure_threshold=1, recovery_timeout=600))
    wait_watching(store)
    breaker.force_open(None)
    for _ in range(7):
        breaker.try_acquire()
    assert breaker.state is State.OPEN
    key = store.key_for("inventory")
    client = redis_server.client()
    wait_for(lambda: client.hget(key, "rejected") == b"7", what="the reporting thread to add the rejections")
    assert store.report()  # nothing left: nothing sent twice
    assert client.hget(key, "rejected") == b"7"


def test_a_report_during_an_outage_is_kept_and_counted_once_later(make_server, prefix, caplog):
    """Redis stops answering (paused: what was sent runs when it resumes, unheard): the reports
    are kept, sent again, and every rejection counts exactly once."""
    server = make_server()
    store = RedisStore.from_url(server.url, prefix=prefix, socket_timeout=0.2, report_interval=3600.0)
    try:
        breaker = store.create("inventory", CircuitBreakerConfig())
        breaker.force_open(None)
        for _ in range(5):
            breaker.try_acquire()
        assert store.report()
        for _ in range(3):
            breaker.try_acquire()
        server.pause()
        try:
            with caplog.at_level(logging.DEBUG, logger="otel_breaker"):
                assert not store.report()
                assert not store.report()  # still down: kept again, logged once as a warning
                for _ in range(2):
                    breaker.try_acquire()  # decided locally meanwhile, still counted
        finally:
            server.resume()
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len([m for m in warnings if "could not be reported" in m]) == 1, warnings
        wait_for(store.report, what="a report to go through once Redis answers again")
        assert store.report()  # the counts made while the kept report waited
        with server.client() as client:
            assert client.hget(store.key_for("inventory"), "rejected") == b"10"
    finally:
        store.close()


def test_a_report_sent_again_after_a_lost_answer_counts_once(make_store, redis_server):
    """Redis ran the report but the worker did not hear it: the same report, sent again, adds nothing."""
    store = make_store(report_interval=3600.0)
    breaker = store.create("inventory", CircuitBreakerConfig())
    breaker.force_open(None)
    key = store.key_for("inventory")
    script = store.sync_script()
    client = redis_server.client()
    report = ("report", 1, 4, "2,0,1", SLICE_MS, SLICES, 60_000)
    keys = (key, reported_key(key, store.origin))
    assert client.evalsha(script.sha, 2, *keys, *report) == 1
    assert client.evalsha(script.sha, 2, *keys, *report) == 0
    assert client.hget(key, "rejected") == b"4"
    (slice_field,) = [v for f, v in client.hgetall(key).items() if f.startswith(b"lh")]
    assert slice_field.endswith(b":2,0,1")
    # another worker's report of the same number is its own
    other = (key, reported_key(key, "0ther"))
    assert client.evalsha(script.sha, 2, *other, *report) == 1
    assert client.hget(key, "rejected") == b"8"
    (slice_field,) = [v for f, v in client.hgetall(key).items() if f.startswith(b"lh")]
    assert slice_field.endswith(b":4,0,2")


def test_reports_reach_a_cluster_and_a_sentinel_primary(cluster, make_sentinel, prefix):
    sentinel = make_sentinel()
    for url in (cluster.url(), sentinel.url()):
        store = RedisStore.from_url(url, prefix=prefix, socket_timeout=1.0, report_interval=3600.0)
        try:
            tools = [f"tool{n}" for n in range(6)]  # keys in several slots: one pipeline split by node
            breakers = [store.create(tool, CircuitBreakerConfig()) for tool in tools]
            for count, breaker in enumerate(breakers, start=1):
                breaker.force_open(None)
                for _ in range(count):
                    breaker.try_acquire()
            assert store.report(), store._reporter.failures
            rows = {row["tool"]: row["rejected"] for row in store.snapshot()}
            assert rows == {tool: count for count, tool in enumerate(tools, start=1)}
        finally:
            store.close()
