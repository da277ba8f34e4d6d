"""A tiny OpenAI-compatible chat completions server on 127.0.0.1 for offline praisonaiagents runs.

praisonaiagents has no fake model of its own; it talks to any OpenAI-compatible
endpoint, so a local server is the way to drive its real agent loop offline.

The scripted model is stateless: it counts the ``role: "tool"`` messages in the
conversation and asks for the first offered tool again until ``calls`` results
are in, then answers ``done: <every tool result it saw, joined by " | ">``.
Streaming (SSE) and plain responses are both served. Every tool result the
model received is recorded in ``seen`` (in order), so tests can check what the
model read.

A ``responder`` (``body -> (assistant message, finish reason)``) replaces that
model with a scripted one.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[[dict[str, Any]], tuple[dict[str, Any], str]]


class FakeOpenAI:
    """Serve ``POST /v1/chat/completions`` on a free local port."""

    def __init__(self, calls: int = 3) -> None:
        self.calls = calls
        self.requests: list[dict[str, Any]] = []
        self.seen: list[str] = []
        self.responder: Responder | None = None
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def env(self) -> dict[str, str]:
        """The variables that point praisonaiagents (and the openai client) here."""
        return {"OPENAI_BASE_URL": self.base_url, "OPENAI_API_BASE": self.base_url, "OPENAI_API_KEY": "sk-local"}

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reset(self, calls: int | None = None) -> None:
        with self._lock:
            self.requests.clear()
            self.seen.clear()
            if calls is not None:
                self.calls = calls

    def reply(self, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """(assistant message, finish reason) for one request."""
        tool_results = [str(m.get("content")) for m in body.get("messages", []) if m.get("role") == "tool"]
        with self._lock:
            self.requests.append(body)
            if tool_results:
                self.seen.append(tool_results[-1])
        if self.responder is not None:
            return self.responder(body)
        tools = body.get("tools") or []
        if tools and len(tool_results) < self.calls:
            step = len(tool_results) + 1
            name = tools[0]["function"]["name"]
            call = {
                "id": f"call_{step}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps({"q": f"x{step}"})},
            }
            return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        return {"role": "assistant", "content": "done: " + " | ".join(tool_results)}, "stop"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, payload: dict[str, Any], code: int = 200) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _sse(self, payload: dict[str, Any]) -> None:
                self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
                self.wfile.flush()

            def do_GET(self) -> None:
                self._json({"object": "list", "data": [{"id": "gpt-4o-mini", "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if not self.path.rstrip("/").endswith("chat/completions"):
                    self._json({"error": {"message": f"unsupported path {self.path}"}}, 404)
                    return
                message, finish = server.reply(body)
                base = {"id": "chatcmpl-local", "created": int(time.time()), "model": body.get("model", "gpt-4o-mini")}
                usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
                if not body.get("stream"):
                    choice = {"index": 0, "message": message, "finish_reason": finish}
                    self._json({**base, "object": "chat.completion", "usage": usage, "choices": [choice]})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
                if finish == "tool_calls":
                    call = message["tool_calls"][0]
                    function = call["function"]
                    deltas.append(
                        {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": call["id"],
                                    "type": "function",
                                    "function": {"name": function["name"], "arguments": ""},
                                }
                            ]
                        }
                    )
                    deltas.append({"tool_calls": [{"index": 0, "function": {"arguments": function["arguments"]}}]})
                else:
                    deltas.append({"content": message["content"]})
                for delta in deltas:
                    chunk = {"index": 0, "delta": delta, "finish_reason": None}
                    self._sse({**base, "object": "chat.completion.chunk", "choices": [chunk]})
                last = {"index": 0, "delta": {}, "finish_reason": finish}
                self._sse({**base, "object": "chat.completion.chunk", "choices": [last]})
                if (body.get("stream_options") or {}).get("include_usage"):
                    self._sse({**base, "object": "chat.completion.chunk", "choices": [], "usage": usage})
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        return Handler
