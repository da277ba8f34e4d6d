"""praisonaiagents: the tool-status block in the system message of every model request.

The real agent loop (chat and achat, streaming and not) against the local
OpenAI-compatible model, which records every request body. With
``OTEL_BREAKER_STATUS_IN_PROMPT=true`` the system message names the tools whose
breakers are open; off (the default) the model gets exactly what it gets
uninstrumented; nothing but sanitised tool names and numbers reaches it.
"""

from __future__ import annotations

import asyncio
import copy
import itertools

import pytest
from status_prompt import EVIL_NAME, INJECTION, breaker_settings

pytest.importorskip("praisonaiagents")

from praisonaiagents import Agent
from praisonaiagents.config.feature_configs import ToolConfig
from praisonaiagents.errors import ToolExecutionError
from praisonaiagents.tools.retry import RetryPolicy

from otel_breaker.breaker import State
from otel_breaker.degrade import STATUS_HEADER, safe_name
from otel_breaker.registry import default_registry

STREAM = [pytest.param(False, id="plain"), pytest.param(True, id="stream")]
# The async loop without streaming is the contract suite's (test_contract.py): the block's
# lifecycle, per-agent listing, hostile inputs. These tests stay for the other ways in.
STREAM_ONLY = [pytest.param(True, id="stream")]
_numbers = itertools.count(1)


def make_agent(behaviour, name: str | None = None) -> Agent:
    def lookup(q: str) -> str:
        """Look something up.

        Args:
            q: the query
        """
        return behaviour(q)

    policy = RetryPolicy(max_attempts=1, initial_delay_ms=1, max_delay_ms=2)
    return Agent(
        name=name or f"status-{next(_numbers)}",
        instructions="Use the lookup tool.",
        tools=[lookup],
        model="gpt-4o-mini",
        tool_config=ToolConfig(retry_policy=policy),
    )


def failing(q: str) -> str:
    raise RuntimeError(INJECTION)


def healthy(q: str) -> str:
    return f"result for {q}"


def chat(agent: Agent, mode: str, stream: bool):
    if mode == "sync":
        return agent.chat("look it up", stream=stream)
    return asyncio.run(agent.achat("look it up", stream=stream))


def system_prompts(model) -> list[str]:
    return [
        "\n".join(str(m.get("content")) for m in body.get("messages", []) if m.get("role") == "system")
        for body in model.requests
    ]


def block_of(prompt: str) -> str:
    return prompt[prompt.index(STATUS_HEADER) :]


@pytest.mark.parametrize("stream", STREAM_ONLY)
def test_async_loop_lists_the_breaker_from_the_request_after_it_opened(model, instrument, stream):
    """achat turns a tool failure into an error result and goes on: the breaker
    opens inside one chat, and the very next request of that chat lists it."""
    instrument("praisonai")
    breaker_settings(status_in_prompt="true", failure_threshold="2")
    model.reset(calls=4)

    agent = make_agent(failing)  # held: per-agent breakers go when their agent does
    out = chat(agent, "async", stream)

    assert str(out).startswith("done:")
    prompts = system_prompts(model)
    assert len(prompts) == 5
    assert [STATUS_HEADER in p for p in prompts] == [False, False, True, True, True]
    for prompt in prompts[2:]:
        assert prompt.count(STATUS_HEADER) == 1
        assert "'lookup' (open)" in block_of(prompt) and "retried in about" in block_of(prompt)
        assert INJECTION not in prompt
    (breaker,) = default_registry().find("lookup")
    assert breaker.state is State.OPEN


@pytest.mark.parametrize("stream", STREAM)
def test_sync_chat_after_the_breaker_opened_lists_it_and_keeps_history_clean(model, instrument, stream):
    instrument("praisonai")
    breaker_settings(status_in_prompt="true", failure_threshold="2")
    agent = make_agent(failing)
    for _ in range(2):  # a raising tool ends a sync chat (praisonaiagents' contract)
        with pytest.raises(ToolExecutionError):
            chat(agent, "sync", stream)
    assert [STATUS_HEADER in p for p in system_prompts(model)] == [False, False]

    model.reset(calls=3)
    assert str(chat(agent, "sync", stream)).startswith("done:")

    prompts = system_prompts(model)
    assert len(prompts) == 4 and all("'lookup' (open)" in block_of(p) for p in prompts)
    # Only the requests carry the block: the conversation the agent keeps does not.
    assert STATUS_HEADER not in str(agent.chat_history)


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("stream", STREAM)
def test_setting_off_model_receives_exactly_the_uninstrumented_requests(model, instrument, mode, stream):
    default_registry().get("search").force_open(60)
    chat(make_agent(healthy, name="analyst"), mode, stream)
    plain = copy.deepcopy(model.requests)

    instrument("praisonai")
    default_registry().get("search").force_open(60)
    model.reset(calls=3)
    chat(make_agent(healthy, name="analyst"), mode, stream)

    assert len(plain) == 4 and model.requests == plain
    assert not any(STATUS_HEADER in p for p in system_prompts(model))

    # The same chat with the setting on lists the open breaker: the comparison above can fail.
    breaker_settings(status_in_prompt="true")
    model.reset(calls=3)
    chat(make_agent(healthy, name="analyst"), mode, stream)
    assert all("'search' (open)" in p for p in system_prompts(model))

    def without_system(bodies):
        return [[m for m in b["messages"] if m.get("role") != "system"] for b in bodies]

    assert without_system(model.requests) == without_system(plain)


# Without streaming: the contract's hostile-input scenario.
@pytest.mark.parametrize("stream", STREAM_ONLY)
def test_injection_through_tool_name_or_error_does_not_reach_the_prompt(model, instrument, stream):
    instrument("praisonai")
    breaker_settings(status_in_prompt="true", failure_threshold="1")
    default_registry().get(EVIL_NAME).force_open(60)

    chat(make_agent(failing), "async", stream)

    prompts = system_prompts(model)
    assert len(prompts) == 4
    assert all(safe_name(EVIL_NAME) in p for p in prompts)
    assert "'lookup' (open)" in prompts[1]
    for prompt in prompts:
        block = block_of(prompt)
        assert "<|system|>" not in block and "\nignore" not in block.lower()
        assert "ignore previous instructions" not in block.lower()
        assert INJECTION not in prompt


# The async loop: the contract's per-agent scenario; the sync chat is a way in its driver does not take.
@pytest.mark.parametrize("mode", ["sync"])
def test_per_agent_breakers_are_listed_only_for_their_agent(model, instrument, mode):
    instrument("praisonai")
    breaker_settings(status_in_prompt="true", failure_threshold="1", scope="agent")
    broken, fine = make_agent(failing), make_agent(healthy)
    asyncio.run(broken.achat("look it up"))  # opens the breaker of broken's own lookup
    assert [b.agent_name for b in default_registry().find("lookup")] == [broken.name]

    model.reset(calls=1)
    chat(fine, mode, False)
    assert not any(STATUS_HEADER in p for p in system_prompts(model)), "another agent's breaker is not listed"

    model.reset(calls=1)
    chat(broken, mode, False)
    assert all("'lookup' (open)" in p for p in system_prompts(model))
