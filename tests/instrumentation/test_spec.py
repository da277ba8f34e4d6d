"""Declarative adapters: wrappers built from a spec, on a small real module patched as a framework would be."""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import pathlib
import sys

import pytest

from otel_breaker import State, ToolCall, get_circuit_breaker
from otel_breaker.config import load_settings, set_settings
from otel_breaker.degrade import STATUS_HEADER
from otel_breaker.instrumentation.spec import (
    MessageDialect,
    SpecAdapter,
    context_patch,
    insert_status_block,
    menu_patch,
    prompt_patch,
    split_requirement,
    status_text,
    tool_patch,
)
from otel_breaker.menu import visible_tools
from otel_breaker.registry import default_registry

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = pathlib.Path(__file__).resolve().parents[2]

FRAMEWORK_SOURCE = """
CLOSED = []


class Tool:
    def __init__(self, name, body):
        self.name = name
        self.body = body

    def run(self, x):
        return self.body(x)

    async def arun(self, x):
        return self.body(x)

    async def stream(self, x):
        try:
            yield "progress"
            yield {"status": "ok", "value": self.body(x)}
        finally:
            CLOSED.append(self.name)


class Paused(Exception):  # the framework's pause for a person: control flow, not a broken tool
    pass


class Menu:
    def offer(self, tools):
        return list(tools)


class Model:
    def __init__(self):
        self.seen = []

    def complete(self, messages):
        self.seen.append(messages)
        return "answer"
"""


@pytest.fixture
def specframework(tmp_path, monkeypatch):
    (tmp_path / "specframework.py").write_text(FRAMEWORK_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("specframework", None)
    yield importlib.import_module("specframework")
    sys.modules.pop("specframework", None)


DIALECT = MessageDialect(
    is_system=lambda m: m[0] == "system",
    text=lambda m: m[1] if isinstance(m[1], str) else None,
    with_text=lambda m, text: (m[0], text),
    system=lambda text: ("system", text),
)


class SpecToy(SpecAdapter):
    name = "spectoy"
    requires = "pytest>=1"
    patches = (
        tool_patch("specframework", "Tool.run", "sync"),
        tool_patch("specframework", "Tool.arun", "async"),
        tool_patch("specframework", "Tool.stream", "asyncgen"),
        prompt_patch("specframework", "Model.complete", "sync"),
    )

    def describe(self, instance, args, kwargs):
        return ToolCall(instance.name, framework=self.name, agent="toy-agent", agent_name="toy-agent")

    def result_error(self, call, result):
        return "error_status" if isinstance(result, dict) and result.get("status") == "error" else None

    def rejection(self, call, info):
        return {"status": "error", "value": info.message}

    def with_status(self, instance, args, kwargs):
        messages = insert_status_block(args[0], DIALECT, "toy-agent")
        return None if messages is None else ((messages, *args[1:]), kwargs)


def _fail(x):
    raise RuntimeError("down")


@pytest.fixture
def adapter(specframework):
    adapter = SpecToy()
    adapter.patch()
    yield adapter
    adapter.unpatch()


def test_requirement_is_the_one_source_of_distribution_and_range():
    assert (SpecToy.distribution, SpecToy.version_range) == ("pytest", ">=1")
    assert SpecToy.modules == ("specframework",)
    assert split_requirement("google-adk>=2.13,<3") == ("google-adk", "<3,>=2.13")


def test_sync_and_async_wrappers_from_one_describe(adapter, specframework):
    tool = specframework.Tool("t1", _fail)
    with pytest.raises(RuntimeError):
        tool.run(1)
    with pytest.raises(RuntimeError):
        asyncio.run(tool.arun(1))
    breakers = default_registry().find("t1")
    assert len(breakers) == 1 and breakers[0].agent_name == "toy-agent"
    assert breakers[0].stats.failure_count == 2


def test_async_generator_events_pass_through_and_result_is_judged(adapter, specframework):
    async def collect(tool):
        return [event async for event in tool.stream(3)]

    assert asyncio.run(collect(specframework.Tool("s1", lambda x: x * 2))) == ["progress", {"status": "ok", "value": 6}]
    (breaker,) = default_registry().find("s1")
    assert breaker.stats.success_count == 1

    failing = specframework.Tool("s2", _fail)
    with pytest.raises(RuntimeError):
        asyncio.run(collect(failing))
    (breaker,) = default_registry().find("s2")
    assert breaker.stats.failure_count == 1


def test_async_generator_rejected_yields_the_rejection_only(adapter, specframework):
    runs = []
    tool = specframework.Tool("s3", lambda x: runs.append(x))
    default_registry().breaker_for(ToolCall("s3", agent="toy-agent", agent_name="toy-agent")).force_open()

    async def collect():
        return [event async for event in tool.stream(1)]

    events = asyncio.run(collect())
    assert runs == []
    assert len(events) == 1 and events[0]["status"] == "error" and "s3" in events[0]["value"]


def test_async_generator_closed_early_stops_the_tool(adapter, specframework):
    async def first():
        stream = specframework.Tool("s4", lambda x: x).stream(1)
        event = await stream.__anext__()
        await stream.aclose()
        return event

    assert asyncio.run(first()) == "progress"
    assert specframework.CLOSED == ["s4"]  # the framework's generator was closed, not left suspended
    (breaker,) = default_registry().find("s4")
    assert (breaker.stats.failure_count, breaker.stats.success_count) == (0, 0)


def test_prompt_patch_only_when_enabled(adapter, specframework):
    registry = default_registry()
    registry.breaker_for(ToolCall("search", agent="toy-agent", agent_name="toy-agent")).force_open()
    model = specframework.Model()
    model.complete([("system", "Be brief."), ("user", "hi")])
    assert model.seen[-1][0] == ("system", "Be brief.")
    set_settings(load_settings({"OTEL_BREAKER_STATUS_IN_PROMPT": "true"}))
    history = [("user", "hi")]
    model.complete(history)
    assert model.seen[-1][0][0] == "system" and model.seen[-1][0][1].startswith(STATUS_HEADER)
    assert history == [("user", "hi")], "the caller's list is not edited"
    model.complete([("system", "Be brief."), ("user", "hi")])
    text = model.seen[-1][0][1]
    assert text.startswith("Be brief.\n\n" + STATUS_HEADER) and "'search'" in text


def test_status_text_replaces_an_earlier_block_and_is_none_when_unchanged():
    set_settings(load_settings({"OTEL_BREAKER_STATUS_IN_PROMPT": "true"}))
    assert status_text("Be brief.") is None
    get_circuit_breaker("search").force_open()
    once = status_text("Be brief.")
    assert once is not None and once.count(STATUS_HEADER) == 1
    assert status_text(once) is None
    get_circuit_breaker("search").force_close()
    assert get_circuit_breaker("search").state is State.CLOSED
    assert status_text(once) == "Be brief."


def test_a_catalogued_adapter_takes_its_requirement_from_the_catalogue():
    from otel_breaker.catalogue import BY_ID

    class Catalogued(SpecAdapter):
        name = "crewai"

    class Own(SpecAdapter):
        name = "acme"
        requires = "acme-agents>=2.0,<3"

    assert Catalogued.requires == BY_ID["crewai"].requirement
    assert (Catalogued.distribution, Catalogued.version_range) == ("crewai", "<2,>=1.15")
    assert (Own.distribution, Own.version_range) == ("acme-agents", "<3,>=2.0")


def test_uninstrument_restores_the_spec_targets(specframework):
    originals = {name: specframework.Tool.__dict__[name] for name in ("run", "arun", "stream")}
    adapter = SpecToy()
    adapter.patch()
    assert all(specframework.Tool.__dict__[n] is not o for n, o in originals.items())
    adapter.unpatch()
    assert all(specframework.Tool.__dict__[n] is o for n, o in originals.items())


_offering: contextvars.ContextVar[bool] = contextvars.ContextVar("spec_offering", default=False)


class NestingToy(SpecToy):
    """A context patch and a menu patch on one method (the menu reads the variable)."""

    name = "nestingtoy"
    patches = (
        context_patch("specframework", "Menu.offer", _offering, lambda *_: True, "sync"),
        menu_patch("specframework", "Menu.offer", "sync", "offered", after=True),
    )

    def offered(self, instance, args, kwargs, result):
        return [*result, f"hook saw {_offering.get()}"]


def test_patches_on_one_method_nest_the_first_innermost(specframework):
    set_settings(load_settings({"OTEL_BREAKER_HIDE_OPEN_TOOLS": "true"}))
    original = specframework.Menu.__dict__["offer"]
    adapter = NestingToy()
    assert adapter.patch() == [] and len(adapter.targets()) == 1
    try:
        during = (f"call saw {_offering.get()}" for _ in range(1))  # read while the framework iterates it
        assert specframework.Menu().offer(during) == ["call saw True", "hook saw False"]
    finally:
        adapter.unpatch()
    assert specframework.Menu.__dict__["offer"] is original


# -- is_neutral, the menu seam, not_a_tool_call --------------------------------------------


class HidingToy(SpecToy):
    name = "hidingtoy"
    patches = (tool_patch("specframework", "Tool.run", "sync"), menu_patch("specframework", "Menu.offer", "sync"))
    broken_hook = False

    def is_neutral(self, exc):
        return type(exc).__name__ == "Paused"

    def without_open_tools(self, instance, args, kwargs):
        if self.broken_hook:
            raise RuntimeError("hook bug")
        kept = visible_tools(args[0], lambda name: name, agent="toy-agent")
        return None if kept is args[0] else ((kept,), kwargs)


@pytest.fixture
def hiding(specframework):
    adapter = HidingToy()
    adapter.patch()
    yield adapter
    adapter.unpatch()


def test_neutral_exception_propagates_and_counts_neither_way(specframework, hiding):
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2"}))

    def pause(x):
        raise specframework.Paused("waiting for approval")

    tool = specframework.Tool("approve", pause)
    for x in range(4):
        with pytest.raises(specframework.Paused):
            tool.run(x)
    (breaker,) = default_registry().find("approve")
    assert breaker.state is State.CLOSED
    assert (breaker.stats.failure_count, breaker.stats.success_count) == (0, 0)
    broken = specframework.Tool("approve", _fail)  # the same tool really failing still counts
    for x in range(2):
        with pytest.raises(RuntimeError):
            broken.run(x)
    assert breaker.state is State.OPEN


def test_menu_patch_hides_open_tools_only_when_asked(specframework, hiding):
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "1"}))
    menu, offered = specframework.Menu(), ["broken", "fine"]
    with pytest.raises(RuntimeError):
        specframework.Tool("broken", _fail).run(1)  # opens
    assert menu.offer(offered) == offered  # the switch is off by default
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "1", "OTEL_BREAKER_HIDE_OPEN_TOOLS": "true"}))
    assert menu.offer(offered) == ["fine"]
    hiding.broken_hook = True  # a failing hook leaves the call as it was
    assert menu.offer(offered) == offered


def test_not_a_tool_call_runs_inner_tool_calls_unguarded(specframework, hiding):
    from otel_breaker.instrumentation.base import active_call, not_a_tool_call

    with not_a_tool_call("summarize", "hidingtoy"):
        assert active_call().tool == "summarize"
        with pytest.raises(RuntimeError):
            specframework.Tool("summarize", _fail).run(1)
    assert active_call() is None
    assert default_registry().find("summarize") == []
