"""Real worker processes sharing breakers through a real Redis."""

from __future__ import annotations

from collections import Counter

from tests.store.multiproc import run_workers

THRESHOLD = 5
HALF_OPEN = 1


def _storm(redis_server, prefix: str, store: str, offsets: list[float]) -> list[dict]:
    options = [
        {
            "store": store,
            "prefix": prefix,
            "failure_threshold": THRESHOLD,
            "half_open_max_calls": HALF_OPEN,
            "recovery_timeout": 60.0,
            "attempts": 3,
            "clock_offset": offset,
            # calls to the dead tool hang for a while, so every worker's first call is in flight at once
            "tool_delay": 0.1,
        }
        for offset in offsets
    ]
    return run_workers(redis_server.client(), redis_server.url, "storm", options)


def test_retry_storm_shared_store_bounds_calls_to_a_dead_tool(redis_server, prefix):
    results = _storm(redis_server, prefix, redis_server.url, [0.0] * 10)
    reached = results[0]["_reached_total"]
    assert sum(r["reached"] for r in results) == reached
    assert THRESHOLD <= reached <= THRESHOLD + HALF_OPEN, results
    assert sum(r["reached"] + r["rejected"] for r in results) == 30
    # the one transition closed -> open is reported by exactly one worker
    transitions = Counter(t for r in results for t in map(tuple, r["transitions"]))
    assert transitions == Counter({("closed", "open"): 1}), results
    assert all(r["errors"] == 0 for r in results)


def test_retry_storm_per_process_stores_let_every_retry_through(redis_server, prefix):
    results = _storm(redis_server, prefix, "memory", [0.0] * 10)
    assert results[0]["_reached_total"] == 30
    assert all(r["transitions"] == [] for r in results)


def test_retry_storm_with_workers_an_hour_off_behaves_the_same(redis_server, prefix):
    offsets = [3600.0, -3600.0, 0.0, 7200.0, -3600.0, 3600.0, 0.0, 3600.0, -7200.0, 0.0]
    results = _storm(redis_server, prefix, redis_server.url, offsets)
    reached = results[0]["_reached_total"]
    assert THRESHOLD <= reached <= THRESHOLD + HALF_OPEN, results
    transitions = Counter(t for r in results for t in map(tuple, r["transitions"]))
    assert transitions == Counter({("closed", "open"): 1}), results


def test_half_open_race_admits_exactly_one_probe_across_processes(redis_server, prefix, make_store):
    from otel_breaker.breaker import CircuitBreakerConfig

    # Open the shared breaker with its cooldown already over: the next acquire anywhere goes half-open.
    setup = make_store().create("web_search", CircuitBreakerConfig(half_open_max_calls=1))
    setup.force_open(duration=0)
    # 200 threads connecting at once on a small machine can take longer than the 50 ms default:
    # a timeout would (correctly) hand the decision to the local breaker, which is not what this test is about.
    options = [
        {"store": redis_server.url, "prefix": prefix, "threads": 50, "clock_offset": offset, "socket_timeout": 2.0}
        for offset in (0, 3600, 0, -3600)
    ]
    results = run_workers(redis_server.client(), redis_server.url, "race", options)
    assert [r["errors"] for r in results] == [0, 0, 0, 0], results
    assert sum(r["probes"] for r in results) == 1, results
    assert sum(r["rejected"] for r in results) == 199, results
    assert sum(r["admitted_closed"] for r in results) == 0
    transitions = Counter(t for r in results for t in map(tuple, r["transitions"]))
    assert transitions == Counter({("open", "half_open"): 1}), results
