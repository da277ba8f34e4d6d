"""Calls per second through the Redis store on loopback, sync and async, against the in-memory store,
on one node and on a 3-primary Redis Cluster.

Each case also counts the script runs (EVALSHA, summed over every node) per
call: the closed path of a proven breaker is one round trip, the open path none.

Each benchmark round runs a batch of ``BATCH`` guarded calls; per-call time is
the round time divided by ``BATCH``. Run with ``pytest benchmarks/test_redis_store.py``
(``--benchmark-disable`` runs every case once, as a quick check).
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
import uuid

import pytest

redis = pytest.importorskip("redis", reason="the redis client is not installed")

from otel_breaker.breaker import REJECTED, CircuitBreakerConfig  # noqa: E402
from otel_breaker.classify import SUCCESS  # noqa: E402
from otel_breaker.store.memory import MemoryStore  # noqa: E402
from otel_breaker.store.redis import RedisStore  # noqa: E402

BATCH = 200
REDIS_SERVER = shutil.which("redis-server")


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (.ci/run installs Debian's redis-server)")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    workdir = tmp_path_factory.mktemp("redis-bench")
    process = subprocess.Popen(
        [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 10
    while True:  # bounded polling for the server to accept connections
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                process.kill()
                raise
            time.sleep(0.02)
    yield f"redis://127.0.0.1:{port}/0"
    client.close()
    process.terminate()
    process.wait(timeout=10)


def _start_node(workdir, port: int, *extra: str) -> subprocess.Popen:
    process = subprocess.Popen(
        [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", *extra],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 10
    while True:  # bounded polling for the server to accept connections
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                process.kill()
                raise
            time.sleep(0.02)
    client.close()
    return process


def _cluster_port() -> int:
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port + 10000 <= 65535:
            return port


@pytest.fixture(scope="module")
def cluster_ports(tmp_path_factory):
    """A 3-primary Redis Cluster on loopback."""
    if REDIS_SERVER is None or shutil.which("redis-cli") is None:
        pytest.skip("redis-server/redis-cli are not installed (.ci/run installs them)")
    ports = [_cluster_port() for _ in range(3)]
    processes = []
    try:
        for port in ports:
            workdir = tmp_path_factory.mktemp(f"cluster{port}")
            processes.append(_start_node(workdir, port, "--cluster-enabled", "yes"))
        subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports), "--cluster-yes"],
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=60,
        )
        deadline = time.monotonic() + 30
        while not all(redis.Redis(port=p).cluster("info")["cluster_state"] == "ok" for p in ports):
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not come up")
            time.sleep(0.05)
        yield ports
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)


def _evalsha_calls(ports: list[int]) -> int:
    total = 0
    for port in ports:
        with redis.Redis(port=port) as client:
            total += int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
    return total


@pytest.fixture(params=["single", "cluster"])
def deployment(request, redis_url):
    """(store URL, ports whose script runs are counted) for one node and for a Cluster."""
    if request.param == "single":
        return redis_url, [int(redis_url.rsplit(":", 1)[1].split("/")[0])]
    ports = request.getfixturevalue("cluster_ports")
    return f"redis://127.0.0.1:{ports[1]}/0", ports


def _count_round_trips(ports, run) -> float:
    before = _evalsha_calls(ports)
    run()
    return (_evalsha_calls(ports) - before) / BATCH


def test_sync_shared_closed(benchmark, deployment):
    """Closed and proven healthy: ``acquire`` is local, ``record`` is the call's one round trip."""
    url, ports = deployment
    store = RedisStore.from_url(url, prefix=f"bench{uuid.uuid4().hex[:6]}")
    try:
        breaker = _closed(store.create("bench_closed", CircuitBreakerConfig()))
        _watching(store)
        batch = _sync_batch(breaker)
        assert _count_round_trips(ports, batch) == 1.0
        benchmark(batch)
        assert store.error_count == 0
    finally:
        store.close()


def test_sync_shared_open(benchmark, deployment):
    """Open with a known retry-after: rejected locally, no round trip."""
    url, ports = deployment
    store = RedisStore.from_url(url, prefix=f"bench{uuid.uuid4().hex[:6]}")
    try:
        breaker = store.create("bench_open", CircuitBreakerConfig())
        _watching(store)
        breaker.force_open(duration=3600)
        assert breaker.try_acquire() == REJECTED
        batch = _sync_batch(breaker)
        assert _count_round_trips(ports, batch) == 0.0
        benchmark(batch)
        assert store.error_count == 0
    finally:
        store.close()


@pytest.fixture
def redis_store(redis_url):
    store = RedisStore.from_url(redis_url, prefix=f"bench{uuid.uuid4().hex[:6]}")
    yield store
    store.close()


def _watching(store: RedisStore) -> None:
    deadline = time.monotonic() + 5
    while not store.watching and time.monotonic() < deadline:  # the change feed subscribes in the background
        time.sleep(0.001)


def tool() -> str:
    return "ok"


async def atool() -> str:
    return "ok"


def _sync_batch(breaker):
    call = breaker.call

    def batch() -> None:
        for _ in range(BATCH):
            try:
                call(tool)
            except Exception:  # rejected (open path)
                pass

    return batch


def _closed(breaker):
    assert breaker.call(tool) == "ok"  # proven healthy: closed-state acquire is local from here on
    return breaker


def test_sync_memory_closed(benchmark):
    breaker = MemoryStore().create("bench", CircuitBreakerConfig())
    benchmark(_sync_batch(breaker))


def test_sync_redis_closed(benchmark, redis_store):
    breaker = _closed(redis_store.create("bench", CircuitBreakerConfig()))
    _watching(redis_store)
    benchmark(_sync_batch(breaker))
    assert redis_store.error_count == 0


def test_sync_redis_open_rejects_locally(benchmark, redis_store):
    breaker = redis_store.create("bench_open", CircuitBreakerConfig())
    breaker.force_open(duration=3600)
    assert breaker.try_acquire() == REJECTED
    benchmark(_sync_batch(breaker))
    assert redis_store.error_count == 0


def test_sync_memory_open(benchmark):
    breaker = MemoryStore().create("bench_open", CircuitBreakerConfig())
    breaker.force_open(duration=3600)
    benchmark(_sync_batch(breaker))


def _async_batch(loop, run_one):
    async def batch() -> None:
        for _ in range(BATCH):
            await run_one()

    return lambda: loop.run_until_complete(batch())


def test_async_memory_closed(benchmark):
    breaker = MemoryStore().create("bench_async", CircuitBreakerConfig())
    loop = asyncio.new_event_loop()
    try:
        benchmark(_async_batch(loop, lambda: breaker.acall(atool)))
    finally:
        loop.close()


def test_async_redis_closed_guarded(benchmark, redis_store):
    """``breaker.acall``: the guard's async path (decisions through the sync client)."""
    breaker = _closed(redis_store.create("bench_async", CircuitBreakerConfig()))
    _watching(redis_store)
    loop = asyncio.new_event_loop()
    try:
        benchmark(_async_batch(loop, lambda: breaker.acall(atool)))
    finally:
        loop.close()


def test_async_redis_closed_asyncio_client(benchmark, redis_url):
    """``aacquire``/``arecord`` over ``redis.asyncio``: the event loop never blocks on Redis."""
    import redis.asyncio

    loop = asyncio.new_event_loop()
    client = redis.asyncio.Redis.from_url(redis_url, socket_timeout=0.05)
    store = RedisStore(client, prefix=f"bench{uuid.uuid4().hex[:6]}")
    breaker = _closed(store.create("bench_aio", CircuitBreakerConfig()))
    _watching(store)

    async def one() -> None:
        permit = await breaker.atry_acquire()
        await atool()
        await breaker.aon_outcome(permit, SUCCESS)

    try:
        benchmark(_async_batch(loop, one))
        assert store.error_count == 0
    finally:
        store.close()
        loop.run_until_complete(client.aclose())
        loop.close()
