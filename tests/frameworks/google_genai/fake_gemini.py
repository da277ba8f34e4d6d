"""A scripted stand-in for the Gemini REST API on 127.0.0.1, for offline google-genai runs.

google-genai has no fake model of its own; its client talks to any base URL
(``genai.Client(api_key=..., http_options=types.HttpOptions(base_url=...))``), so a
small local server drives its real automatic function calling offline.

Each script is served under its own model name (:meth:`FakeGemini.script`): every
``POST .../models/<model>:generateContent`` (or ``:streamGenerateContent``, one SSE
event) answers with the script's next step and records the request body, so each
test, agent or request reads back exactly what its model was sent. A step is a
function call ``(name, arguments)``, several of them in a list (one turn of
parallel calls), or the final text.
"""

from __future__ import annotations

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Call = tuple[str, dict[str, Any]]
#: One model turn: a function call, several calls in one turn, or the final text.
Step = Call | list[Call] | str

#: What the model says when its script has run out (a test then fails on the text, never hangs).
EXHAUSTED = "(script exhausted)"


def response_of(step: Step, model: str) -> dict[str, Any]:
    """The ``GenerateContentResponse`` JSON for one step."""
    if isinstance(step, str):
        parts: list[dict[str, Any]] = [{"text": step}]
    else:
        calls = step if isinstance(step, list) else [step]
        parts = [{"functionCall": {"name": name, "args": args}} for name, args in calls]
    candidate = {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
    usage = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}
    return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": model}


class FakeGemini:
    """Serve scripted ``generateContent`` answers on a free local port."""

    def __init__(self) -> None:
        self._scripts: dict[str, list[Step]] = {}
        self._requests: dict[str, list[dict[str, Any]]] = {}
        self._paths: dict[str, list[str]] = {}
        self._names = itertools.count(1)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeGemini:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def script(self, steps: list[Step]) -> str:
        """A new model name whose requests are answered with ``steps``, in turn."""
        with self._lock:
            model = f"scripted-{next(self._names)}"
            self._scripts[model] = list(steps)
            self._requests[model] = []
            self._paths[model] = []
        return model

    def requests(self, model: str) -> list[dict[str, Any]]:
        """The request bodies ``model`` received so far, in order."""
        with self._lock:
            return list(self._requests.get(model, ()))

    def paths(self, model: str) -> list[str]:
        """The URL path of each request ``model`` received (the API version and resource name)."""
        with self._lock:
            return list(self._paths.get(model, ()))

    def _answer(self, model: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._requests.setdefault(model, []).append(body)
            self._paths.setdefault(model, []).append(path)
            script = self._scripts.get(model) or []
            step = script.pop(0) if script else EXHAUSTED
        return response_of(step, model)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, data: bytes, content_type: str, code: int = 200) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                path = self.path.split("?", 1)[0]
                resource, _, method = path.rpartition(":")
                model = resource.rsplit("/", 1)[-1]
                if method not in ("generateContent", "streamGenerateContent"):
                    error = {"error": {"code": 404, "message": f"unsupported path {self.path}", "status": "NOT_FOUND"}}
                    self._send(json.dumps(error).encode(), "application/json", 404)
                    return
                answer = server._answer(model, path, body)
                if method == "generateContent":
                    self._send(json.dumps(answer).encode(), "application/json")
                else:
                    self._send(f"data: {json.dumps(answer)}\n\n".encode(), "text/event-stream")

        return Handler


def instructions_of(body: dict[str, Any]) -> str | None:
    """The text of a request's system instruction (its text parts, blank-line separated)."""
    instruction = body.get("systemInstruction")
    if not instruction:
        return None
    texts = [part["text"] for part in instruction.get("parts", []) if "text" in part]
    return "\n\n".join(texts)


def function_responses(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every function response in a request's conversation, in order: ``{"name", "response"}``."""
    return [
        part["functionResponse"]
        for content in body.get("contents", [])
        for part in content.get("parts", [])
        if "functionResponse" in part
    ]


def tool_results(body: dict[str, Any]) -> list[str]:
    """What the model read of each function response so far, as the JSON it was sent."""
    return [json.dumps(response.get("response"), ensure_ascii=False) for response in function_responses(body)]


def declarations(body: dict[str, Any]) -> dict[str, Any]:
    """The function declarations a request offered: name -> declaration as sent."""
    return {
        declaration["name"]: declaration
        for tool in body.get("tools", [])
        for declaration in tool.get("functionDeclarations", [])
    }
