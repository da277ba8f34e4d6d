"""Redis failing never stops a tool call; when it answers again, the store is used again."""

from __future__ import annotations

import logging
import time

from otel_breaker.breaker import REJECTED, CircuitBreakerConfig, State
from otel_breaker.store.redis import RedisStore
from tests.store.conftest import wait_for, wait_watching

#: The stores' socket timeout here: an outage must cost a call at most about this. Longer than a
#: worker's 50 ms default, so a busy machine's slow answer before the outage is not one.
OUTAGE_TIMEOUT = 0.5
SLACK = 1.0  # scheduling noise on a busy machine, on top of the socket timeout


def ok() -> str:
    return "ok"


def boom() -> None:
    raise ConnectionError("tool down")


def timed(breaker, fn) -> tuple[object, float]:
    start = time.monotonic()
    try:
        value = breaker.call(fn)
    except ConnectionError as exc:
        value = exc
    return value, time.monotonic() - start


def test_stopped_server_local_fallback_then_rejoin(make_server, caplog):
    server = make_server()
    store = RedisStore.from_url(server.url, prefix="outage", rejoin_interval=0.2, socket_timeout=OUTAGE_TIMEOUT)
    other = RedisStore.from_url(server.url, prefix="outage", rejoin_interval=0.2, socket_timeout=OUTAGE_TIMEOUT)
    try:
        config = CircuitBreakerConfig(failure_threshold=3, recovery_timeout=60)
        breaker = store.create("api", config)
        wait_watching(store)
        assert breaker.call(ok) == "ok"
        server.stop()
        caplog.set_level(logging.WARNING, logger="otel_breaker")
        slowest = 0.0
        outcomes = []
        for _ in range(10):
            value, elapsed = timed(breaker, ok)
            slowest = max(slowest, elapsed)
            outcomes.append(value)
        assert outcomes == ["ok"] * 10
        for _ in range(5):  # the tool fails too: the local breaker takes over and opens
            value, elapsed = timed(breaker, boom)
            slowest = max(slowest, elapsed)
        assert breaker.state is State.OPEN
        assert breaker.call(ok)["circuit_open"] is True
        assert slowest < OUTAGE_TIMEOUT + SLACK
        assert store.degraded and store.error_count >= 1
        unusable = [r for r in caplog.records if "decide per process" in r.getMessage()]
        assert len(unusable) == 1, [r.getMessage() for r in caplog.records]
        assert "cannot reach Redis" in unusable[0].getMessage()

        server.start()  # empty again: the shared breaker is fresh and closed

        def rejoined() -> bool:
            breaker.force_close()  # manual control goes to Redis whenever it can
            return not store.degraded

        wait_for(rejoined, what="the store to rejoin Redis")
        assert breaker.call(ok) == "ok"
        assert breaker.state is State.CLOSED
        assert any("answers again" in r.getMessage() for r in caplog.records)
        # the change feed is back too: another worker's change reaches this one
        wait_watching(store)
        other.create("api", config).force_open()
        wait_for(lambda: breaker.state is State.OPEN, what="the change feed to deliver the opening")
        assert breaker.try_acquire() == REJECTED
    finally:
        store.close()
        other.close()


def test_hung_server_calls_finish_within_the_socket_timeout(make_server):
    server = make_server()
    store = RedisStore.from_url(server.url, prefix="hung", rejoin_interval=0.2, socket_timeout=OUTAGE_TIMEOUT)
    try:
        breaker = store.create("api", CircuitBreakerConfig(failure_threshold=3))
        assert breaker.call(ok) == "ok"
        server.pause()
        try:
            times = [timed(breaker, ok) for _ in range(5)]
            assert [value for value, _ in times] == ["ok"] * 5
            assert max(elapsed for _, elapsed in times) < OUTAGE_TIMEOUT + SLACK
            assert store.degraded and store.error_count >= 1
        finally:
            server.resume()
        wait_for(lambda: breaker.call(ok) == "ok" and not store.degraded, what="the store to rejoin")
    finally:
        store.close()


def test_redis_down_at_start_up_is_joined_when_it_comes_up(make_server):
    server = make_server(start=False)
    store = RedisStore.from_url(server.url, prefix="late", rejoin_interval=0.1, socket_timeout=OUTAGE_TIMEOUT)
    try:
        breaker = store.create("api", CircuitBreakerConfig())
        assert breaker.call(ok) == "ok"
        assert store.degraded and store.error_count == 1
        server.start()
        wait_for(lambda: breaker.call(ok) == "ok" and not store.degraded, what="the store to join")
        assert server.client().exists(breaker.storage.key) == 1
    finally:
        store.close()
