"""``run_around``: a framework call that is a run for as long as its result is being consumed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from otel_breaker import runs
from otel_breaker.instrumentation.run_results import as_run, run_around


@pytest.fixture
def closed():
    """The runs closed while a test runs, in order."""
    seen: list[runs.Run] = []
    runs.CLOSE_LISTENERS.append(seen.append)
    yield seen
    runs.CLOSE_LISTENERS.remove(seen.append)


def current_id() -> str | None:
    found = runs.current_run()
    return None if found is None else found.id


def test_a_value_is_a_run_that_ends_with_the_call(closed):
    seen = run_around(current_id, (), {}, "fw")
    assert seen is not None
    assert [r.id for r in closed] == [seen]
    assert runs.current_run() is None


def test_a_coroutine_is_a_run_while_it_is_awaited(closed):
    async def work() -> str | None:
        await asyncio.sleep(0)
        return current_id()

    pending = run_around(work, (), {}, "fw")
    assert runs.current_run() is None and closed == []  # nothing ran yet, nothing leaked
    seen = asyncio.run(pending)
    assert seen is not None and [r.id for r in closed] == [seen]


def test_a_generator_is_a_run_step_by_step_and_ends_with_its_last_item(closed):
    def steps() -> Iterator[str | None]:
        yield current_id()
        yield current_id()

    stream = run_around(steps, (), {}, "fw")
    first = next(stream)
    assert runs.current_run() is None  # the consumer is outside the run between steps
    second = next(stream)
    assert first is not None and first == second and closed == []
    assert list(stream) == []
    assert [r.id for r in closed] == [first]


def test_an_async_generator_is_a_run_step_by_step(closed):
    async def steps() -> AsyncIterator[str | None]:
        yield current_id()
        yield current_id()

    async def consume() -> list[str | None]:
        return [item async for item in run_around(steps, (), {}, "fw")]

    first, second = asyncio.run(consume())
    assert first is not None and first == second
    assert [r.id for r in closed] == [first]


def test_inside_a_run_the_call_joins_it(closed):
    with runs.run("outer") as outer:
        assert run_around(current_id, (), {}, "fw") == outer.id
        assert runs.current_run() is outer
    assert [r.id for r in closed] == ["outer"]


def test_a_call_that_raises_ends_its_run(closed):
    def broken() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError):
        run_around(broken, (), {}, "fw")
    assert len(closed) == 1 and runs.current_run() is None


def test_as_run_is_a_patch_target_wrapper(closed):
    wrapper = as_run("fw")
    assert wrapper(current_id, object(), (), {}) == closed[0].id
    assert closed[0].framework == "fw"
