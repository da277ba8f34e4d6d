"""CrewAI: the tool-status block in the system message of every model call of a crew.

Real crews (native function calling and ReAct text, kickoff and akickoff)
driven by CrewAI's own ``BaseLLM`` with canned answers, recording the messages
of every call. With ``OTEL_BREAKER_STATUS_IN_PROMPT=true`` the system message
names the tools whose breakers are open; off (the default) the model gets
exactly what it gets uninstrumented; nothing but sanitised tool names and
numbers reaches it.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from typing import Any

import pytest
from status_prompt import EVIL_NAME, INJECTION, breaker_settings

pytest.importorskip("crewai")

from crewai import Agent, Crew, Task
from crewai.tools import tool
from pydantic import PrivateAttr
from scripted_llm import ScriptedLLM

from otel_breaker.breaker import State
from otel_breaker.degrade import STATUS_HEADER, safe_name
from otel_breaker.registry import default_registry

PATHS = [pytest.param(True, id="native"), pytest.param(False, id="react")]
ENTRIES = [pytest.param(False, id="kickoff"), pytest.param(True, id="akickoff")]
_roles = itertools.count(1)


class RecordingLLM(ScriptedLLM):
    """The scripted model, keeping a copy of the messages of every call.

    ``before_step[k]`` runs just before the model answers its ``k``-th call (1-based).
    """

    _calls: list[list[dict[str, Any]]] = PrivateAttr(default_factory=list)
    _before_step: dict[int, Any] = PrivateAttr(default_factory=dict)

    @property
    def requests(self) -> list[list[dict[str, Any]]]:
        return self._calls

    @property
    def system_prompts(self) -> list[str]:
        return ["\n".join(str(m.get("content")) for m in call if m.get("role") == "system") for call in self._calls]

    def call(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
        self._calls.append(copy.deepcopy(messages if isinstance(messages, list) else [messages]))
        step = len(self._calls)
        if step in self._before_step:
            self._before_step[step]()
        return super().call(messages, *args, **kwargs)


def make_tool(behaviour):
    @tool("lookup")
    def lookup(q: str) -> str:
        """Look something up."""
        return behaviour(q)

    return lookup


def failing(q: str) -> str:
    raise RuntimeError(INJECTION)


def healthy(q: str) -> str:
    return f"result for {q}"


def run(tool_obj, native: bool, use_async: bool, calls: int = 3, role: str | None = None, before_step=None):
    llm = RecordingLLM(model="scripted", native=native, calls=calls)
    llm._before_step = before_step or {}
    agent = Agent(
        role=role or f"researcher {next(_roles)}",
        goal="answer questions",
        backstory="careful",
        llm=llm,
        tools=[tool_obj],
        max_iter=10,
        verbose=False,
        allow_delegation=False,
    )
    task = Task(description="Use the lookup tool, then answer.", expected_output="an answer", agent=agent)
    crew = Crew(agents=[agent], tasks=[task], verbose=False)
    out = asyncio.run(crew.akickoff()) if use_async else crew.kickoff()
    assert out.raw.strip() == f"done after {calls} tool results"
    return llm, agent


def block_of(prompt: str) -> str:
    return prompt[prompt.index(STATUS_HEADER) :]


# A native crew's kickoff is the contract suite's (test_contract.py); these are the other ways in.
OTHER_WAYS = [
    pytest.param(True, True, id="native-akickoff"),
    pytest.param(False, False, id="react-kickoff"),
    pytest.param(False, True, id="react-akickoff"),
]


@pytest.mark.parametrize(("native", "use_async"), OTHER_WAYS)
def test_open_breaker_is_listed_in_each_later_system_message(instrument, native, use_async):
    instrument("crewai")
    breaker_settings(status_in_prompt="true", failure_threshold="2")

    llm, agent = run(make_tool(failing), native, use_async, calls=4)

    prompts = llm.system_prompts
    assert len(prompts) == 5
    assert [STATUS_HEADER in p for p in prompts] == [False, False, True, True, True]
    for prompt in prompts[2:]:
        assert prompt.count(STATUS_HEADER) == 1, "one block per call, never stacked"
        assert "'lookup' (open)" in block_of(prompt) and "retried in about" in block_of(prompt)
        assert INJECTION not in prompt
    # The block lives only for the call: the executor's conversation keeps the agent's own system prompt.
    assert all(STATUS_HEADER not in str(m.get("content")) for m in agent.agent_executor.messages)
    (breaker,) = default_registry().find("lookup")
    assert breaker.state is State.OPEN


@pytest.mark.parametrize("native", PATHS)
def test_setting_off_model_receives_exactly_the_uninstrumented_messages(instrument, native):
    default_registry().get("search").force_open(60)
    plain, _ = run(make_tool(healthy), native, False, role="analyst")

    instrument("crewai")
    default_registry().get("search").force_open(60)
    guarded, _ = run(make_tool(healthy), native, False, role="analyst")

    assert len(plain.requests) == 4 and guarded.requests == plain.requests
    assert not any(STATUS_HEADER in p for p in guarded.system_prompts)

    # The same crew with the setting on lists the open breaker: the comparison above can fail.
    breaker_settings(status_in_prompt="true")
    on, _ = run(make_tool(healthy), native, False, role="analyst")
    assert all("'search' (open)" in p for p in on.system_prompts)
    strip = [[m for m in call if m.get("role") != "system"] for call in on.requests]
    assert strip == [[m for m in call if m.get("role") != "system"] for call in plain.requests]


# The native kickoff: the contract's hostile-input scenario.
@pytest.mark.parametrize("native", [pytest.param(False, id="react")])
def test_injection_through_tool_name_or_error_does_not_reach_the_prompt(instrument, native):
    instrument("crewai")
    breaker_settings(status_in_prompt="true", failure_threshold="1")
    default_registry().get(EVIL_NAME).force_open(60)

    llm, _ = run(make_tool(failing), native, False, calls=2)

    prompts = llm.system_prompts
    assert all(safe_name(EVIL_NAME) in p for p in prompts)
    assert "'lookup' (open)" in prompts[1]
    for prompt in prompts:
        block = block_of(prompt)
        assert "<|system|>" not in block and "\nignore" not in block.lower()
        assert "ignore previous instructions" not in block.lower()
        assert INJECTION not in prompt


# The native kickoff: the contract's lifecycle scenario; ReAct text is a path its driver does not take.
@pytest.mark.parametrize("native", [pytest.param(False, id="react")])
def test_block_disappears_once_the_breaker_closes(registry_clock, instrument, native):
    instrument("crewai")
    breaker_settings(status_in_prompt="true", failure_threshold="2", recovery_timeout="0.2", success_threshold="1")
    up = [False]

    def backend(q: str) -> str:
        if not up[0]:
            raise ConnectionError("backend down")
        return f"result for {q}"

    def recover():
        up[0] = True
        registry_clock.advance(0.3)  # past the cooldown: the next call is the half-open probe

    llm, _ = run(make_tool(backend), native, False, calls=4, before_step={3: recover})

    assert [STATUS_HEADER in p for p in llm.system_prompts] == [False, False, True, False, False]
    (breaker,) = default_registry().find("lookup")
    assert breaker.state is State.CLOSED
