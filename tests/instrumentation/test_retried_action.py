"""A retried action as one logical call (CrewAI's ``actions``), on a small real module that
retries an action the way a framework does: an entry calls an attempt, which invokes the
tool and, on an error, calls the entry again."""

from __future__ import annotations

import asyncio
import importlib
import sys

import pytest

from otel_breaker import State, ToolCall
from otel_breaker.config import load_settings, set_settings
from otel_breaker.instrumentation.crewai.actions import Action, Actions, RetriedAction
from otel_breaker.instrumentation.spec import SpecAdapter, tool_patch
from otel_breaker.registry import default_registry

FRAMEWORK_SOURCE = """
class Failure:  # what a tool returns, or the framework records, when it failed
    def __init__(self, message):
        self.message = message


class Tool:
    def __init__(self, name, body):
        self.name, self.body, self.runs = name, body, 0

    def invoke(self, x):  # the framework's own invocation, made by an action
        self.runs += 1
        return self.body(x)

    async def ainvoke(self, x):
        self.runs += 1
        return self.body(x)


class Plain:  # a tool run directly, not by an action (a tool may call it in its body)
    def __init__(self, name, body):
        self.name, self.body = name, body

    def run(self, x):
        return self.body(x)


class Usage:
    def __init__(self, tool, attempts=3, broken_record=False):
        self.tool, self.attempts, self.tried, self.broken_record = tool, attempts, 0, broken_record
        self.last_failure, self.history = None, []

    def use(self, x):
        return self._use(x)

    def _use(self, x):
        self.tried += 1
        try:
            result = self.tool.invoke(x)
        except Exception as exc:
            if self.tried < self.attempts:
                return self.use(x)
            result = Failure(str(exc))
        return self._record(result)

    async def ause(self, x):
        return await self._ause(x)

    async def _ause(self, x):
        self.tried += 1
        try:
            result = await self.tool.ainvoke(x)
        except Exception as exc:
            if self.tried < self.attempts:
                return await self.ause(x)
            result = Failure(str(exc))
        return self._record(result)

    def _record(self, result):
        if isinstance(result, Failure):
            if self.broken_record:
                raise RuntimeError("the framework cannot record it")
            self.last_failure = result
            self.history.append(("failed", result.message))
            return "failed: " + result.message
        self.history.append(("result", result))
        return result
"""

ACTIONS = Actions("test_retried_action", before=lambda usage: usage.last_failure)


class RetryToy(RetriedAction, SpecAdapter):
    name, requires, actions = "retrytoy", "pytest>=1", ACTIONS
    patches = (
        tool_patch("retryframework", "Tool.invoke", "sync"),
        tool_patch("retryframework", "Tool.ainvoke", "async"),
        tool_patch("retryframework", "Plain.run", "sync"),
        *ACTIONS.patches("retryframework", "Usage.use", "Usage._use", "sync"),
        *ACTIONS.patches("retryframework", "Usage.ause", "Usage._ause", "async"),
    )

    def joins_action(self, tool):
        return type(tool).__name__ == "Tool"

    def describe(self, instance, args, kwargs):
        if type(instance).__name__ == "Usage":
            return ACTIONS.claim(ToolCall(instance.tool.name, self.name, "toy", "toy"), instance.tool)
        return ToolCall(instance.name, self.name, "toy", "toy")

    def result_error(self, call, result):
        if (action := ACTIONS.of(call)) is not None:  # what the action recorded, not what it returned
            result = action.owner.last_failure
            if result is action.before:
                return None
        return "failed" if type(result).__name__ == "Failure" else None

    def rejection(self, call, info):
        return ACTIONS.rejected(call, info, sys.modules["retryframework"].Failure(info.message))


@pytest.fixture
def framework(tmp_path, monkeypatch):
    (tmp_path / "retryframework.py").write_text(FRAMEWORK_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("retryframework", None)
    module = importlib.import_module("retryframework")
    adapter = RetryToy()
    adapter.patch()
    yield module
    adapter.unpatch()
    sys.modules.pop("retryframework", None)


def _down(x):
    raise RuntimeError("backend down")


def _use(usage, use_async: bool):
    return asyncio.run(usage.ause(1)) if use_async else usage.use(1)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_retries_are_one_call_and_a_rejected_action_is_recorded_by_the_framework(framework, use_async):
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2"}))
    tool = framework.Tool("lookup", _down)
    for _ in range(2):
        assert _use(framework.Usage(tool), use_async) == "failed: backend down"
    (breaker,) = default_registry().find("lookup")
    assert (tool.runs, breaker.stats.failure_count, breaker.state) == (6, 2, State.OPEN)  # 3 attempts, one call
    usage = framework.Usage(tool)
    answer = _use(usage, use_async)
    assert tool.runs == 6 and "temporarily unavailable" in answer  # the body never ran
    assert usage.history == [("failed", answer.removeprefix("failed: "))]  # recorded as the tool's result
    assert ACTIONS.var.get() is None


def test_a_success_after_retries_is_one_success(framework):
    outcomes = iter([RuntimeError("flaky"), RuntimeError("flaky"), "sunny"])

    def flaky(x):
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    tool = framework.Tool("weather", flaky)
    assert framework.Usage(tool).use(1) == "sunny"
    (breaker,) = default_registry().find("weather")
    assert (tool.runs, breaker.stats.failure_count, breaker.stats.success_count) == (3, 0, 1)


def test_an_action_inside_an_action_joins_the_outermost(framework):
    inner = framework.Tool("inner", lambda x: "inner result")
    outer = framework.Tool("outer", lambda x: framework.Usage(inner).use(x))
    assert framework.Usage(outer).use(1) == "inner result"
    assert [b.name for b in default_registry().breakers()] == ["outer"]  # the inner one is part of it


def test_another_tool_called_in_the_actions_tool_is_its_own_call(framework):
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "1"}))
    other = framework.Plain("other", _down)
    with pytest.raises(RuntimeError):
        other.run(1)  # opens
    result = framework.Usage(framework.Tool("caller", lambda x: f"other: {other.run(x).message}")).use(1)
    assert result.startswith("other: ") and "temporarily unavailable" in result  # other's rejection, to the body
    (caller,) = default_registry().find("caller")
    assert caller.state is State.CLOSED and caller.stats.success_count == 1  # the action was not rejected


def test_an_attempt_outside_an_action_runs_unguarded(framework):
    tool = framework.Tool("lookup", lambda x: "found")
    assert framework.Usage(tool)._use(1) == "found"  # the tool itself is still guarded
    assert [b.name for b in default_registry().breakers()] == ["lookup"]
    assert ACTIONS.claim(ToolCall("lookup")) is None


def test_a_rerun_that_fails_answers_the_rejection_text(framework):
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "1"}))
    tool = framework.Tool("lookup", _down)
    framework.Usage(tool).use(1)
    answer = framework.Usage(tool, broken_record=True).use(1)
    assert isinstance(answer, str) and "temporarily unavailable" in answer


def test_mistaken_marks_only_the_action_in_progress():
    ACTIONS.mistaken()  # no action: nothing to mark, no error
    action = Action("owner", None)
    token = ACTIONS.var.set(action)
    try:
        ACTIONS.mistaken(ValueError("bad arguments"))
    finally:
        ACTIONS.var.reset(token)
    assert action.mistake and (action.owner, action.call) == ("owner", None)
