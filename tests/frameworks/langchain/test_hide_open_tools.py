"""OTEL_BREAKER_HIDE_OPEN_TOOLS on a real LangGraph loop: the tools bound to the
model (``bind_tools``) lose an open tool for each request until its probe."""

from __future__ import annotations

import warnings

import pytest
from pydantic import Field
from status_prompt import COOLDOWN, quick_breaker_settings

pytest.importorskip("langgraph")

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import ToolNode, create_react_agent

from otel_breaker.registry import default_registry

UNAVAILABLE = "is temporarily unavailable"


class BindingModel(FakeMessagesListChatModel):
    """LangChain's fake chat model, binding tools as provider models do
    (``bind(tools=[<OpenAI tool dicts>])``) and recording the tools of each request."""

    menus: list = Field(default_factory=list)

    def bind_tools(self, tools, **kwargs):
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.menus.append(kwargs.get("tools"))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def make_tools():
    runs = {"primary": 0, "backup": 0}

    @tool
    def primary(x: int) -> str:
        """Looks it up in the primary index."""
        runs["primary"] += 1
        raise RuntimeError("primary index down")

    @tool
    def backup(x: int) -> str:
        """Looks it up in the backup index."""
        runs["backup"] += 1
        return f"backup found {x}"

    @tool
    def wait(x: int) -> str:
        """Takes longer than the breaker's cooldown."""
        default_registry().clock.advance(COOLDOWN + 0.15)  # the cooldown passes, no sleeping
        return "waited"

    return runs, [primary, backup, wait]


def call(name: str, i: int) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": {"x": i}, "id": f"call_{i}"}])


# primary fails twice (opens), the model calls it anyway (rejected), uses backup,
# waits past the cooldown, and answers: seven model requests.
SCRIPT = ["primary", "primary", "primary", "backup", "wait", "backup"]


def run(script=SCRIPT):
    runs, tools = make_tools()
    model = BindingModel(responses=[call(n, i) for i, n in enumerate(script, 1)] + [AIMessage("done")], menus=[])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = create_react_agent(model, ToolNode(tools, handle_tool_errors=True))
    result = graph.invoke({"messages": [HumanMessage("find it")]})
    assert result["messages"][-1].content == "done"
    results = [(m.status, m.content) for m in result["messages"] if isinstance(m, ToolMessage)]
    return model.menus, results, runs


def names(menus) -> list[list[str]]:
    return [[t["function"]["name"] for t in menu] for menu in menus]


ALL = ["primary", "backup", "wait"]


def test_switch_off_the_model_is_sent_the_tools_it_is_sent_without_us(instrument, registry_clock):
    quick_breaker_settings()
    bare = run()
    instrument("langchain")
    menus, results, runs = run()
    assert menus == bare[0]
    assert names(menus) == [ALL] * 7
    assert runs["primary"] == 2  # the breaker still rejects the third call
    assert UNAVAILABLE in results[2][1]


def test_switch_on_nothing_open_the_same_tools(instrument, registry_clock):
    quick_breaker_settings(hide_open_tools="true")
    script = ["backup", "wait", "backup"]
    bare = run(script)
    instrument("langchain")
    guarded = run(script)
    assert guarded == bare
    assert names(guarded[0]) == [ALL] * 4


def test_open_tool_leaves_the_menu_until_its_probe(instrument, registry_clock):
    quick_breaker_settings(hide_open_tools="true")
    instrument("langchain")
    menus, results, runs = run()
    assert names(menus) == [
        ALL,
        ALL,
        ["backup", "wait"],  # primary is open: off the menu, the healthy alternative stays
        ["backup", "wait"],
        ["backup", "wait"],
        ALL,  # the cooldown passed: half-open, back for its probe
        ALL,
    ]
    # A call to the hidden tool anyway gets the usual rejection, and the loop goes on.
    assert results[2][0] == "error" and "Tool 'primary' " + UNAVAILABLE in results[2][1]
    assert runs == {"primary": 2, "backup": 2}
    # The bound tool definitions themselves are left alone.
    assert [t["function"]["name"] for t in menus[0]] == ALL
