"""A rejection counts against Agno's own ``tool_call_limit`` as the failed call would have:
Agno charges every call the model makes before it runs, and the breaker answers inside
the call, so a run whose model keeps calling an open tool takes no more model requests,
and no more calls of the limit, than the same run without otel-breaker."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("agno")
sys.path.insert(0, str(Path(__file__).parent))

from agno.agent import Agent
from contract import Tool, call
from driver import AgnoDriver, agno_tool
from status_prompt import breaker_settings

LIMIT = 3
CALLS = 8


def stubborn_run(driver: AgnoDriver, tool: Tool) -> tuple[int, list[str]]:
    """(model requests, what the model read last) of one run whose model calls the failing
    tool ``CALLS`` times, with ``tool_call_limit=LIMIT``."""
    agent = driver.build([tool], [call(tool.name, i) for i in range(CALLS)] + ["done"])
    limited = Agent(name=agent.name, model=agent.model, tools=[agno_tool(tool)], tool_call_limit=LIMIT)
    assert driver.run(limited) == "done"
    sent = driver.sent(limited)
    return len(sent), sent[-1].tool_results


@pytest.mark.parametrize("threshold", ["1", "2"])
def test_an_open_tool_takes_no_more_requests_than_without_us(threshold: str, instrument) -> None:
    driver = AgnoDriver()
    plain = Tool.failing("lookup")
    without, read_without = stubborn_run(driver, plain)
    assert plain.runs == LIMIT and sum("Tool call limit reached" in r for r in read_without) == CALLS - LIMIT
    breaker_settings(failure_threshold=threshold, recovery_timeout="600")
    instrument("agno")
    guarded = Tool.failing("lookup")
    with_us, read = stubborn_run(driver, guarded)
    assert with_us <= without and guarded.runs <= int(threshold)
    # The calls past the limit get Agno's own answer, as without otel-breaker.
    assert sum("Tool call limit reached" in r for r in read) == CALLS - LIMIT
