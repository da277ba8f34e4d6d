"""Helpers adapters share: refusals for the loop guard, Chat Completions shapes, and
context variables through sync generators and worker threads (no framework needed)."""

from __future__ import annotations

import contextvars
import threading

import pytest

from otel_breaker import ToolCall, ToolLoopError
from otel_breaker.config import load_settings, set_settings
from otel_breaker.degrade import STATUS_HEADER
from otel_breaker.guard import Guard
from otel_breaker.instrumentation import refusals
from otel_breaker.instrumentation.chat_messages import (
    DICT_MESSAGES,
    amended_request,
    content_text,
    status_during,
    with_content_text,
)
from otel_breaker.instrumentation.mistakes import raised_handing_on
from otel_breaker.instrumentation.sync_context import decorator_in_caller_context, scoped_generator
from otel_breaker.registry import default_registry

var: contextvars.ContextVar[str | None] = contextvars.ContextVar("test_shared_helpers", default=None)


def _rejected(text: str) -> str:
    return f"REJECTED: {text}"


@pytest.mark.parametrize("unknown", [False, True])
def test_refusals_count_then_answer_from_the_limit(unknown):
    guard, call = Guard(), ToolCall("echo", agent_name="a", arguments={"x": "nope"})
    answers = [refusals.refused(guard, call, "bad x", _rejected, unknown) for _ in range(5)]
    assert answers[:3] == [refusals.RUN] * 3
    expected = "no tool of that name exists" if unknown else "this exact call, with the same arguments"
    assert all(isinstance(a, str) and expected in a and "3 times" in a for a in answers[3:])
    other = ToolCall("echo", agent_name="a", arguments={"x": "other"})
    assert unknown or refusals.refused(guard, other, "bad x", _rejected) is refusals.RUN  # other arguments run
    assert default_registry().breakers() == []  # a refused call never makes a breaker


def test_refusals_stop_raises_tool_loop_error():
    set_settings(load_settings({"OTEL_BREAKER_LOOP_ACTION": "stop"}))
    guard, call = Guard(), ToolCall("echo", agent_name="b", arguments={"x": "nope"})
    for _ in range(3):
        assert refusals.refused(guard, call, "bad x", _rejected) is refusals.RUN
    with pytest.raises(ToolLoopError) as raised:
        refusals.refused(guard, call, "bad x", _rejected)
    assert (raised.value.tool, raised.value.count, raised.value.last_error) == ("echo", 3, "bad x")


def test_content_text_of_strings_and_parts():
    parts = [{"type": "image"}, {"type": "text", "text": "first"}, {"type": "text", "text": "last"}]
    assert content_text("plain") == "plain" and content_text(parts) == "last" and content_text(None) is None
    changed = with_content_text(parts, "new")
    assert changed[2]["text"] == "new" and parts[2]["text"] == "last"  # a copy
    assert with_content_text("old", "new") == "new"


def test_amended_request_off_is_the_same_object():
    params = {"messages": [{"role": "system", "content": "hi"}], "tools": [{"function": {"name": "t"}}]}
    assert amended_request(params, None) is params


def test_status_during_adds_and_takes_out_again():
    set_settings(load_settings({"OTEL_BREAKER_STATUS_IN_PROMPT": "true"}))
    default_registry().get("flaky").force_open()
    messages = [{"role": "system", "content": "base"}, {"role": "user", "content": "go"}]
    original = list(messages)
    with status_during(messages, DICT_MESSAGES, None):
        assert STATUS_HEADER in messages[0]["content"] and len(messages) == 2
    assert messages == original and messages[0] is original[0]
    bare = [{"role": "user", "content": "go"}]
    with status_during(bare, DICT_MESSAGES, None):
        assert bare[0]["role"] == "system" and len(bare) == 2
    assert bare == [{"role": "user", "content": "go"}]


def test_scoped_generator_sets_the_variable_only_while_it_runs():
    def steps():
        for _ in range(2):
            seen = var.get()
            yield seen

    gen = scoped_generator(steps(), var, "inside")
    assert next(gen) == "inside" and var.get() is None
    assert next(gen) == "inside" and var.get() is None
    with pytest.raises(StopIteration):
        next(gen)


def test_decorator_in_caller_context_carries_the_context_to_the_worker():
    def in_thread():  # a decorator factory whose decorated call runs in a fresh thread
        def decorator(func):
            def run(*args):
                out = []
                worker = threading.Thread(target=lambda: out.append(func(*args)))
                worker.start()
                worker.join()
                return out[0]

            return run

        return decorator

    token = var.set("caller")
    try:
        plain = in_thread()(var.get)()
        carried = decorator_in_caller_context(in_thread, None, (), {})(var.get)()
    finally:
        var.reset(token)
    assert (plain, carried) == (None, "caller")


def test_raised_handing_on_tells_the_call_from_the_body():
    """A TypeError raised handing arguments to a function that does not take them has
    the calling file as its innermost frame; one the body raised has the body's."""
    namespace: dict = {}
    exec(compile("def body(x):\n    raise TypeError('inside')\n", "tool_body.py", "exec"), namespace)
    raised = []
    for arguments in ((1,), (1, 2)):
        try:
            namespace["body"](*arguments)
        except TypeError as exc:
            raised.append(exc)
    here = "tests/instrumentation/test_shared_helpers.py"
    assert [raised_handing_on(exc, here) for exc in raised] == [False, True]
    assert raised_handing_on(raised[0], "tool_body.py")
    assert not raised_handing_on(ValueError("not a TypeError"), here)
