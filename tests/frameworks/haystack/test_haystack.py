"""What is specific to Haystack beyond the shared contract: the async loop,
``raise_on_tool_invocation_failure``, and the model's argument mistakes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("haystack")
sys.path.insert(0, str(Path(__file__).parent))

from contract import PROMPT, UNAVAILABLE, Tool, call
from driver import HaystackDriver
from haystack.components.agents import Agent
from haystack.components.generators.chat.mock import MockChatGenerator
from haystack.dataclasses import ChatMessage
from haystack.tools.errors import ToolInvocationError
from status_prompt import breaker_settings

from otel_breaker.degrade import STATUS_HEADER
from otel_breaker.registry import default_registry

DRIVER = HaystackDriver()


async def test_async_loop_rejects_once_open(instrument, otel):
    breaker_settings(failure_threshold="2", status_in_prompt="true")
    instrument("haystack")
    tool = Tool.failing("weather")
    agent = DRIVER.build([tool], [call("weather", i) for i in range(1, 5)] + ["done"])
    assert await DRIVER.arun(agent) == "done"
    assert tool.runs == 2
    sent = DRIVER.sent(agent)
    assert [UNAVAILABLE in r for r in sent[-1].tool_results] == [False, False, True, True]
    assert STATUS_HEADER in sent[-1].instructions
    assert all(s.attributes.get("gen_ai.agent.name") == "assistant" for s in otel.tool_spans("weather"))


def test_status_block_never_stays_in_the_run_messages(instrument):
    breaker_settings(failure_threshold="1", status_in_prompt="true")
    instrument("haystack")
    agent = DRIVER.build([Tool.failing("weather")], [call("weather", 1), call("weather", 2), "done"])
    messages = agent.run(messages=[ChatMessage.from_user("go")])["messages"]
    assert STATUS_HEADER in DRIVER.sent(agent)[-1].instructions
    assert [m.text for m in messages if m.is_from("system")] == [PROMPT]


def test_raise_on_failure_raises_the_rejection(instrument):
    breaker_settings(failure_threshold="1")
    instrument("haystack")
    tool = Tool.failing("weather")
    agent = DRIVER.build([tool], [call("weather", 1), "done"])
    agent.raise_on_tool_invocation_failure = True
    with pytest.raises(ToolInvocationError, match="service down"):
        DRIVER.run(agent)
    agent.scripted_model.sent.clear()  # the same script again: the model asks for the tool once more
    with pytest.raises(ToolInvocationError, match=UNAVAILABLE):
        DRIVER.run(agent)
    assert tool.runs == 1


def test_arguments_the_tool_does_not_take_are_not_counted(instrument):
    breaker_settings(failure_threshold="1")
    instrument("haystack")
    tool = Tool.healthy("echo")
    agent = DRIVER.build([tool], [("echo", {"y": 1}), ("echo", {}), call("echo", 3), "done"])
    assert DRIVER.run(agent) == "done"
    results = DRIVER.sent(agent)[-1].tool_results
    assert results[2] == "echo ok 3", "the model's mistakes did not open the breaker"
    (breaker,) = default_registry().find("echo")
    assert (breaker.stats.failure_count, breaker.stats.success_count) == (0, 1)


def test_healthy_agent_outside_a_pipeline_is_unchanged(instrument):
    def run() -> list:
        agent = Agent(chat_generator=MockChatGenerator(responses=["hello"]), tools=[], system_prompt=PROMPT)
        return [m.text for m in agent.run(messages=[ChatMessage.from_user("hi")])["messages"]]

    baseline = run()
    instrument("haystack")
    assert run() == baseline


@pytest.mark.parametrize("steps", [[("echo", {"y": 1})] * 6, [("no_such_tool", {"x": 1})] * 6], ids=["args", "name"])
async def test_async_loop_answers_repeated_mistakes(instrument, steps):
    """``run_async``: from the 4th identical invalid call (or unknown name) the model reads the
    loop message; with ``loop_action=stop`` the run raises ``ToolLoopError``."""
    from otel_breaker import ToolLoopError

    instrument("haystack")
    agent = DRIVER.build([Tool.healthy("echo")], [*steps, "done"])
    assert await DRIVER.arun(agent) == "done"
    results = DRIVER.sent(agent)[-1].tool_results
    assert ["3 times" in r for r in results] == [False] * 3 + [True] * 3
    breaker_settings(loop_action="stop")
    default_registry().clear(keep_counts=False)  # the breaker made under the earlier settings goes
    # Another agent: calls are remembered per agent name (Haystack has no run id to scope them by).
    agent = DRIVER.build([Tool.healthy("echo")], [*steps, "done"], name="other")
    with pytest.raises(ToolLoopError):
        await DRIVER.arun(agent)
    assert len(DRIVER.sent(agent)) == 4
