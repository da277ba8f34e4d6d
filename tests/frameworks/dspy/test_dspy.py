"""What is specific to DSPy beyond the shared contract: the async loop, ReAct's
``finish`` step, and the model's argument mistakes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("dspy")
sys.path.insert(0, str(Path(__file__).parent))

from contract import UNAVAILABLE, Tool, call
from driver import DSPyDriver
from status_prompt import breaker_settings

from otel_breaker.registry import default_registry

DRIVER = DSPyDriver()


def breakers(tool: str):
    return default_registry().find(tool)


async def test_async_loop_rejects_once_open(instrument, otel):
    breaker_settings(failure_threshold="2")
    instrument("dspy")
    tool = Tool.failing("weather")
    agent = DRIVER.build([tool], [call("weather", i) for i in range(1, 5)] + ["done"])
    assert await DRIVER.arun(agent) == "done"
    assert tool.runs == 2
    results = DRIVER.sent(agent)[-1].tool_results
    assert [UNAVAILABLE in r for r in results] == [False, False, True, True]
    assert len(otel.tool_spans("weather")) == 4


def test_finish_step_is_not_a_tool_call(instrument, otel):
    instrument("dspy")
    agent = DRIVER.build([Tool.healthy("echo")], [call("echo", 1), "done"])
    assert DRIVER.run(agent) == "done"
    assert breakers("finish") == []
    assert [s.attributes["gen_ai.tool.name"] for s in otel.tool_spans()] == ["echo"]


def test_arguments_the_tool_does_not_take_are_not_counted(instrument):
    breaker_settings(failure_threshold="1")
    instrument("dspy")
    tool = Tool.healthy("echo")
    agent = DRIVER.build([tool], [("echo", {"y": 1}), ("echo", {"x": "not a number"}), call("echo", 3), "done"])
    assert DRIVER.run(agent) == "done"
    results = DRIVER.sent(agent)[-1].tool_results
    assert "Execution error in echo" in results[0] and "Execution error in echo" in results[1]
    assert results[2] == "echo ok 3", "the model's mistakes did not open the breaker"
    (breaker,) = breakers("echo")
    assert (breaker.stats.failure_count, breaker.stats.success_count) == (0, 1)


@pytest.mark.parametrize("instrumented", [False, True], ids=["plain", "instrumented"])
def test_a_tool_name_no_tool_has_ends_the_run_at_once(instrument, instrumented):
    """ReAct's step signature types ``next_tool_name`` as the names of its tools: a name no
    tool has fails to parse, and the run raises at the first one, with or without
    otel-breaker. Nothing repeats, so the loop guard has no unknown-name case here."""
    from dspy.utils.exceptions import AdapterParseError

    if instrumented:
        instrument("dspy")
    tool = Tool.healthy("echo")
    agent = DRIVER.build([tool], [("no_such_tool", {"x": 1})] * 20 + ["done"])
    with pytest.raises(AdapterParseError):
        DRIVER.run(agent)
    assert tool.runs == 0 and all(sent.tool_results == [] for sent in DRIVER.sent(agent))


async def test_async_loop_answers_repeated_invalid_arguments(instrument):
    """``ReAct.aforward``: from the 4th identical invalid call the model reads the loop
    message; with ``loop_action=stop`` the run raises ``ToolLoopError``."""
    from otel_breaker import ToolLoopError

    instrument("dspy")
    steps = [("echo", {"x": "not a number"})] * 6 + ["done"]
    agent = DRIVER.build([Tool.healthy("echo")], steps)
    assert await DRIVER.arun(agent) == "done"
    results = DRIVER.sent(agent)[-1].tool_results
    assert ["this exact call" in r for r in results] == [False] * 3 + [True] * 3
    breaker_settings(loop_action="stop")
    default_registry().clear(keep_counts=False)  # the breaker made under the earlier settings goes
    agent = DRIVER.build([Tool.healthy("echo")], steps)
    with pytest.raises(ToolLoopError):
        await DRIVER.arun(agent)
