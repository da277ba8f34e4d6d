"""Chat Completions shapes as several frameworks hand them around, for the status block and the menu.

CrewAI, PraisonAI and smolagents (among others) build OpenAI-style requests: plain
dict messages (``{"role": "system", "content": ...}``), content that may be a list
of parts (``[{"type": "text", "text": ...}]``), tool schemas
(``{"type": "function", "function": {"name": ...}}``) and request parameters
holding ``messages`` and ``tools``. What an adapter does with them is the same
everywhere: put the tool-status block into the system message and leave the open
tools off the menu, on a copy, so the framework's own conversation is never edited.
Where a system message is a list of parts, the block goes into the last text part
(:func:`content_text`), or into a part of its own (:func:`part_text`) where the
other parts must stay exactly as written (a provider's cache marks on them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from otel_breaker.degrade import STATUS_HEADER
from otel_breaker.instrumentation.spec import MessageDialect, insert_status_block
from otel_breaker.loglines import logger
from otel_breaker.menu import visible_tools


def _is_system_dict(message: Any) -> bool:
    return isinstance(message, dict) and message.get("role") == "system"


def _dict_text(message: dict) -> str | None:
    content = message.get("content")
    return content if isinstance(content, str) else None


def _dict_with_text(message: dict, text: str) -> dict:
    return {**message, "content": text}


def _system_dict(text: str) -> dict:
    return {"role": "system", "content": text}


#: Plain dict messages.
DICT_MESSAGES = MessageDialect(
    is_system=_is_system_dict, text=_dict_text, with_text=_dict_with_text, system=_system_dict
)


def schema_name(tool: Any) -> str | None:
    """The name of one Chat Completions tool schema."""
    return (tool.get("function") or {}).get("name") if isinstance(tool, dict) else None


def tool_name(definition: Any) -> str | None:
    """The name of a tool a model call carries, in a provider's form: a Chat Completions
    schema (``{"function": {"name"}}``), a flat dict (``{"name"}``) or a tool object."""
    if isinstance(definition, dict):
        function = definition.get("function")
        name = (function if isinstance(function, dict) else definition).get("name")
    else:
        name = getattr(definition, "name", None)
    return name if isinstance(name, str) else None


def text_part(content: Any) -> int | None:
    """The index of the last text part of a list content (where a system prompt's text is)."""
    for i in range(len(content) - 1, -1, -1):
        part = content[i]
        if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
            return i
    return None


def content_text(content: Any) -> str | None:
    """The text of a message content: a string, or the last text part of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        index = text_part(content)
        return content[index]["text"] if index is not None else None
    return None


def with_content_text(content: Any, text: str) -> Any:
    """``content`` with its text replaced (a list is copied part by part)."""
    if not isinstance(content, list):
        return text
    index = text_part(content)
    parts = [dict(part) if isinstance(part, dict) else part for part in content]
    if index is not None:
        parts[index]["text"] = text
    return parts


def part_text(content: Any) -> str | None:
    """For a dialect keeping the status block in a content part of its own (so the other
    parts, and a provider's cache marks on them, stay as written): a string content is
    the text; of a list of parts, the status part's text is ("" while there is none)."""
    if isinstance(content, list):
        return next((str(part["text"]) for part in content if _status_part(part)), "")
    return content if isinstance(content, str) else None


def with_part_text(content: Any, text: str) -> Any:
    """``content`` with new text (see :func:`part_text`): a list of parts loses its status
    part and gets ``text`` as a new last one (none when ``text`` is empty)."""
    if not isinstance(content, list):
        return text
    return [p for p in content if not _status_part(p)] + ([{"type": "text", "text": text}] if text else [])


def _status_part(part: Any) -> bool:
    return isinstance(part, dict) and str(part.get("text", "")).startswith(STATUS_HEADER)


def amended_request(params: Any, agent: Any) -> Any:
    """Request ``params`` with the status block in its ``messages`` and without the
    agent's open ``tools`` (a new dict), or ``params`` itself when neither applies.
    With every tool hidden the request goes out as one without tools."""
    if not isinstance(params, dict):
        return params
    amended = params
    if isinstance(params.get("messages"), list):
        messages = insert_status_block(params["messages"], DICT_MESSAGES, agent)
        if messages is not None:
            amended = {**amended, "messages": messages}
    tools = params.get("tools")
    if isinstance(tools, list):
        visible = visible_tools(tools, schema_name, agent=agent)
        if visible is not tools:
            if visible:
                amended = {**amended, "tools": list(visible)}
            else:
                amended = {k: v for k, v in amended.items() if k not in ("tools", "tool_choice")}
    return amended


@contextlib.contextmanager
def status_during(messages: Any, dialect: MessageDialect, agent: Any) -> Iterator[None]:
    """For a framework that hands its own message list to the model call: the status
    block is in ``messages`` (in place) while the block runs, and taken out again after,
    so it never accumulates in the conversation. Never raises of its own."""
    undo = _add(messages, dialect, agent)
    try:
        yield
    finally:
        undo()


def _nothing() -> None:
    return None


def _add(messages: Any, dialect: MessageDialect, agent: Any) -> Callable[[], None]:
    try:
        if not isinstance(messages, list):
            return _nothing
        amended = insert_status_block(messages, dialect, agent)
        if amended is None:
            return _nothing
        if len(amended) > len(messages):  # a system message holding only the block, first
            original, added = None, amended[0]
            messages.insert(0, added)
        else:
            index = next(i for i, (old, new) in enumerate(zip(messages, amended, strict=True)) if old is not new)
            original, added = messages[index], amended[index]
            messages[index] = added
    except Exception:
        logger.debug("otel-breaker: tool status not added to the prompt", exc_info=True)
        return _nothing

    def undo() -> None:
        try:
            for i, message in enumerate(messages):
                if message is added:
                    if original is None:
                        del messages[i]
                    else:
                        messages[i] = original
                    return
        except Exception:
            logger.debug("otel-breaker: could not take the tool status out again", exc_info=True)

    return undo
