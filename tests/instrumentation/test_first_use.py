"""The lazy first-use set-up is thread-safe: calls racing to be first all wait for it.

An agent whose first model turn issues parallel tool calls makes its first
guarded calls from several threads at once. The set-up that runs before the
first call (the SDK from ``OTEL_*`` variables) must be complete before any of
them runs, or their spans and metric points go to the not-yet-configured
providers and are lost.
"""

from __future__ import annotations

import threading

import pytest

from otel_breaker import ToolCall
from otel_breaker.instrumentation import base
from otel_breaker.instrumentation.base import FrameworkAdapter, before_first_call

THREADS = 8


@pytest.fixture
def no_pending_set_up():
    base._run_first_use()  # nothing left over from other tests
    yield
    base._run_first_use()


def test_parallel_first_calls_all_get_their_spans_and_metric_points(no_pending_set_up):
    from otel_support import Otel

    adapter = FrameworkAdapter()
    tool_ran = threading.Semaphore(0)
    otel: list[Otel] = []

    def set_up_sdk() -> None:
        # Slow set-up: wait until the other first calls would have run their
        # tools (which they do at once on code that lets them slip past), or
        # a generous while on code that makes them wait.
        for _ in range(THREADS - 1):
            if not tool_ran.acquire(timeout=1.0):
                break
        otel.append(Otel())

    before_first_call(set_up_sdk)
    start = threading.Barrier(THREADS)
    results: list[str] = []

    def tool(i: int) -> str:
        tool_ran.release()
        return f"result {i}"

    def first_call(i: int) -> None:
        start.wait()
        results.append(adapter.run_sync(ToolCall("lookup", call_id=f"call_{i}"), tool, (i,), {}))

    threads = [threading.Thread(target=first_call, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(results) == sorted(f"result {i}" for i in range(THREADS))
    spans = otel[0].tool_spans("lookup")
    assert len(spans) == THREADS, f"{len(spans)} of {THREADS} spans exported"
    assert {s.attributes["gen_ai.tool.call.id"] for s in spans} == {f"call_{i}" for i in range(THREADS)}
    durations = otel[0].metrics()["gen_ai.execute_tool.duration"]
    assert sum(point.count for point in durations) == THREADS


def test_a_set_up_step_that_makes_a_guarded_call_itself_does_not_deadlock(no_pending_set_up):
    adapter = FrameworkAdapter()
    seen: list[str] = []

    def step() -> None:
        seen.append(adapter.run_sync(ToolCall("warm_up"), lambda: "warm", (), {}))

    before_first_call(step)
    assert adapter.run_sync(ToolCall("lookup"), lambda: "found", (), {}) == "found"
    assert seen == ["warm"]


def test_a_failing_set_up_step_is_logged_and_the_call_still_runs(no_pending_set_up, caplog):
    before_first_call(lambda: 1 / 0)
    assert FrameworkAdapter().run_sync(ToolCall("lookup"), lambda: "found", (), {}) == "found"
    assert "start-up step" in caplog.text
