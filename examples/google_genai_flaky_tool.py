"""A dead function in google-genai's automatic function calling trips its circuit breaker,
and every later request, each with a new client, reads why instead of running it.

Offline: the client talks to any base URL, so a tiny scripted stand-in for the Gemini API
runs on 127.0.0.1 and asks for the function three times per request.
Run:  pip install -e ".[google-genai]"   (google-genai)
      (in a clone of this repository; once released: pip install "otel-breaker[google-genai]")
      python examples/google_genai_flaky_tool.py
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from otel_breaker.config import load_settings, set_settings
from otel_breaker.instrumentation import BreakerInstrumentor
from otel_breaker.registry import default_registry

BODY_RUNS = 0
CALLS_PER_REQUEST = 3


class ScriptedGemini(BaseHTTPRequestHandler):
    """``generateContent``: call the first function until CALLS_PER_REQUEST answers are in, then reply."""

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        answers = [
            part["functionResponse"]["response"]
            for content in body["contents"]
            for part in content["parts"]
            if "functionResponse" in part
        ]
        if answers:
            print(f"    model read: {json.dumps(answers[-1])[:150]}")
        if len(answers) < CALLS_PER_REQUEST:
            name = body["tools"][0]["functionDeclarations"][0]["name"]
            part = {"functionCall": {"name": name, "args": {"city": "Oslo"}}}
        else:
            part = {"text": "The forecast is unavailable right now."}
        candidate = {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
        data = json.dumps({"candidates": [candidate]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def forecast(city: str) -> str:
    """The weather forecast for a city."""
    global BODY_RUNS
    BODY_RUNS += 1
    raise ConnectionError("forecast service unreachable")


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedGemini)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base_url = f"http://127.0.0.1:{server.server_address[1]}"

    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2"}))  # open after 2 failed calls
    BreakerInstrumentor().instrument(frameworks=["google_genai"])
    from google import genai
    from google.genai import types

    config = types.GenerateContentConfig(system_instruction="You forecast the weather.", tools=[forecast])
    for request in (1, 2):
        print(f"{request}) a request with a new client; the model calls the function {CALLS_PER_REQUEST} times:")
        client = genai.Client(api_key="local", http_options=types.HttpOptions(base_url=base_url))
        response = client.models.generate_content(model="gemini-local", contents="Weather in Oslo?", config=config)
        print(f"   answer: {response.text!r}; the function body ran {BODY_RUNS} times so far")
    (breaker,) = default_registry().find("forecast")
    print(f"   breaker is {breaker.state.value}: {BODY_RUNS} runs for {2 * CALLS_PER_REQUEST} calls")
    server.shutdown()


if __name__ == "__main__":
    main()
