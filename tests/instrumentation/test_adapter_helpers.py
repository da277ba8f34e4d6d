"""Adapter helpers for the loop guard and the status block, without a framework: the
model's mistakes (``mistakes``), Strands' held loop stop and Haystack's status block for
one step."""

from __future__ import annotations

import asyncio

import pytest

from otel_breaker import Guard, ToolCall, ToolLoopError
from otel_breaker.config import load_settings, set_settings
from otel_breaker.degrade import STATUS_HEADER
from otel_breaker.instrumentation.haystack import status_for_step
from otel_breaker.instrumentation.mistakes import Refusals, arun_invalid, run_invalid, run_unknown
from otel_breaker.instrumentation.spec import MessageDialect
from otel_breaker.instrumentation.strands import hold, raising_held
from otel_breaker.registry import default_registry

LOOP = "this exact call, with the same arguments"


class Adapter:
    """What the helpers need of an adapter: its guard and its rejection form."""

    def __init__(self) -> None:
        self.guard = Guard()

    def rejection(self, call, info):
        return f"REJECTED: {info.message}"


def refuse(x):
    raise ValueError(f"x must be an integer, not {x!r}")


def test_refused_arguments_get_the_loop_answer_from_the_fourth_identical_call():
    adapter, call = Adapter(), ToolCall("search", "fake", agent_name="a", arguments={"x": "ten"})
    view = Refusals(adapter, raised=lambda exc: isinstance(exc, ValueError))
    for _ in range(3):
        with pytest.raises(ValueError):
            run_invalid(adapter, call, view, refuse, ("ten",), {})
    answer = run_invalid(adapter, call, view, refuse, ("ten",), {})
    assert answer.startswith("REJECTED:") and LOOP in answer and "3 times" in answer
    other = ToolCall("search", "fake", agent_name="a", arguments={"x": "eleven"})
    with pytest.raises(ValueError):  # other arguments always run
        run_invalid(adapter, other, view, refuse, ("eleven",), {})
    (breaker,) = default_registry().find("search")
    assert breaker.stats.failure_count == 0  # the breaker counts no mistake


def test_a_refusal_read_from_the_result_and_stop():
    set_settings(load_settings({"OTEL_BREAKER_LOOP_ACTION": "stop"}))
    adapter, call = Adapter(), ToolCall("search", "fake", agent_name="a", arguments={"y": 1})
    view = Refusals(adapter, returned=lambda result: result == "refused")

    async def answer():
        return "refused"

    for _ in range(3):
        assert asyncio.run(arun_invalid(adapter, call, view, answer, (), {})) == "refused"
    with pytest.raises(ToolLoopError) as raised:
        asyncio.run(arun_invalid(adapter, call, view, answer, (), {}))
    assert (raised.value.tool, raised.value.count) == ("search", 3)


def test_failures_are_not_mistakes():
    adapter, call = Adapter(), ToolCall("search", "fake", agent_name="a", arguments={"x": 1})
    view = Refusals(adapter, raised=lambda exc: isinstance(exc, ValueError))

    def down(x):
        raise RuntimeError("down")

    for _ in range(6):
        with pytest.raises(RuntimeError):
            run_invalid(adapter, call, view, down, (1,), {})


def test_unknown_name():
    call = ToolCall("no_such_tool", "fake", agent_name="a")
    answers = [
        run_unknown(call, lambda text: f"LOOP: {text}", lambda r: r, lambda: "unknown tool", (), {}) for _ in range(5)
    ]
    assert answers[:3] == ["unknown tool"] * 3
    assert all(a.startswith("LOOP:") and "no tool of that name exists" in a for a in answers[3:])
    known = ToolCall("no_such_tool", "fake", agent_name="b")  # another run: its own count
    assert run_unknown(known, lambda text: text, lambda r: None, lambda: "fine", (), {}) == "fine"


async def test_a_held_stop_is_raised_at_the_boundary():
    class Owner:
        pass

    owner, error = Owner(), ToolLoopError("search", 3, "bad")

    async def events():
        yield 1
        hold(owner, error)
        yield 2

    seen = []
    with pytest.raises(ToolLoopError):
        async for event in raising_held(events(), owner):
            seen.append(event)
    assert seen == [1, 2]

    async def quiet():
        yield 3

    assert [e async for e in raising_held(quiet(), owner)] == [3]  # raised once, then forgotten


def test_a_steps_status_block_is_taken_out_after_the_step():
    set_settings(load_settings({"OTEL_BREAKER_STATUS_IN_PROMPT": "true"}))
    default_registry().get("search").force_open(60)
    dialect = MessageDialect(
        lambda m: m[0] == "system", lambda m: m[1], lambda m, text: ("system", text), lambda text: ("system", text)
    )
    state = {"messages": [("system", "Be brief."), ("user", "hi")]}
    undo = status_for_step(lambda: state, "messages", dialect, None)
    assert STATUS_HEADER in state["messages"][0][1]
    state["messages"] = [*state["messages"], ("assistant", "hello")]  # the step's reply
    undo()
    assert state["messages"] == [("system", "Be brief."), ("user", "hi"), ("assistant", "hello")]
    assert status_for_step(lambda: {}, "messages", dialect, None)() is None  # nothing to amend
