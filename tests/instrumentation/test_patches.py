"""The shared patch shapes: context, menu and prompt patches, on a small real module
patched as a framework would be (no framework needed)."""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import sys

import pytest

from otel_breaker import ToolCall
from otel_breaker.config import load_settings, set_settings
from otel_breaker.degrade import STATUS_HEADER
from otel_breaker.instrumentation.patches import (
    SKIP,
    argument,
    closure_value,
    context_patch,
    context_wrapper,
    menu_patch,
    observe_patch,
    prompt_patch,
    rebind,
    scoped,
    tool_patch,
)
from otel_breaker.instrumentation.spec import SpecAdapter, status_text
from otel_breaker.menu import visible_tools
from otel_breaker.registry import default_registry

SOURCE = """
class Agent:
    def __init__(self, name, tool):
        self.name = name
        self.tool = tool

    def turn(self, x):
        return self.tool.run(x)

    async def aturn(self, x):
        return await self.tool.arun(x)

    async def steps(self, n):
        for i in range(n):
            yield self.tool.run(i)

    def sync_steps(self, n):
        for i in range(n):
            yield self.tool.run(i)
        return "done"


class Tool:
    def __init__(self, name, body):
        self.name = name
        self.body = body

    def run(self, x):
        return self.body(x)

    async def arun(self, x):
        return self.body(x)


class Workbench:
    def __init__(self, names):
        self.names = names

    def listing(self):
        return list(self.names)

    async def alisting(self):
        return list(self.names)


def instructions(agent):
    return "Be brief."


class Factory:
    def make(self, name):
        return Tool(name, lambda x: x)

    async def amake(self, name):
        return Tool(name, lambda x: x)
"""

_agent: contextvars.ContextVar = contextvars.ContextVar("test_patches_agent", default=None)


class Toy(SpecAdapter):
    name = "patchtoy"
    requires = "pytest>=1"
    patches = (
        tool_patch("patchframework", "Tool.run", "sync"),
        tool_patch("patchframework", "Tool.arun", "async"),
        context_patch("patchframework", "Agent.turn", _agent, lambda agent, a, k: agent, "sync"),
        context_patch("patchframework", "Agent.aturn", _agent, lambda agent, a, k: agent),
        context_patch(
            "patchframework", "Agent.steps", _agent, lambda ag, a, k: SKIP if ag.name == "x" else ag, "asyncgen"
        ),
        context_patch(
            "patchframework", "Agent.sync_steps", _agent, lambda ag, a, k: SKIP if ag.name == "x" else ag, "gen"
        ),
        menu_patch("patchframework", "Workbench.listing", "sync", "visible", after=True),
        menu_patch("patchframework", "Workbench.alisting", "async", "visible", after=True),
        prompt_patch("patchframework", "instructions", "sync", "block", after=True),
        observe_patch("patchframework", "Factory.make", "made"),
        observe_patch("patchframework", "Factory.amake", "made", "async"),
    )

    def __init__(self) -> None:
        super().__init__()
        self.seen: list = []
        self.observed: list = []
        self.broken = False

    def describe(self, instance, args, kwargs):
        agent = _agent.get()
        self.seen.append(agent.name if agent is not None else None)
        return ToolCall(instance.name, framework=self.name, agent_name=agent.name if agent else None)

    def visible(self, instance, args, kwargs, result):
        if self.broken:
            raise RuntimeError("hook bug")
        kept = visible_tools(result, lambda name: name, agent="a1")
        return None if kept is result else kept

    def made(self, instance, args, kwargs, result):
        if self.broken:
            raise RuntimeError("hook bug")
        self.observed.append(result.name)
        return "not the result"

    def block(self, instance, args, kwargs, result):
        return status_text(result, argument(args, kwargs, 0, "agent"))


@pytest.fixture
def framework(tmp_path, monkeypatch):
    (tmp_path / "patchframework.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("patchframework", None)
    module = importlib.import_module("patchframework")
    adapter = Toy()
    adapter.patch()
    yield module, adapter
    adapter.unpatch()
    sys.modules.pop("patchframework", None)


def test_context_patch_sets_the_variable_for_the_call_only(framework):
    module, adapter = framework
    agent = module.Agent("a1", module.Tool("t", lambda x: x))
    assert agent.turn(1) == 1
    assert asyncio.run(agent.aturn(2)) == 2
    assert adapter.seen == ["a1", "a1"]
    assert _agent.get() is None


def test_context_patch_on_an_async_generator_holds_for_its_steps_only(framework):
    module, adapter = framework

    async def consume(agent):
        seen_outside = []
        async for _ in agent.steps(2):
            seen_outside.append(_agent.get())
        return seen_outside

    assert asyncio.run(consume(module.Agent("a2", module.Tool("t", lambda x: x)))) == [None, None]
    assert adapter.seen == ["a2", "a2"]
    adapter.seen.clear()
    asyncio.run(consume(module.Agent("x", module.Tool("t", lambda x: x))))  # SKIP: left alone
    assert adapter.seen == [None, None]


def test_context_patch_on_a_generator_holds_for_its_steps_only(framework):
    module, adapter = framework
    steps = module.Agent("g1", module.Tool("t", lambda x: x)).sync_steps(2)
    seen_outside = []
    for _ in steps:
        seen_outside.append(_agent.get())
    assert seen_outside == [None, None] and adapter.seen == ["g1", "g1"]
    adapter.seen.clear()
    with pytest.raises(StopIteration) as stop:  # the generator's return value comes through
        next(module.Agent("g2", module.Tool("t", lambda x: x)).sync_steps(0))
    assert stop.value.value == "done"
    assert list(module.Agent("x", module.Tool("t", lambda x: x)).sync_steps(2)) == [0, 1]  # SKIP: left alone
    assert adapter.seen == [None, None]


def test_context_patch_passes_through_once_unpatched(framework):
    module, adapter = framework
    adapter.unpatch()
    agent = module.Agent("a3", module.Tool("t", lambda x: x))
    assert agent.turn(1) == 1 and adapter.seen == []


def test_menu_patch_on_a_result_hides_open_tools_only_when_asked(framework):
    module, adapter = framework
    default_registry().breaker_for(ToolCall("broken", agent_name="a1")).force_open()
    bench = module.Workbench(["broken", "fine"])
    assert bench.listing() == ["broken", "fine"]
    set_settings(load_settings({"OTEL_BREAKER_HIDE_OPEN_TOOLS": "true"}))
    assert bench.listing() == ["fine"]
    assert asyncio.run(bench.alisting()) == ["fine"]
    adapter.broken = True  # a failing hook leaves the result as it was
    assert bench.listing() == ["broken", "fine"]


def test_prompt_patch_on_a_result_adds_the_block_only_when_asked(framework):
    module, _ = framework
    default_registry().breaker_for(ToolCall("search", agent_name="a1")).force_open()
    assert module.instructions("a1") == "Be brief."
    set_settings(load_settings({"OTEL_BREAKER_STATUS_IN_PROMPT": "true"}))
    text = module.instructions("a1")
    assert text.startswith("Be brief.") and STATUS_HEADER in text


def test_context_patch_value_may_be_awaited():
    """A fact the framework hands out only awaited (a workflow's state store) is read before the call;
    a value that fails to come leaves the variable alone."""

    async def named(instance, args, kwargs):
        await asyncio.sleep(0)
        return instance

    async def failing(instance, args, kwargs):
        raise RuntimeError("store gone")

    seen = []

    async def call(x):
        seen.append(_agent.get())
        return x

    assert asyncio.run(context_wrapper(context_patch("m", "f", _agent, named))(call, "a4", (1,), {})) == 1
    assert asyncio.run(context_wrapper(context_patch("m", "f", _agent, failing))(call, "a5", (2,), {})) == 2
    assert seen == ["a4", None] and _agent.get() is None


def test_observe_patch_sees_every_result_and_never_changes_it(framework):
    module, adapter = framework
    factory = module.Factory()
    made, amade = factory.make("a"), asyncio.run(factory.amake("b"))
    assert isinstance(made, module.Tool) and isinstance(amade, module.Tool)  # what the hook returns is ignored
    assert adapter.observed == ["a", "b"]  # no setting asked for it
    adapter.broken = True  # a failing hook leaves the call as it was
    assert factory.make("c").name == "c" and adapter.observed == ["a", "b"]
    adapter.unpatch()
    factory.make("d")
    assert adapter.observed == ["a", "b"]


def test_rebind_copies_a_function_with_one_free_variable_changed():
    def maker(items, suffix):
        def listing():
            return [item + suffix for item in items]

        return listing

    listing = maker(["a", "b"], "!")
    fewer = rebind(listing, "items", ["b"])
    assert closure_value(listing, "items") == ["a", "b"] and closure_value(fewer, "items") == ["b"]
    assert fewer() == ["b!"] and listing() == ["a!", "b!"]  # the original's closure is untouched
    with pytest.raises(ValueError):
        rebind(listing, "missing", [])


def test_scoped_sets_a_variable_for_the_block_only():
    with scoped(_agent, "a6"):
        assert _agent.get() == "a6"
        with pytest.raises(RuntimeError), scoped(_agent, "a7"):
            raise RuntimeError("inside")
        assert _agent.get() == "a6"
    assert _agent.get() is None
