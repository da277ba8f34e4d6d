"""The tool-status block in the instructions of PydanticAI's own agent loop, offline (``FunctionModel``).

The block's lifecycle on ``run_sync``, per-agent listing and hostile inputs are the
contract suite's (test_contract.py); a streamed run of an agent without
instructions and a resumed run are ways in its driver does not take, so they stay here.
"""

from __future__ import annotations

import json

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from status_prompt import COOLDOWN, assert_block_alone_while_open, quick_breaker_settings

from otel_breaker.degrade import STATUS_HEADER
from otel_breaker.registry import default_registry


@pytest.fixture(autouse=True)
def _fake_time(registry_clock):
    """Breakers run on a fake clock: the `wait` tool moves it past the cooldown."""
    return registry_clock


RUNS: dict[str, int] = {}


@pytest.fixture(autouse=True)
def fresh_runs():
    RUNS.clear()


def flaky(x: int) -> str:
    """Fails twice, then works."""
    RUNS["flaky"] = RUNS.get("flaky", 0) + 1
    if RUNS["flaky"] <= 2:
        raise ToolFailed("service down")
    return f"ok {x}"


def wait(x: int) -> str:
    """Takes longer than the breaker's cooldown."""
    default_registry().clock.advance(COOLDOWN + 0.15)  # the cooldown passes, no sleeping
    return "waited"


# flaky fails twice (its breaker opens), wait outlasts the cooldown, flaky's probe
# succeeds (the breaker closes), then the model answers: five model calls.
LIFECYCLE = ["flaky", "flaky", "wait", "flaky"]


class Script:
    """A FunctionModel making the tool calls of ``calls`` one per response, then answering
    "done"; records the instructions of every request."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls
        self.instructions: list[str | None] = []

    def respond(self, messages, info: AgentInfo) -> ModelResponse:
        self.instructions.append(info.instructions)
        i = len(self.instructions)
        if i <= len(self.calls):
            return ModelResponse(parts=[ToolCallPart(self.calls[i - 1], {"x": i}, tool_call_id=f"call_{i}")])
        return ModelResponse(parts=[TextPart("done")])

    async def stream(self, messages, info: AgentInfo):
        part = self.respond(messages, info).parts[0]
        if isinstance(part, ToolCallPart):
            args = json.dumps(part.args)
            yield {0: DeltaToolCall(name=part.tool_name, json_args=args, tool_call_id=part.tool_call_id)}
        else:
            yield part.content

    def model(self) -> FunctionModel:
        return FunctionModel(self.respond, stream_function=self.stream)


def make_agent(calls: list[str]):
    """An agent without instructions of its own."""
    script = Script(calls)
    return script, Agent(script.model(), instructions=None, name="demo_agent", tools=[flaky, wait])


async def test_streamed_run_without_instructions(instrument):
    quick_breaker_settings(status_in_prompt="true")
    instrument("pydantic_ai")
    script, agent = make_agent(LIFECYCLE)
    async with agent.run_stream("go") as result:
        assert await result.get_output() == "done"
    assert RUNS["flaky"] == 3
    seen = script.instructions
    assert_block_alone_while_open(seen)


def test_resumed_run_with_nothing_new_to_send_makes_no_model_request(instrument):
    quick_breaker_settings(status_in_prompt="true")
    instrument("pydantic_ai")
    default_registry().get("other").force_open(60)
    script, agent = make_agent([])
    first = agent.run_sync("go")
    assert len(script.instructions) == 1 and STATUS_HEADER in script.instructions[0]
    # History ending in the model's answer, no new prompt, no instructions of the agent's own:
    # the run ends without asking the model again, status block or not.
    again = agent.run_sync(message_history=first.all_messages())
    assert again.output == "done"
    assert len(script.instructions) == 1
