"""smolagents: the tool-status block in the system prompt of every model call.

Real ``ToolCallingAgent`` and ``CodeAgent`` loops driven by a scripted model
that records the system prompt of each call. With
``OTEL_BREAKER_STATUS_IN_PROMPT=true`` the block names the tools whose breakers
are open; off (the default) the model gets exactly what it gets
uninstrumented; nothing but sanitised tool names and numbers reaches it.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
from smolagents import CodeAgent, ToolCallingAgent, tool
from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole, Model
from smolagents.monitoring import LogLevel
from status_prompt import EVIL_NAME, INJECTION, breaker_settings

from otel_breaker import State
from otel_breaker.degrade import STATUS_HEADER, safe_name
from otel_breaker.registry import default_registry

KINDS = ["tool_calling", "code"]
BACKEND_UP = [True]


@tool
def flaky(q: str) -> str:
    """A tool whose backend fails with a hostile message.

    Args:
        q: query
    """
    raise RuntimeError(INJECTION)


@tool
def healthy(q: str) -> str:
    """A tool that works.

    Args:
        q: query
    """
    return f"ok:{q}"


@tool
def backend(q: str) -> str:
    """A tool whose backend goes down and comes back.

    Args:
        q: query
    """
    if not BACKEND_UP[0]:
        raise ConnectionError("backend down")
    return f"ok:{q}"


@pytest.fixture(autouse=True)
def _backend_up():
    BACKEND_UP[0] = True
    yield
    BACKEND_UP[0] = True


def _text(content) -> str:
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


class RecordingModel(Model):
    """Calls ``tool_name`` ``n`` times, then answers "done"; records every call's messages.

    ``before_step[k]`` runs just before the model answers its ``k``-th call (1-based).
    """

    def __init__(self, kind: str, tool_name: str, n: int, before_step: dict | None = None):
        super().__init__(model_id=f"recording-{kind}")
        self.kind, self.tool_name, self.n = kind, tool_name, n
        self.before_step = before_step or {}
        self.step = 0
        self.calls: list[list[tuple[str, str]]] = []

    @property
    def system_prompts(self) -> list[str]:
        return [next((text for role, text in call if role == "system"), "") for call in self.calls]

    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kwargs):
        self.calls.append([(str(getattr(m.role, "value", m.role)), _text(m.content)) for m in messages])
        self.step += 1
        if self.step in self.before_step:
            self.before_step[self.step]()
        if self.kind == "code":
            if self.step <= self.n:
                code = f'Thought: call it\n<code>\nr = {self.tool_name}(q="x{self.step}")\nprint(r)\n</code>'
            else:
                code = 'Thought: finish\n<code>\nfinal_answer("done")\n</code>'
            return ChatMessage(role=MessageRole.ASSISTANT, content=code)
        name, arguments = (
            (self.tool_name, {"q": f"x{self.step}"}) if self.step <= self.n else ("final_answer", {"answer": "done"})
        )
        call = ChatMessageToolCall(
            id=f"call_{self.step}",
            type="function",
            function=ChatMessageToolCallFunction(name=name, arguments=arguments),
        )
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])


def run(kind: str, tool_obj, n: int = 3, name: str = "researcher", before_step: dict | None = None):
    model = RecordingModel(kind, tool_obj.name, n, before_step)
    cls = ToolCallingAgent if kind == "tool_calling" else CodeAgent
    agent = cls(tools=[tool_obj], model=model, max_steps=n + 3, verbosity_level=LogLevel.OFF, name=name)
    assert agent.run("use the tool, then say done") == "done"
    return model, agent


@pytest.mark.parametrize("kind", ["code"])  # ToolCallingAgent: the contract suite's (test_contract.py)
def test_open_breaker_is_listed_in_each_later_system_prompt(kind, instrument):
    instrument("smolagents")
    breaker_settings(status_in_prompt="true", failure_threshold="2")

    model, _ = run(kind, flaky, n=4)

    prompts = model.system_prompts
    assert len(prompts) == 5
    # Calls 1-2 come before the breaker opened; from call 3 on every system prompt lists it.
    assert [STATUS_HEADER in p for p in prompts] == [False, False, True, True, True]
    for prompt in prompts[2:]:
        block = prompt[prompt.index(STATUS_HEADER) :]
        assert "'flaky' (open)" in block and "retried in about" in block
        assert prompt.count(STATUS_HEADER) == 1
        assert INJECTION not in prompt, "a failing tool's error never reaches the system prompt"
    (breaker,) = default_registry().find("flaky")
    assert breaker.state is State.OPEN


@pytest.mark.parametrize("kind", KINDS)
def test_setting_off_model_receives_exactly_the_uninstrumented_messages(kind, instrument):
    default_registry().get("search").force_open(60)
    plain, _ = run(kind, healthy)

    instrument("smolagents")
    default_registry().get("search").force_open(60)
    guarded, _ = run(kind, healthy)

    assert guarded.calls == plain.calls
    assert not any(STATUS_HEADER in p for p in guarded.system_prompts)

    # The same run with the setting on does list the open breaker: the comparison above can fail.
    breaker_settings(status_in_prompt="true")
    on, _ = run(kind, healthy)
    assert all("'search' (open)" in p for p in on.system_prompts)
    assert [call[1:] for call in on.calls] == [call[1:] for call in plain.calls]  # only the system prompt changes


@pytest.mark.parametrize("kind", ["code"])  # ToolCallingAgent: the contract suite's
def test_injection_through_tool_name_or_error_does_not_reach_the_prompt(kind, instrument):
    instrument("smolagents")
    breaker_settings(status_in_prompt="true", failure_threshold="1")
    default_registry().get(EVIL_NAME).force_open(60)

    model, _ = run(kind, flaky, n=2)

    prompts = model.system_prompts
    assert all(safe_name(EVIL_NAME) in p for p in prompts)
    assert "'flaky' (open)" in prompts[1]
    for prompt in prompts:
        block = prompt[prompt.index(STATUS_HEADER) :]
        assert "<|system|>" not in block and "\nignore" not in block.lower()
        assert "ignore previous instructions" not in block.lower()
        assert INJECTION not in prompt


@pytest.mark.parametrize("kind", ["code"])  # ToolCallingAgent: the contract suite's
def test_block_disappears_once_the_breaker_closes(registry_clock, kind, instrument):
    instrument("smolagents")
    breaker_settings(status_in_prompt="true", failure_threshold="2", recovery_timeout="0.2", success_threshold="1")
    BACKEND_UP[0] = False

    def recover():
        BACKEND_UP[0] = True
        registry_clock.advance(0.3)  # past the cooldown: the next call is the half-open probe

    model, _ = run(kind, backend, n=4, before_step={3: recover})

    assert [STATUS_HEADER in p for p in model.system_prompts] == [False, False, True, False, False]
    (breaker,) = default_registry().find("backend")
    assert breaker.state is State.CLOSED
