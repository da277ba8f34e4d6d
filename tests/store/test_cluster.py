"""The shared store on a real Redis Cluster: any node's URL, every shard, the feed, the CLI, a storm."""

from __future__ import annotations

import asyncio
import json

import pytest
import redis
from redis.crc import key_slot

from otel_breaker.breaker import CircuitBreakerConfig, State
from otel_breaker.cli import main
from otel_breaker.store.redis import RedisStore, StoreError
from tests.store.conftest import SOCKET_TIMEOUT, wait_for, wait_watching
from tests.store.multiproc import run_workers

THRESHOLD = 3
HALF_OPEN = 1


def tools_on_every_node(cluster, store: RedisStore, per_node: int = 2) -> list[str]:
    """Tool names whose keys land ``per_node`` times on each primary."""
    chosen: dict[int, list[str]] = {node.port: [] for node in cluster.primaries()}
    index = 0
    while any(len(names) < per_node for names in chosen.values()):
        name = f"tool_{index}"
        index += 1
        node = cluster.node_for_slot(key_slot(store.key_for(name).encode()))
        if len(chosen[node.port]) < per_node:
            chosen[node.port].append(name)
    return [name for names in chosen.values() for name in names]


@pytest.fixture
def cluster_store(cluster, prefix):
    stores: list[RedisStore] = []

    def make(url: str | None = None, **options) -> RedisStore:
        options.setdefault("prefix", prefix)
        options.setdefault("socket_timeout", SOCKET_TIMEOUT)
        store = RedisStore.from_url(url or cluster.url(), **options)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


@pytest.mark.parametrize("node", [0, 1, 2])
def test_the_url_of_any_node_is_used_as_a_cluster(cluster, cluster_store, node):
    url = f"redis://127.0.0.1:{cluster.nodes[node].port}/0"
    store = cluster_store(url)
    tools = tools_on_every_node(cluster, store)
    breakers = [store.create(tool, CircuitBreakerConfig(failure_threshold=2)) for tool in tools]
    for breaker in breakers:
        assert breaker.call(lambda: "ok") == "ok"
    assert store.mode == "cluster"
    assert store.error_count == 0, store.last_error
    # every key lives on the node that owns its slot: nothing was redirected away or lost
    for tool in tools:
        key = store.key_for(tool)
        owner = cluster.node_for_slot(key_slot(key.encode()))
        with cluster.client(owner) as client:
            assert client.exists(key) == 1


def test_explicit_cluster_scheme_with_several_seed_nodes(cluster, cluster_store):
    seeds = ",".join(f"127.0.0.1:{n.port}" for n in cluster.nodes)
    store = cluster_store(f"redis+cluster://{seeds}")
    assert store.mode == "cluster"
    breaker = store.create("seeded", CircuitBreakerConfig())
    assert breaker.call(lambda: 1) == 1
    assert store.error_count == 0, store.last_error


def test_workers_share_every_shard_and_follow_each_other_through_the_feed(cluster, cluster_store):
    a, b = cluster_store(), cluster_store()
    tools = tools_on_every_node(cluster, a)
    config = CircuitBreakerConfig(failure_threshold=2, recovery_timeout=60)
    mine = {tool: a.create(tool, config) for tool in tools}
    theirs = {tool: b.create(tool, config) for tool in tools}
    for tool in tools:
        assert theirs[tool].call(lambda: "ok") == "ok"  # proven healthy: b admits locally from now on
    wait_watching(a, b)

    def dead():
        raise ConnectionError("down")

    for tool in tools:
        for _ in range(2):
            with pytest.raises(ConnectionError):
                mine[tool].call(dead)
        assert mine[tool].state is State.OPEN
    # b learns of each opening from the feed, whichever node published it
    for tool in tools:
        wait_for(lambda tool=tool: theirs[tool].state is State.OPEN, what=f"{tool} to open in the other worker")
    assert a.error_count == b.error_count == 0


def test_async_calls_use_an_asyncio_cluster_client(cluster, cluster_store):
    store = cluster_store()
    tools = tools_on_every_node(cluster, store, per_node=1)
    breakers = [store.create(tool, CircuitBreakerConfig()) for tool in tools]

    async def run() -> list[str]:
        return [await breaker.acall(asyncio.sleep, 0, tool) for breaker, tool in zip(breakers, tools, strict=True)]

    assert asyncio.run(run()) == tools
    assert store.error_count == 0, store.last_error
    assert store.mode == "cluster"


def test_cli_verbs_cover_every_primary(cluster, cluster_store, prefix, capsys):
    store = cluster_store()
    tools = tools_on_every_node(cluster, store)
    for tool in tools:
        store.create(tool, CircuitBreakerConfig()).call(lambda: None)
    args = ["--store", cluster.url(), "--prefix", prefix]
    assert main(["status", "--json", *args]) == 0
    rows = json.loads(capsys.readouterr().out)["breakers"]
    assert sorted(row["tool"] for row in rows) == sorted(tools)

    assert main(["open", tools[-1], *args]) == 0
    assert "opened 1 breaker" in capsys.readouterr().out
    main(["status", "--json", *args])
    states = {row["tool"]: row["state"] for row in json.loads(capsys.readouterr().out)["breakers"]}
    assert states[tools[-1]] == "open" and all(states[t] == "closed" for t in tools[:-1])

    assert main(["close", tools[-1], *args]) == 0
    assert main(["reset", "--all", *args]) == 0
    assert f"reset {len(tools)} breakers" in capsys.readouterr().out.splitlines()[-1]
    main(["status", *args])
    table = capsys.readouterr().out
    assert all(tool in table for tool in tools)


def test_retry_storm_on_a_cluster_is_bounded_for_every_tool(cluster, redis_server, prefix):
    probe = RedisStore.from_url(cluster.url(), prefix=prefix, watch=False, socket_timeout=SOCKET_TIMEOUT)
    try:
        tools = tools_on_every_node(cluster, probe)
    finally:
        probe.close()
    options = [
        {
            "store": cluster.url(),
            "prefix": prefix,
            "tools": tools,
            "failure_threshold": THRESHOLD,
            "half_open_max_calls": HALF_OPEN,
            "recovery_timeout": 60.0,
            "attempts": 3,
            "tool_delay": 0.1,
        }
        for _ in range(10)
    ]
    results = run_workers(redis_server.client(), redis_server.url, "storm", options, timeout=90)
    by_tool = results[0]["_reached_by_tool"]
    print(f"cluster retry storm, calls that reached each dead tool: {by_tool}")
    assert len(tools) == 6
    for tool in tools:
        assert THRESHOLD <= by_tool.get(tool, 0) <= THRESHOLD + HALF_OPEN, by_tool
    assert sum(r["reached"] + r["rejected"] for r in results) == 10 * 3 * len(tools)
    assert all(r["errors"] == 0 for r in results), results


def test_cluster_with_a_password(make_cluster, prefix):
    cluster = make_cluster(password="cluster-secret")
    store = RedisStore.from_url(
        f"redis+cluster://127.0.0.1:{cluster.nodes[1].port}",
        password="cluster-secret",
        prefix=prefix,
        socket_timeout=SOCKET_TIMEOUT,
    )
    try:
        breakers = [store.create(tool, CircuitBreakerConfig()) for tool in tools_on_every_node(cluster, store, 1)]
        assert [b.call(lambda: 7) for b in breakers] == [7, 7, 7]
        assert store.error_count == 0, store.last_error
    finally:
        store.close()
    # the password in the URL, any node, detected as a cluster
    store = RedisStore.from_url(cluster.url(), prefix=prefix, socket_timeout=SOCKET_TIMEOUT)
    try:
        store.check()
        assert store.mode == "cluster"
    finally:
        store.close()
    wrong = RedisStore.from_url(f"redis://:nope@127.0.0.1:{cluster.nodes[2].port}/0", prefix=prefix)
    try:
        with pytest.raises(StoreError, match="refused the credentials"):
            wrong.check()
        breaker = wrong.create("tool", CircuitBreakerConfig())
        assert breaker.call(lambda: "still runs") == "still runs"  # decided locally, logged once
        assert wrong.degraded
    finally:
        wrong.close()
    with redis.Redis(port=cluster.nodes[0].port) as anonymous, pytest.raises(redis.AuthenticationError):
        anonymous.ping()


def test_a_forked_worker_builds_its_own_cluster_client(cluster, cluster_store):
    import os
    import time

    store = cluster_store()
    tools = tools_on_every_node(cluster, store, per_node=1)
    breakers = [store.create(tool, CircuitBreakerConfig()) for tool in tools]
    assert [b.call(lambda: 1) for b in breakers] == [1, 1, 1]
    parent_client = store.client
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: every tool still shared through the cluster, with a client of its own
        try:
            ok = [b.call(lambda: 2) for b in breakers] == [2, 2, 2]
            own = store.client is not parent_client
            os.write(write, f"{ok and own and store.error_count == 0}".encode())
        finally:
            os._exit(0)
    os.close(write)
    deadline = time.monotonic() + 20
    while os.waitpid(pid, os.WNOHANG) == (0, 0):  # bounded: a hung child fails the test
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            raise AssertionError("the forked worker hung")
        time.sleep(0.01)
    assert os.read(read, 100) == b"True"
    assert [b.call(lambda: 3) for b in breakers] == [3, 3, 3]
    assert store.error_count == 0
