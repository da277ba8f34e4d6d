"""The shared store behind Redis Sentinel: the primary it names, followed through a fail-over."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis

from otel_breaker.breaker import CircuitBreakerConfig, State
from otel_breaker.store.redis import RedisStore, StoreError
from tests.store.conftest import SOCKET_TIMEOUT, wait_for, wait_watching


def test_store_follows_sentinel_through_a_promotion(make_sentinel, prefix):
    deployment = make_sentinel(password="data-secret", sentinel_password="sentinel-secret", promotable=True)
    stores = [RedisStore.from_url(deployment.url(), prefix=prefix) for _ in range(2)]
    try:
        config = CircuitBreakerConfig(failure_threshold=2, recovery_timeout=600)
        a, b = (store.create("flaky", config) for store in stores)
        healthy = [store.create("healthy", config) for store in stores]
        for breaker in healthy:
            assert breaker.call(lambda: "ok") == "ok"
        assert all(store.mode == "sentinel" for store in stores)
        wait_watching(*stores)
        for _ in range(2):
            with pytest.raises(ConnectionError):
                a.call(lambda: (_ for _ in ()).throw(ConnectionError("down")))
        wait_for(lambda: b.state is State.OPEN, what="the other worker to see the opening")

        stop = threading.Event()
        tally = {"calls": 0, "lost": 0, "slowest": 0.0}

        def storm(breaker) -> None:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    value = breaker.call(lambda: "ok")
                except Exception:
                    value = None
                tally["calls"] += 1
                tally["lost"] += value != "ok"
                tally["slowest"] = max(tally["slowest"], time.monotonic() - started)

        threads = [threading.Thread(target=storm, args=(breaker,), daemon=True) for breaker in healthy]
        for thread in threads:
            thread.start()
        old_port = deployment.primary_port()
        started = time.monotonic()
        with deployment.sentinel_client() as sentinel:
            assert sentinel.execute_command("SENTINEL", "FAILOVER", deployment.SERVICE)
        wait_for(lambda: deployment.primary_port() != old_port, timeout=30, what="sentinel to promote the replica")
        promoted = time.monotonic() - started

        new_port = deployment.primary_port()

        def writes_reach_the_new_primary() -> bool:
            if any(store.degraded for store in stores):
                return False
            errors = [store.error_count for store in stores]
            a.force_close()  # a write; the old primary no longer replicates to the new one
            with redis.Redis(port=new_port, password="data-secret", socket_timeout=SOCKET_TIMEOUT) as client:
                landed = client.hget(stores[0].key_for("flaky"), "st") == b"0"
            return landed and [store.error_count for store in stores] == errors

        wait_for(writes_reach_the_new_primary, timeout=30, what="the store to write to the new primary")
        converged = time.monotonic() - started

        def old_primary_demoted() -> bool:
            with redis.Redis(port=old_port, password="data-secret", socket_timeout=SOCKET_TIMEOUT) as client:
                return client.info("replication")["role"] == "slave"

        wait_for(old_primary_demoted, timeout=30, what="sentinel to demote the old primary")
        # the other worker reads the new primary, and its change feed listens there too
        wait_for(lambda: b.refresh() is State.CLOSED, timeout=10, what="the other worker to read the new primary")
        feed_moved = time.monotonic()

        def heard_from_the_new_primary() -> bool:
            a.force_open()  # published by the new primary each time
            time.sleep(0.05)
            return b.state is State.OPEN

        wait_for(heard_from_the_new_primary, timeout=10, what="the other worker's feed to follow the new primary")
        feed_moved = time.monotonic() - feed_moved
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        assert deployment.primary_port() == new_port
        with redis.Redis(port=new_port, password="data-secret") as client:
            assert client.info("replication")["role"] == "master"
            assert client.hget(stores[0].key_for("flaky"), "st") == b"1"
        print(
            f"sentinel promotion: {old_port} -> {new_port}, promoted after {promoted:.2f}s, store writing to it after "
            f"{converged:.2f}s, change feed after {feed_moved:.2f}s more; {tally['calls']} healthy calls, "
            f"{tally['lost']} lost, slowest {tally['slowest']:.3f}s"
        )
        assert tally["lost"] == 0 and tally["calls"] > 0
        assert not any(thread.is_alive() for thread in threads)

        async def async_call() -> str:
            return await healthy[0].acall(asyncio.sleep, 0, "async ok")

        errors = stores[0].error_count
        assert asyncio.run(async_call()) == "async ok"
        assert stores[0].error_count == errors, stores[0].last_error
    finally:
        for store in stores:
            store.close()


def test_sentinel_credentials_are_checked(make_sentinel, prefix):
    deployment = make_sentinel(password="data-secret", sentinel_password="sentinel-secret")
    port = deployment.sentinel.port
    good = f"redis+sentinel://:data-secret@127.0.0.1:{port}/mymaster?sentinel_password=sentinel-secret"
    store = RedisStore.from_url(good, prefix=prefix, socket_timeout=SOCKET_TIMEOUT)
    try:
        store.check()
    finally:
        store.close()
    # a client of your own from redis-py's Sentinel works the same way
    from redis.backoff import NoBackoff
    from redis.retry import Retry
    from redis.sentinel import Sentinel

    sentinel = Sentinel([("127.0.0.1", port)], sentinel_kwargs={"password": "sentinel-secret"})
    client = sentinel.master_for(
        "mymaster", password="data-secret", socket_timeout=SOCKET_TIMEOUT, retry=Retry(NoBackoff(), 0)
    )
    store = RedisStore(client, prefix=prefix)
    try:
        assert store.create("own_client", CircuitBreakerConfig()).call(lambda: "ok") == "ok"
        assert store.mode == "sentinel" and store.error_count == 0, store.last_error
    finally:
        store.close()
    for url, message in [
        (f"redis+sentinel://:wrong@127.0.0.1:{port}/mymaster?sentinel_password=sentinel-secret", "credentials"),
        (f"redis+sentinel://:data-secret@127.0.0.1:{port}/mymaster?sentinel_password=wrong", "Sentinel"),
        (f"redis+sentinel://:data-secret@127.0.0.1:{port}/nosuch?sentinel_password=sentinel-secret", "Sentinel"),
    ]:
        store = RedisStore.from_url(url, prefix=prefix)
        try:
            with pytest.raises(StoreError, match=message) as info:
                store.check()
            assert "wrong" not in str(info.value) and "secret" not in str(info.value)
        finally:
            store.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+sentinel://127.0.0.1:26379", "no service name"),
        ("redis+sentinel://127.0.0.1:26379/mymaster/zero", "numeric db"),
        ("redis+sentinel://127.0.0.1:notaport/mymaster", "the port must be a number"),
        ("redis+cluster://127.0.0.1:7000/3", "only database 0"),
        ("redis+cluster://127.0.0.1:7000,:7001", "no host"),
    ],
)
def test_malformed_cluster_and_sentinel_urls_are_named(url, message):
    with pytest.raises(StoreError, match=message):
        RedisStore.from_url(url)
