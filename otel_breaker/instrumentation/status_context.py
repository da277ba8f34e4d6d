"""The status block for a model call whose messages a framework prepares in a context manager.

Some frameworks build a model call's messages in a context manager that yields the
list the call then sends (and keeps as the conversation). A prompt patch on that
function's result (``prompt_patch(..., after=True)``) hands its hook the context
manager; the hook returns :func:`status_while_open` of it: the same, with the status
block in the yielded list while the framework's block runs and taken out after
(:func:`~otel_breaker.instrumentation.chat_messages.status_during`), so it never
accumulates in the conversation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from otel_breaker.instrumentation.chat_messages import status_during
from otel_breaker.instrumentation.spec import MessageDialect


@contextlib.contextmanager
def status_while_open(manager: Any, dialect: MessageDialect, agent: Any) -> Iterator[Any]:
    """``manager`` (yielding a message list in ``dialect``) with ``agent``'s status block in the list."""
    with manager as messages, status_during(messages, dialect, agent):
        yield messages
