"""The tool-status block in the instructions of the OpenAI Agents SDK's own Runner loop,
offline (``agents.testing.ScriptedModel``).

The block's lifecycle on ``Runner.run_sync``, per-agent listing and hostile inputs are
the contract suite's (test_contract.py); a streamed run of an agent without
instructions is a way in its driver does not take, so it stays here.
"""

from __future__ import annotations

import pytest
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from status_prompt import COOLDOWN, assert_block_alone_while_open, quick_breaker_settings

from otel_breaker.registry import default_registry

set_tracing_disabled(True)


@pytest.fixture(autouse=True)
def _fake_time(registry_clock):
    """Breakers run on a fake clock: the `wait` tool moves it past the cooldown."""
    return registry_clock


RUNS: dict[str, int] = {}


@pytest.fixture(autouse=True)
def fresh_runs():
    RUNS.clear()


@function_tool
def flaky(x: int) -> str:
    """Fails twice, then works."""
    RUNS["flaky"] = RUNS.get("flaky", 0) + 1
    if RUNS["flaky"] <= 2:
        raise RuntimeError("service down")
    return f"ok {x}"


@function_tool
async def wait(x: int) -> str:
    """Takes longer than the breaker's cooldown."""
    default_registry().clock.advance(COOLDOWN + 0.15)  # the cooldown passes, no sleeping
    return "waited"


# flaky fails twice (its breaker opens), wait outlasts the cooldown, flaky's probe
# succeeds (the breaker closes), then the model answers: five model calls.
LIFECYCLE = ["flaky", "flaky", "wait", "flaky"]


async def test_streamed_run_without_instructions(instrument):
    quick_breaker_settings(status_in_prompt="true")
    instrument("openai_agents")
    steps = [[function_call(n, {"x": i}, call_id=f"call_{i}")] for i, n in enumerate(LIFECYCLE, 1)]
    model = ScriptedModel([*steps, [assistant_message("done")]])
    agent = Agent(name="demo_agent", instructions=None, model=model, tools=[flaky, wait])
    result = Runner.run_streamed(agent, "go")
    async for _ in result.stream_events():
        pass
    assert result.final_output == "done"
    assert RUNS["flaky"] == 3
    seen = [c.system_instructions for c in model.calls]
    assert_block_alone_while_open(seen)
