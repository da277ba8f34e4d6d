"""A local stand-in for the Anthropic Messages API, for the bundled Claude Code CLI.

The CLI is pointed at it with ``ANTHROPIC_BASE_URL`` and answers come from a script:
each step is a tool call ``(tool name, input)`` or the final answer text. Which step a
request gets is read off the request itself (how many answers its messages already
hold), so a retried or repeated request gets the same answer, and every new
conversation (a new client per request) starts at the first step again.

Only the agent loop's requests (those offering the scripted tools) follow the script
and are recorded; anything else the CLI asks on the side (a title, a summary) gets a
short text. Answers are streamed as server-sent events when the request asks for
``stream: true``, as the real API does.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: A scripted model step: a tool call ``(tool name, input)`` or the final answer text.
Step = tuple[str, dict[str, Any]] | str


@dataclass
class Request:
    """One agent-loop request: the tools offered and the text of every tool result so far."""

    tools: dict[str, Any]
    tool_results: list[str]
    errors: list[bool]
    system: str = ""


@dataclass
class Script:
    """The steps the model answers with, and what it was sent (read by the tests)."""

    steps: list[Step] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def _record(body: dict[str, Any]) -> Request:
    results, errors = [], []
    for message in body.get("messages", []):
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                results.append(_text_of(block.get("content")))
                errors.append(bool(block.get("is_error")))
    tools = {tool.get("name"): tool for tool in body.get("tools") or () if isinstance(tool, dict)}
    return Request(tools, results, errors, _text_of(body.get("system")))


def _answer_blocks(step: Step, turn: int) -> tuple[list[dict[str, Any]], str]:
    if isinstance(step, str):
        return [{"type": "text", "text": step}], "end_turn"
    name, arguments = step
    call_id = f"toolu_{turn:04d}_{uuid.uuid4().hex[:12]}"
    return [{"type": "tool_use", "id": call_id, "name": name, "input": arguments}], "tool_use"


def _message(blocks: list[dict[str, Any]], stop_reason: str, model: str) -> dict[str, Any]:
    return {
        "id": f"msg_{uuid.uuid4().hex}",  # the CLI merges the blocks of answers sharing an id
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def _events(blocks: list[dict[str, Any]], stop_reason: str, model: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The server-sent events of one streamed answer."""
    yield "message_start", {"type": "message_start", "message": {**_message([], None, model), "stop_reason": None}}
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            yield (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
            )
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {**block, "input": {}}
            yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": start}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": 5},
        },
    )
    yield "message_stop", {"type": "message_stop"}


class FakeMessagesAPI:
    """A threaded HTTP server on 127.0.0.1 answering ``POST /v1/messages`` from a :class:`Script`."""

    def __init__(self) -> None:
        self.script = Script()
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.split("?", 1)[0].endswith("/v1/messages"):
                    self._json({"input_tokens": 10} if "count_tokens" in self.path else {})
                    return
                blocks, stop_reason = api.answer(body)
                model = str(body.get("model") or "claude-local")
                if body.get("stream"):
                    self._stream(blocks, stop_reason, model)
                else:
                    self._json(_message(blocks, stop_reason, model))

            def do_GET(self) -> None:
                self._json({"data": [], "has_more": False})

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.end_headers()

            def _json(self, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, blocks: list[dict[str, Any]], stop_reason: str, model: str) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                for event, data in _events(blocks, stop_reason, model):
                    self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
                self.close_connection = True

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeMessagesAPI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def play(self, steps: list[Step]) -> Script:
        """Answer the next conversations with ``steps``; returns the script that records them."""
        with self._lock:
            self.script = Script(list(steps))
            return self.script

    def answer(self, body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
        """The scripted answer to an agent-loop request; a short text for any other."""
        tools = body.get("tools") or ()
        if not any(str(tool.get("name", "")).startswith("mcp__") for tool in tools if isinstance(tool, dict)):
            return [{"type": "text", "text": "ok"}], "end_turn"
        with self._lock:
            script = self.script
            script.requests.append(_record(body))
        turn = sum(
            1
            for message in body.get("messages", [])
            if message.get("role") == "assistant" and isinstance(message.get("content"), list)
            for block in message["content"]
            if isinstance(block, dict) and block.get("type") in ("tool_use", "text")
        )
        step = script.steps[min(turn, len(script.steps) - 1)] if script.steps else "done"
        return _answer_blocks(step, turn)
