"""A Cluster primary dies in the middle of a storm: calls keep returning, state converges after promotion."""

from __future__ import annotations

import threading
import time

from redis.crc import key_slot

from otel_breaker.breaker import REJECTED, CircuitBreakerConfig, State
from otel_breaker.store.redis import RedisStore
from tests.store.conftest import wait_for, wait_watching
from tests.store.test_cluster import tools_on_every_node

#: A generous bound for "nothing hangs": no single call may take longer than this.
CALL_BOUND_S = 3.0


def test_primary_killed_during_a_storm(make_cluster, prefix):
    cluster = make_cluster(replicas=1, password="fail-over")
    url = cluster.url("redis+cluster")
    stores = [RedisStore.from_url(url, prefix=prefix) for _ in range(2)]
    try:
        healthy = tools_on_every_node(cluster, stores[0], per_node=1)
        victim = cluster.node_for_slot(key_slot(stores[0].key_for(healthy[0]).encode()))
        dead = next(
            name
            for name in (f"dead_{i}" for i in range(1000))
            if cluster.node_for_slot(key_slot(stores[0].key_for(name).encode())) is victim
        )
        config = CircuitBreakerConfig(failure_threshold=3, recovery_timeout=600)
        breakers = [{tool: store.create(tool, config) for tool in [*healthy, dead]} for store in stores]
        reached_dead = [0]

        def dead_tool():
            reached_dead[0] += 1
            raise ConnectionError("refused")

        wait_watching(*stores)  # both workers hear the opening below
        for _ in range(3):
            try:
                breakers[0][dead].call(dead_tool)
            except ConnectionError:
                pass
        assert breakers[0][dead].state is State.OPEN
        for tool in healthy:
            assert breakers[1][tool].call(lambda tool=tool: tool) == tool
        wait_for(lambda: breakers[1][dead].state is State.OPEN, what="the opening to reach the other worker")
        with cluster.client(victim) as client:
            assert client.execute_command("WAIT", 1, 5000) == 1  # the replica has the open breaker too
        reached_before = reached_dead[0]

        stop = threading.Event()
        tally = {"calls": 0, "lost": 0, "errors": [], "slowest": 0.0, "dead_rejected": 0}
        lock = threading.Lock()

        def storm(mine: dict) -> None:
            while not stop.is_set():
                for tool in healthy:
                    started = time.monotonic()
                    try:
                        value = mine[tool].call(lambda tool=tool: tool)
                    except Exception as exc:  # a lost call: must not happen
                        value = exc
                    took = time.monotonic() - started
                    with lock:
                        tally["calls"] += 1
                        tally["slowest"] = max(tally["slowest"], took)
                        if value != tool:
                            tally["lost"] += 1
                            tally["errors"].append(repr(value))
                if mine[dead].try_acquire() == REJECTED:
                    with lock:
                        tally["dead_rejected"] += 1

        threads = [threading.Thread(target=storm, args=(mine,), daemon=True) for mine in breakers for _ in range(2)]
        for thread in threads:
            thread.start()
        time.sleep(0.3)  # the storm is under way before the primary dies
        killed_at = time.monotonic()
        victim.kill()

        def converged() -> bool:
            for store, mine in zip(stores, breakers, strict=True):
                if store.degraded:
                    return False
                errors = store.error_count
                if mine[dead].refresh() is not State.OPEN or store.error_count != errors:
                    return False
            return True

        wait_for(converged, timeout=30, what="the stores to converge after the fail-over")
        seconds = time.monotonic() - killed_at
        time.sleep(0.3)  # and the storm goes on against the promoted replica
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        assert not any(thread.is_alive() for thread in threads), "a storm thread hung"
        print(
            f"cluster fail-over: {tally['calls']} healthy calls, {tally['lost']} lost, converged in {seconds:.2f}s, "
            f"slowest call {tally['slowest']:.3f}s, store errors {[s.error_count for s in stores]}"
        )
        assert tally["lost"] == 0, tally["errors"][:5]
        assert tally["calls"] > 0 and tally["dead_rejected"] > 0
        assert tally["slowest"] < CALL_BOUND_S, tally
        assert reached_dead[0] == reached_before  # the open breaker stayed open through the fail-over
        assert any(s.error_count for s in stores)  # the outage was real and was counted
        # the promoted replica serves the victim's slots with the state it had
        client = cluster.cluster_client()
        try:
            assert client.hget(stores[0].key_for(dead), "st") == b"1"
        finally:
            client.close()
    finally:
        for store in stores:
            store.close()
