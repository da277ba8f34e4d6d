"""What is specific to Agno beyond the shared contract: async and streamed runs,
the tool's own control-flow signals, and the model's argument mistakes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("agno")
sys.path.insert(0, str(Path(__file__).parent))

from agno.exceptions import RetryAgentRun, StopAgentRun
from contract import UNAVAILABLE, Tool, call
from driver import AgnoDriver
from status_prompt import breaker_settings

from otel_breaker.degrade import STATUS_HEADER
from otel_breaker.registry import default_registry

DRIVER = AgnoDriver()


def stats(tool: str):
    (breaker,) = default_registry().find(tool)
    return breaker.stats


async def test_async_loop_rejects_once_open(instrument, otel):
    breaker_settings(failure_threshold="2", status_in_prompt="true")
    instrument("agno")
    tool = Tool.failing("weather")
    agent = DRIVER.build([tool], [call("weather", i) for i in range(1, 5)] + ["done"])
    assert await DRIVER.arun(agent) == "done"
    assert tool.runs == 2
    sent = DRIVER.sent(agent)
    assert [UNAVAILABLE in r for r in sent[-1].tool_results] == [False, False, True, True]
    assert STATUS_HEADER in sent[-1].instructions
    assert all(s.attributes.get("gen_ai.agent.name") == "assistant" for s in otel.tool_spans("weather"))


def test_streamed_run_rejects_once_open(instrument):
    breaker_settings(failure_threshold="2")
    instrument("agno")
    tool = Tool.failing("weather")
    agent = DRIVER.build([tool], [call("weather", i) for i in range(1, 4)] + ["done"])
    text = "".join(str(e.content) for e in agent.run("go", stream=True) if type(e).__name__ == "RunContentEvent")
    assert text == "done"
    assert tool.runs == 2
    assert UNAVAILABLE in DRIVER.sent(agent)[-1].tool_results[-1]


#: What the model reads once a run spent its waste budget on a tool.
SPENT = "unavailable for the rest of this run"


@pytest.mark.parametrize("mode", ["stream", "async", "async-stream"])
def test_a_streamed_or_async_run_is_one_run_of_the_waste_budget(instrument, mode):
    """``run(stream=True)``, ``arun`` and ``arun(stream=True)``: each is one run, so its 4th call
    of the open tool reads that the run spent its budget, and the tool leaves the requests that
    follow; the next run starts whole."""
    import asyncio

    breaker_settings(failure_threshold="1", recovery_timeout="600")
    instrument("agno")
    tool = Tool.flaky("echo", failures=1)
    assert DRIVER.run(DRIVER.build([tool], [call("echo", 1), "done"])) == "done"

    async def consume(agent) -> None:
        if mode == "async":
            await agent.arun("go")
            return
        async for _ in agent.arun("go", stream=True):
            pass

    for _ in range(2):
        agent = DRIVER.build([tool, Tool.healthy("other")], [*(call("echo", i) for i in range(2, 8)), "done"])
        if mode == "stream":
            for _ in agent.run("go", stream=True):
                pass
        else:
            asyncio.run(asyncio.wait_for(consume(agent), 60))
        read = DRIVER.sent(agent)[-1].tool_results
        assert tool.runs == 1
        assert len(read) == 6
        assert all(UNAVAILABLE in r for r in read[:3]), read
        assert all(SPENT in r for r in read[3:]), read
        menus = DRIVER.tools_sent(agent)
        assert all("echo" in menu for menu in menus[:4]), menus
        assert all("echo" not in menu and "other" in menu for menu in menus[4:]), menus


@pytest.mark.parametrize("signal", [RetryAgentRun, StopAgentRun])
def test_control_flow_signals_are_neither_failure_nor_success(instrument, signal):
    instrument("agno")

    def steer(x: int) -> str:
        raise signal("steering the run")

    agent = DRIVER.build([Tool("steer", steer)], [call("steer", 1), "done"])
    DRIVER.run(agent)
    s = stats("steer")
    assert (s.failure_count, s.success_count, s.ignored_count) == (0, 0, 1)


def test_arguments_the_tool_does_not_take_are_not_counted(instrument):
    breaker_settings(failure_threshold="1")
    instrument("agno")
    tool = Tool.healthy("echo")
    agent = DRIVER.build([tool], [("echo", {"y": 1}), call("echo", 2), "done"])
    assert DRIVER.run(agent) == "done"
    assert DRIVER.sent(agent)[-1].tool_results[-1] == "echo ok 2"
    assert (stats("echo").failure_count, stats("echo").success_count) == (0, 1)


def test_arguments_of_a_wrong_type_are_the_models_mistake(instrument):
    """pydantic rejecting the model's arguments is not the tool failing: with and without
    otel-breaker the model gets the same validation errors and then the healthy answer."""
    script = [("echo", {"x": "not a number"})] * 3 + [call("echo", 2), "done"]

    def run() -> list[str]:
        agent = DRIVER.build([Tool.healthy("echo")], list(script))
        assert DRIVER.run(agent) == "done"
        return DRIVER.sent(agent)[-1].tool_results

    breaker_settings(failure_threshold="1")
    off = run()
    instrument("agno")
    on = run()
    assert on == off
    assert on[-1] == "echo ok 2" and "validation error" in on[0]
    assert (stats("echo").failure_count, stats("echo").success_count) == (0, 1)
