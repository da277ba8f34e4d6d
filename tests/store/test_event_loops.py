"""The Redis store under every event loop: asyncio, and trio (directly and through anyio).

Async calls must reach Redis whichever loop runs them; an error from the store's own
plumbing would be taken for a Redis outage, every process would decide alone, and a
retry storm would reach a dead tool once per try instead of a threshold's worth.
"""

from __future__ import annotations

import anyio
import pytest

from otel_breaker import CircuitBreakerConfig

pytest.importorskip("trio")

TASKS = 10
TRIES = 3
THRESHOLD = 3
#: Calls that may reach the dead tool in the storm: the threshold, and as many again
#: that were admitted before the breaker opened.
STORM_BOUND = 2 * THRESHOLD
#: Generous: these tests are about event loops, and a loaded machine must not turn a slow
#: reply into an outage (the store's own 50 ms default is tested elsewhere).
SOCKET_TIMEOUT = 2.0


class Dead(Exception):
    pass


@pytest.mark.parametrize("backend", ["asyncio", "uvloop", "trio"])
def test_a_retry_storm_is_bounded_under_every_event_loop(make_store, backend):
    """10 tasks (each a worker with its own store) try a dead tool 3 times: together
    they reach it at most 6 times, because every decision is shared through Redis."""
    config = CircuitBreakerConfig(failure_threshold=THRESHOLD, recovery_timeout=3600)
    stores = [make_store(watch=False, socket_timeout=SOCKET_TIMEOUT) for _ in range(TASKS)]
    breakers = [store.create("dead_tool", config) for store in stores]
    reached, rejected = [], []

    async def dead() -> None:
        reached.append(1)
        await anyio.sleep(0.01)  # the tool takes a moment: the other tasks run meanwhile
        raise Dead

    async def worker(index: int) -> None:
        for _ in range(TRIES):
            try:
                answer = await breakers[index].acall(dead)
            except Dead:
                continue
            rejected.append(answer["circuit_open"])

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for index in range(TASKS):
                group.start_soon(worker, index)

    if backend == "uvloop":
        pytest.importorskip("uvloop")
        anyio.run(main, backend="asyncio", backend_options={"use_uvloop": True})
    else:
        anyio.run(main, backend=backend)
    print(f"{backend}: {len(reached)} of {TASKS * TRIES} calls reached the dead tool")
    assert [store.error_count for store in stores] == [0] * TASKS, [store.last_error for store in stores]
    assert len(reached) <= STORM_BOUND
    assert rejected == [True] * (TASKS * TRIES - len(reached))


def test_trio_calls_share_state_with_sync_calls(make_store):
    """A breaker opened by trio tasks is open for a thread of another worker."""
    import trio

    config = CircuitBreakerConfig(failure_threshold=2, recovery_timeout=3600)
    async_store = make_store(watch=False, socket_timeout=SOCKET_TIMEOUT)
    async_side = async_store.create("shared_loop", config)
    sync_side = make_store(watch=False, socket_timeout=SOCKET_TIMEOUT).create("shared_loop", config)

    async def fail() -> None:
        raise Dead

    async def main() -> None:
        for _ in range(2):
            with pytest.raises(Dead):
                await async_side.acall(fail)

    trio.run(main)
    assert async_store.error_count == 0
    assert sync_side.call(lambda: "ran")["circuit_open"] is True


def test_a_trio_task_cancelled_during_a_redis_call_leaves_the_store_healthy(redis_server, prefix):
    """The cancelled task waits for the Redis call in flight, then is cancelled as trio
    cancels: the tool does not run, and the store is not taken for an outage."""
    import threading
    import time

    import trio

    from otel_breaker.store.redis import RedisStore

    entered = threading.Event()

    class SlowStore(RedisStore):
        def run_script(self, *args, **kwargs):
            entered.set()
            time.sleep(0.2)  # a slow Redis round trip, in the store's worker thread
            return super().run_script(*args, **kwargs)

    store = SlowStore.from_url(redis_server.url, prefix=prefix, watch=False, socket_timeout=SOCKET_TIMEOUT)
    try:
        breaker = store.create("slow_redis", CircuitBreakerConfig(failure_threshold=2))
        ran = []

        async def tool() -> str:
            ran.append(1)
            return "ok"

        async def main() -> bool:
            with trio.move_on_after(0.05) as scope:
                await breaker.acall(tool)
            return scope.cancelled_caught

        assert trio.run(main) is True
        assert entered.is_set() and ran == []
        assert store.error_count == 0 and not store.degraded

        async def again() -> str:
            return await breaker.acall(tool)

        assert trio.run(again) == "ok"
        assert store.error_count == 0
    finally:
        store.close()


def test_a_store_given_an_asyncio_client_works_under_trio_through_its_sync_twin(redis_server, prefix):
    """An asyncio client runs only in an asyncio loop: under trio the store uses the sync
    client it derives from the same connection options."""
    import redis.asyncio
    import trio

    from otel_breaker.store.redis import RedisStore

    client = redis.asyncio.Redis.from_url(redis_server.url, socket_timeout=SOCKET_TIMEOUT)
    store = RedisStore(client, prefix=prefix, watch=False)
    try:
        breaker = store.create("given_async", CircuitBreakerConfig(failure_threshold=2))

        async def fail() -> None:
            raise Dead

        async def main() -> None:
            for _ in range(2):
                with pytest.raises(Dead):
                    await breaker.acall(fail)
            assert (await breaker.acall(fail))["circuit_open"] is True

        trio.run(main)
        assert store.error_count == 0
    finally:
        store.close()
