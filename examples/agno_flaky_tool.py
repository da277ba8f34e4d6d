"""An Agno agent's flaky tool trips its circuit breaker, the model is told why, and the breaker recovers.

Offline: Agno has no fake model, so its ``OpenAIChat`` talks to a tiny scripted
OpenAI-compatible server on 127.0.0.1 started here.
Run:  pip install -e ".[agno]" openai   (agno)
      (in a clone of this repository; once released: pip install "otel-breaker[agno]")
      python examples/agno_flaky_tool.py
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

os.environ.setdefault("AGNO_TELEMETRY", "false")

from agno.agent import Agent
from agno.models.openai import OpenAIChat

from otel_breaker.config import load_settings, set_settings
from otel_breaker.instrumentation import BreakerInstrumentor
from otel_breaker.registry import default_registry

BACKEND_UP = False
BODY_RUNS = 0
CALLS = [4]  # how many times the scripted model asks for the tool in a run


def weather(city: str) -> str:
    """Current weather for a city."""
    global BODY_RUNS
    BODY_RUNS += 1
    if not BACKEND_UP:
        raise ConnectionError("weather service unreachable")
    return f"sunny in {city}"


class ScriptedModel(BaseHTTPRequestHandler):
    """``POST /v1/chat/completions``: asks for the weather until CALLS results are in, then answers."""

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if results:
            print(f"    model read: {str(results[-1])[:110]}")
        if len(results) < CALLS[0]:
            call = {"id": f"c{len(results)}", "type": "function"}
            call["function"] = {"name": "weather", "arguments": json.dumps({"city": "Paris"})}
            message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": "ok"}, "stop"
        choice = {"index": 0, "message": message, "finish_reason": finish}
        reply = {"id": "x", "object": "chat.completion", "created": 0, "model": "scripted", "choices": [choice]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main() -> None:
    logging.disable(logging.ERROR)  # Agno logs every failed tool call with its traceback
    server = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedModel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    # Open after 2 consecutive failures; try one probe call 1 second later.
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2", "OTEL_BREAKER_RECOVERY_TIMEOUT": "1"}))
    BreakerInstrumentor().instrument(frameworks=["agno"])
    global BACKEND_UP

    model = OpenAIChat(id="scripted", base_url=base_url, api_key="sk-local")
    agent = Agent(name="planner", model=model, tools=[weather])
    print("1) the weather service is down; the model calls the tool 4 times:")
    agent.run("What's the weather in Paris?")
    print(f"   tool body ran {BODY_RUNS} times for 4 calls")

    print("2) the service comes back; after the 1 s cooldown a probe call closes the breaker:")
    BACKEND_UP = True
    time.sleep(1.1)
    CALLS[0] = 2
    agent.run("And now?")
    (breaker,) = default_registry().find("weather")
    print(f"   tool body ran {BODY_RUNS} times in total; breaker is {breaker.state.value}")
    server.shutdown()


if __name__ == "__main__":
    main()
