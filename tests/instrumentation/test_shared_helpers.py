"""Helpers adapters share: refusals for the loop guard, Chat Completions shapes, the
servers of MCP-made tools, arguments a tool does not take, and context variables
through sync generators and worker threads (no framework needed)."""

from __future__ import annotations

import contextvars
import gc
import json
import logging
import threading

import pytest

from otel_breaker import ToolCall, ToolLoopError
from otel_breaker.config import load_settings, set_settings
from otel_breaker.degrade import STATUS_HEADER
from otel_breaker.guards import Guard
from otel_breaker.instrumentation import refusals
from otel_breaker.instrumentation.chat_messages import (
    DICT_MESSAGES,
    amended_request,
    content_text,
    part_text,
    status_during,
    tool_name,
    with_content_text,
    with_part_text,
)
from otel_breaker.instrumentation.mcp_identity import ToolSources, link_server, linked_server
from otel_breaker.instrumentation.mistakes import wrong_arguments
from otel_breaker.instrumentation.spec import MessageDialect, insert_status_block
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


def test_refusals_raising_answers_in_the_frameworks_own_error():
    class StepError(Exception):
        def __init__(self, text: str, logger: object) -> None:
            super().__init__(text)
            self.logger = logger

    try:
        raise KeyError("the framework's own refusal")
    except KeyError:
        with pytest.raises(StepError, match="loop text") as raised:
            refusals.raising(StepError, "the logger")("loop text")
    assert raised.value.logger == "the logger" and raised.value.__suppress_context__


# Dict messages whose content may be a list of parts: the block goes in a part of its own.
PARTS = MessageDialect(
    is_system=lambda m: m["role"] == "system",
    text=lambda m: part_text(m["content"]),
    with_text=lambda m, text: {**m, "content": with_part_text(m["content"], text)},
    system=lambda text: {"role": "system", "content": text},
)


def test_status_block_in_a_part_of_its_own_leaves_the_other_parts_alone():
    set_settings(load_settings({"OTEL_BREAKER_STATUS_IN_PROMPT": "true"}))
    cached = {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
    messages = [{"role": "system", "content": [cached]}, {"role": "user", "content": "hi"}]
    assert insert_status_block(messages, PARTS, "p") is None  # nothing open: unchanged
    breaker = default_registry().breaker_for(ToolCall("search", agent_name="p"))
    breaker.force_open()
    amended = insert_status_block(messages, PARTS, "p")
    content = amended[0]["content"]
    assert len(content) == 2 and content[0] is cached and content[1]["text"].startswith(STATUS_HEADER)
    assert messages[0]["content"] == [cached]  # the framework's own list is left as it was
    assert insert_status_block(amended, PARTS, "p") is None  # the same block again: unchanged
    breaker.force_close()
    assert insert_status_block(amended, PARTS, "p")[0]["content"] == [cached]  # all healthy: the part goes
    assert part_text("plain") == "plain" and part_text(None) is None and with_part_text("old", "new") == "new"


def test_tool_name_of_each_providers_form():
    class Tool:
        name = "object"

    forms = [{"type": "function", "function": {"name": "schema"}}, {"name": "flat"}, Tool(), {"function": "x"}, 3]
    assert [tool_name(t) for t in forms] == ["schema", "flat", "object", None, None]


def test_wrong_arguments_is_a_type_error_raised_in_the_frameworks_file():
    def hand_on(tool):  # this file stands in for the framework's
        return tool(unexpected=1)

    with pytest.raises(TypeError) as handed:
        hand_on(lambda: None)
    with pytest.raises(TypeError) as inside:
        hand_on(lambda **_: json.loads(5))
    assert wrong_arguments(handed.value, "instrumentation/test_shared_helpers.py")
    assert not wrong_arguments(handed.value, "framework/tools.py")
    assert not wrong_arguments(inside.value, "instrumentation/test_shared_helpers.py")  # raised in the tool's body
    assert not wrong_arguments(ValueError("x"), "instrumentation/test_shared_helpers.py")


def test_tool_sources_remembering_keeps_the_server_a_made_tool_came_from(caplog):
    class Made:
        pass

    sources = ToolSources()
    make = sources.remembering(lambda args, kwargs: kwargs.get("server"))
    tool, other = make(lambda **k: Made(), None, (), {"server": "srv@1"}), make(lambda **k: Made(), None, (), {})
    assert sources.source_of(tool) == "srv@1" and sources.source_of(other) is None
    broken = sources.remembering(lambda args, kwargs: 1 / 0)
    with caplog.at_level(logging.DEBUG, logger="otel_breaker"):
        assert isinstance(broken(lambda: Made(), None, (), {}), Made)  # the tool is made either way
    assert "could not tell an MCP tool's server" in caplog.text


def test_a_linked_server_is_found_while_it_lives_and_not_kept_alive():
    class Made:
        pass

    class Server:
        pass

    tool, server = Made(), Server()
    link_server(tool, server)
    assert linked_server(tool) is server and linked_server(Made()) is None
    del server
    gc.collect()
    assert linked_server(tool) is None


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


def test_wrong_arguments_tells_the_framework_handing_on_from_the_body():
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
    assert [wrong_arguments(exc, here) for exc in raised] == [False, True]
    assert wrong_arguments(raised[0], "tool_body.py")
    assert not wrong_arguments(ValueError("not a TypeError"), here)
