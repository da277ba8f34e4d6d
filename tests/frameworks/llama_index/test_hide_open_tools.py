"""OTEL_BREAKER_HIDE_OPEN_TOOLS in a LlamaIndex ``AgentWorkflow`` (the shared contract
drives a lone ``FunctionAgent``): the tools of each model step of a workflow's agent lose
an open tool until its probe."""

from __future__ import annotations

import logging

import pytest
from status_prompt import COOLDOWN, quick_breaker_settings

pytest.importorskip("llama_index.core")

from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from otel_breaker.registry import default_registry

UNAVAILABLE = "is temporarily unavailable"
ALL = ["primary", "backup", "wait"]
# primary fails twice (opens), the model calls it anyway (rejected), uses backup,
# waits past the cooldown, and answers: seven model requests.
SCRIPT = ["primary", "primary", "primary", "backup", "wait", "backup"]


def tool_name(tool) -> str:
    if isinstance(tool, dict):
        return tool.get("function", tool).get("name")
    return tool.metadata.name


class Script:
    """The framework's mock function-calling LLM making the tool calls of ``calls``,
    then answering "done"; records the tools offered with every request."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls
        self.menus: list[list[str]] = []
        self.results: list[str] = []

    def generate(self, messages, **kwargs):
        self.menus.append([tool_name(t) for t in kwargs.get("tools") or ()])
        self.results = [m.content for m in messages if m.role == MessageRole.TOOL]
        i = len(self.menus)
        if i <= len(self.calls):
            block = ToolCallBlock(tool_call_id=f"call_{i}", tool_name=self.calls[i - 1], tool_kwargs={"x": i})
            return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])
        return ChatMessage(role=MessageRole.ASSISTANT, content="done")


def make_tools():
    runs = {"primary": 0, "backup": 0}

    def primary(x: int) -> str:
        """Looks it up in the primary index."""
        runs["primary"] += 1
        raise RuntimeError("primary index down")

    def backup(x: int) -> str:
        """Looks it up in the backup index."""
        runs["backup"] += 1
        return f"backup found {x}"

    def wait(x: int) -> str:
        """Takes longer than the breaker's cooldown."""
        default_registry().clock.advance(COOLDOWN + 0.15)  # the cooldown passes, no sleeping
        return "waited"

    return runs, [FunctionTool.from_defaults(f) for f in (primary, backup, wait)]


async def run(script_calls=SCRIPT):
    script = Script(script_calls)
    runs, tools = make_tools()
    agent = FunctionAgent(
        name="finder",
        description="finds things",
        tools=tools,
        llm=MockFunctionCallingLLM(response_generator=script.generate),
    )
    runner = AgentWorkflow(agents=[agent], root_agent="finder")
    assert str(await runner.run(user_msg="find it")) == "done"
    return script, runs


@pytest.fixture(autouse=True)
def quiet():
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


async def test_open_tool_leaves_a_workflows_menu_until_its_probe(instrument, registry_clock):
    quick_breaker_settings(hide_open_tools="true")
    instrument("llama_index")
    script, runs = await run()
    assert script.menus == [
        ALL,
        ALL,
        ["backup", "wait"],  # primary is open: off the menu, the healthy alternative stays
        ["backup", "wait"],
        ["backup", "wait"],
        ALL,  # the cooldown passed: half-open, back for its probe
        ALL,
    ]
    # A call to the hidden tool anyway gets the usual rejection, and the loop goes on.
    assert "Tool 'primary' " + UNAVAILABLE in script.results[2]
    assert runs == {"primary": 2, "backup": 2}
