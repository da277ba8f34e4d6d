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


class Dead(Exception):
    pass


@pytest.mark.parametrize("backend", ["asyncio", "uvloop", "trio"])
def test_a_retry_storm_is_bounded_under_every_event_loop(make_store, backend):
    """10 tasks (each a worker with its own store) try a dead tool 3 times: together
    they reach it at most 6 times, because every decision is shared through Redis."""
    config = CircuitBreakerConfig(failure_threshold=THRESHOLD, recovery_timeout=3600)
    stores = [make_store(watch=False) for _ in range(TASKS)]
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
    async_store = make_store(watch=False)
    async_side = async_store.create("shared_loop", config)
    sync_side = make_store(watch=False).create("shared_loop", config)

    async def fail() -> None:
        raise Dead

    async def main() -> None:
        for _ in range(2):
            with pytest.raises(Dead):
                await async_side.acall(fail)

    trio.run(main)
    assert async_store.error_count == 0
    assert sync_side.call(lambda: "ran")["circuit_open"] is True
