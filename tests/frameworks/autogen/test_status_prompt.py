"""AutoGen: the tool-status block in the system message of every model call of an AssistantAgent.

Real ``AssistantAgent`` loops (run, run_stream, a team) driven by
``ReplayChatCompletionClient``, recording the messages of every call. With
``OTEL_BREAKER_STATUS_IN_PROMPT=true`` the system message names the tools whose
breakers are open; off (the default) the model gets exactly what it gets
uninstrumented; nothing but sanitised tool names and numbers reaches it.
"""

from __future__ import annotations

import json
import logging
import os
import warnings

os.environ.setdefault("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, RequestUsage, SystemMessage
from autogen_core.tools import FunctionTool
from autogen_ext.models.replay import ReplayChatCompletionClient
from status_prompt import EVIL_NAME, INJECTION, breaker_settings

from otel_breaker import State
from otel_breaker.degrade import STATUS_HEADER, safe_name
from otel_breaker.registry import default_registry

logging.getLogger("autogen_core").setLevel(logging.ERROR)
warnings.filterwarnings("ignore", message=".*Token count.*")

# The plain ``run`` loop is the contract suite's (test_contract.py: the block's lifecycle,
# per-agent listing, hostile inputs); these tests stay for the other ways in.
MODES = ["run_stream", "team"]
MODEL_INFO = {
    "vision": False,
    "function_calling": True,
    "json_output": False,
    "family": "unknown",
    "structured_output": False,
}


async def flaky(q: str) -> str:
    """A tool whose backend fails with a hostile message."""
    raise RuntimeError(INJECTION)


async def healthy(q: str) -> str:
    """A tool that works."""
    return f"ok:{q}"


class RecordingClient(ReplayChatCompletionClient):
    """Records the messages of every model call."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.requests: list[list] = []

    async def create(self, messages, **kwargs):
        self.requests.append(list(messages))
        return await super().create(messages, **kwargs)

    async def create_stream(self, messages, **kwargs):
        self.requests.append(list(messages))
        async for chunk in super().create_stream(messages, **kwargs):
            yield chunk

    @property
    def system_prompts(self) -> list[str]:
        return ["\n".join(m.content for m in call if isinstance(m, SystemMessage)) for call in self.requests]


def _script(tool_name: str, n: int) -> list:
    usage = RequestUsage(prompt_tokens=0, completion_tokens=0)
    calls = [
        CreateResult(
            finish_reason="function_calls",
            usage=usage,
            cached=False,
            content=[FunctionCall(id=f"call_{i}", name=tool_name, arguments=json.dumps({"q": f"x{i}"}))],
        )
        for i in range(1, n + 1)
    ]
    return [*calls, "done TERMINATE"]


async def run(fn, mode: str = "run", n: int = 3, **agent_options):
    tool = FunctionTool(fn, description=fn.__name__, name="lookup")
    client = RecordingClient(_script(tool.name, n), model_info=MODEL_INFO)
    agent = AssistantAgent(
        "helper",
        model_client=client,
        tools=[tool],
        max_tool_iterations=n + 2,
        model_client_stream=mode == "run_stream",
        **agent_options,
    )
    task = "use the tool, then say done"
    if mode == "run":
        result = await agent.run(task=task)
    elif mode == "run_stream":
        result = None
        async for event in agent.run_stream(task=task):
            result = event
    else:
        team = RoundRobinGroupChat(
            [agent], termination_condition=TextMentionTermination("TERMINATE") | MaxMessageTermination(20)
        )
        result = await team.run(task=task)
    assert "done" in result.messages[-1].content
    assert len(client.requests) == n + 1
    return client, agent


def block_of(prompt: str) -> str:
    return prompt[prompt.index(STATUS_HEADER) :]


@pytest.mark.parametrize("mode", MODES)
async def test_open_breaker_is_listed_in_each_later_system_message(instrument, mode):
    instrument("autogen")
    breaker_settings(status_in_prompt="true", failure_threshold="2")

    client, agent = await run(flaky, mode, n=4)

    prompts = client.system_prompts
    assert [STATUS_HEADER in p for p in prompts] == [False, False, True, True, True]
    for prompt in prompts[2:]:
        assert prompt.count(STATUS_HEADER) == 1
        assert "'lookup' (open)" in block_of(prompt) and "retried in about" in block_of(prompt)
        assert INJECTION not in prompt
    # The agent's own system message is untouched: the block exists only in what the model receives.
    assert all(STATUS_HEADER not in m.content for m in agent._system_messages)
    (breaker,) = default_registry().find("lookup")
    assert breaker.state is State.OPEN


@pytest.mark.parametrize("mode", MODES)
async def test_setting_off_model_receives_exactly_the_uninstrumented_messages(instrument, mode):
    default_registry().get("search").force_open(60)
    plain, _ = await run(healthy, mode)

    instrument("autogen")
    default_registry().get("search").force_open(60)
    guarded, _ = await run(healthy, mode)

    assert guarded.requests == plain.requests
    assert not any(STATUS_HEADER in p for p in guarded.system_prompts)

    # The same run with the setting on lists the open breaker: the comparison above can fail.
    breaker_settings(status_in_prompt="true")
    on, _ = await run(healthy, mode)
    assert all("'search' (open)" in p for p in on.system_prompts)
    assert [call[1:] for call in on.requests] == [call[1:] for call in plain.requests]


async def test_agent_without_system_message_gets_one_holding_only_the_block(instrument):
    instrument("autogen")
    breaker_settings(status_in_prompt="true")
    default_registry().get("search").force_open(60)

    client, _ = await run(healthy, system_message=None)

    for call in client.requests:
        assert isinstance(call[0], SystemMessage) and call[0].content.startswith(STATUS_HEADER)
        assert sum(isinstance(m, SystemMessage) for m in call) == 1


@pytest.mark.parametrize("mode", ["run_stream"])  # on the plain run: the contract's hostile-input scenario
async def test_injection_through_tool_name_or_error_does_not_reach_the_prompt(instrument, mode):
    instrument("autogen")
    breaker_settings(status_in_prompt="true", failure_threshold="1")
    default_registry().get(EVIL_NAME).force_open(60)

    client, _ = await run(flaky, mode, n=2)

    prompts = client.system_prompts
    assert all(safe_name(EVIL_NAME) in p for p in prompts)
    assert "'lookup' (open)" in prompts[1]
    for prompt in prompts:
        block = block_of(prompt)
        assert "<|system|>" not in block and "\nignore" not in block.lower()
        assert "ignore previous instructions" not in block.lower()
        assert INJECTION not in prompt
