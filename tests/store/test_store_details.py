"""Costs a shared store must not put on a tool call: imports, a blocked event loop, unbounded storms."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys

from otel_breaker.breaker import CircuitBreakerConfig
from otel_breaker.store.redis import RedisStore
from tests.store.multiproc import run_workers

THRESHOLD = 3
HALF_OPEN = 1

_FIRST_CALL = """
import json, sys
import otel_breaker.guards
from otel_breaker.breaker import CircuitBreakerConfig
from otel_breaker.registry import default_registry
before = {name for name in sys.modules if name == "redis" or name.startswith("redis.")}
breaker = default_registry().get("first_tool", CircuitBreakerConfig())
assert breaker.call(lambda: "ok") == "ok"
after = {name for name in sys.modules if name == "redis" or name.startswith("redis.")}
print(json.dumps({"before": sorted(before), "imported_by_the_call": sorted(after - before),
                  "store": type(default_registry().store).__name__}))
"""


def test_redis_is_imported_when_the_store_is_configured_not_by_a_call(redis_server, prefix):
    env = {"OTEL_BREAKER_STORE": f"{redis_server.url}?prefix={prefix}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", _FIRST_CALL], env=env, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["store"] == "RedisStore"
    assert "redis" in result["before"] and "redis.asyncio" in result["before"]
    assert result["imported_by_the_call"] == []


class LoopBlocked(logging.Handler):
    """asyncio's debug mode logs every callback that held the loop longer than ``slow_callback_duration``."""

    def __init__(self) -> None:
        super().__init__()
        self.slow: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        # asyncio.run's own shutdown (joining its executor's threads) is not a tool call
        if "took" in record.getMessage() and "shutdown_default_executor" not in record.getMessage():
            self.slow.append(record.getMessage())


def _run_async_calls(store: RedisStore, calls: int = 8) -> list[str]:
    breaker = store.create("async_tool", CircuitBreakerConfig(failure_threshold=1000))
    detector = LoopBlocked()
    logger = logging.getLogger("asyncio")
    logger.addHandler(detector)

    async def tool() -> str:
        await asyncio.sleep(0)  # each call ends a step of the task: a step that waited on Redis shows
        return "ok"

    async def run() -> list[str]:
        loop = asyncio.get_running_loop()
        # each call that waited on Redis in the loop would hold it for the whole socket timeout (0.25 s)
        loop.slow_callback_duration = 0.1
        return [await breaker.acall(tool) for _ in range(calls)]

    try:
        results = asyncio.run(run(), debug=True)
    finally:
        logger.removeHandler(detector)
    assert results == ["ok"] * calls
    return detector.slow


def test_async_calls_never_block_the_loop_on_a_hung_redis(make_server, prefix):
    server = make_server()
    store = RedisStore.from_url(server.url, prefix=prefix, rejoin_interval=0.0, watch=False, socket_timeout=0.25)
    try:
        server.pause()  # Redis accepts connections but never answers: every attempt waits for the timeout
        slow = _run_async_calls(store)
        assert store.error_count > 0  # every call tried Redis and timed out
        assert slow == []
    finally:
        server.resume()
        store.close()


def test_async_calls_with_only_a_sync_client_never_block_the_loop(make_server, prefix):
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    server = make_server()
    client = redis.Redis(
        port=server.port, socket_timeout=0.25, socket_connect_timeout=0.25, retry=Retry(NoBackoff(), 0)
    )
    store = RedisStore(client, prefix=prefix, rejoin_interval=0.0, watch=False)
    try:
        server.pause()
        slow = _run_async_calls(store)
        assert store.error_count > 0
        assert slow == []
    finally:
        server.resume()
        store.close()


def test_retry_storm_on_a_proven_breaker_stays_within_the_stated_bound(redis_server, prefix, make_store):
    """A tool that breaks while N calls are already in flight sees those N, then the unproven bound applies:
    at most max(failure_threshold, N) + half_open_max_calls calls in all."""
    make_store().create("web_search", CircuitBreakerConfig()).call(lambda: "ok")  # proven healthy
    workers = 10
    options = [
        {
            "store": redis_server.url,
            "prefix": prefix,
            "failure_threshold": THRESHOLD,
            "half_open_max_calls": HALF_OPEN,
            "attempts": 3,
            "tool_delay": 0.2,  # every worker's first call is in flight before any of them fails
        }
        for _ in range(workers)
    ]
    results = run_workers(redis_server.client(), redis_server.url, "storm", options)
    reached = results[0]["_reached_total"]
    print(f"proven breaker, {workers} workers in flight: {reached} of {workers * 3} calls reached the dead tool")
    assert workers <= reached <= max(THRESHOLD, workers) + HALF_OPEN, results
