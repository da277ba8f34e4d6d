"""The status block in the messages a framework's context manager yields (CrewAI's ``status_while_open``)."""

from __future__ import annotations

import contextlib

import pytest

from otel_breaker.config import load_settings, set_settings
from otel_breaker.degrade import STATUS_HEADER
from otel_breaker.instrumentation.chat_messages import DICT_MESSAGES
from otel_breaker.instrumentation.crewai.adapter import status_while_open
from otel_breaker.registry import default_registry


class Conversation:
    """A framework keeping its messages, preparing each model call in a context manager."""

    def __init__(self) -> None:
        self.messages = [{"role": "system", "content": "base"}, {"role": "user", "content": "go"}]
        self.closed = 0

    @contextlib.contextmanager
    def prepared(self):
        try:
            yield self.messages
        finally:
            self.closed += 1


def test_the_block_is_in_the_messages_only_while_the_framework_uses_them():
    set_settings(load_settings({"OTEL_BREAKER_STATUS_IN_PROMPT": "true"}))
    default_registry().get("flaky").force_open()
    conversation = Conversation()
    original = list(conversation.messages)
    with status_while_open(conversation.prepared(), DICT_MESSAGES, None) as messages:
        assert messages is conversation.messages and STATUS_HEADER in messages[0]["content"]
        messages.append({"role": "assistant", "content": "answer"})  # the framework's own addition stays
    assert conversation.messages == [*original, {"role": "assistant", "content": "answer"}]
    assert conversation.closed == 1


def test_an_error_in_the_block_reaches_the_framework_and_the_block_is_taken_out():
    set_settings(load_settings({"OTEL_BREAKER_STATUS_IN_PROMPT": "true"}))
    default_registry().get("flaky").force_open()
    conversation = Conversation()
    original = list(conversation.messages)
    with pytest.raises(RuntimeError), status_while_open(conversation.prepared(), DICT_MESSAGES, None):
        raise RuntimeError("model call failed")
    assert conversation.messages == original and conversation.closed == 1


def test_off_the_messages_are_untouched():
    default_registry().get("flaky").force_open()
    conversation = Conversation()
    with status_while_open(conversation.prepared(), DICT_MESSAGES, None) as messages:
        assert messages == [{"role": "system", "content": "base"}, {"role": "user", "content": "go"}]
