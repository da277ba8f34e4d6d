"""A PraisonAI agent's flaky tool trips its circuit breaker, the model is told why, and the breaker recovers.

Offline: praisonaiagents talks to any OpenAI-compatible endpoint, so a tiny scripted
one runs on 127.0.0.1 and asks for the tool a set number of times.
Run:  pip install -e ".[praisonai]"   (praisonaiagents)
      (in a clone of this repository; once released: pip install "otel-breaker[praisonai]")
      python examples/praisonai_flaky_tool.py
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from otel_breaker.breaker import add_global_listener
from otel_breaker.config import load_settings, set_settings
from otel_breaker.instrumentation import BreakerInstrumentor
from otel_breaker.registry import default_registry

BACKEND_UP = False
BODY_RUNS = 0
CALLS_PER_RUN = 4


class ScriptedModel(BaseHTTPRequestHandler):
    """Chat completions: ask for the first tool until CALLS_PER_RUN results are in, then answer."""

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        results = [m["content"] for m in body["messages"] if m.get("role") == "tool"]
        if results:
            print(f"    model read: {results[-1][:150]}")
        if len(results) < CALLS_PER_RUN:
            name = body["tools"][0]["function"]["name"]
            call = {"id": f"call_{len(results) + 1}", "type": "function", "function": {"name": name, "arguments": "{}"}}
            message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": "Here is what I found."}, "stop"
        choice = {"index": 0, "message": message, "finish_reason": finish}
        data = json.dumps(
            {"id": "local", "object": "chat.completion", "created": 0, "model": body["model"], "choices": [choice]}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def stock_level() -> str:
    """Current stock level of the warehouse."""
    global BODY_RUNS
    BODY_RUNS += 1
    if not BACKEND_UP:
        raise ConnectionError("warehouse service unreachable")
    return "42 units"


def main() -> None:
    global BACKEND_UP, CALLS_PER_RUN
    server = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedModel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    logging.disable(logging.CRITICAL)  # praisonaiagents logs every tool failure with a traceback

    # Open after 2 failed calls; let one probe through 1 second later; one good probe closes it.
    set_settings(
        load_settings(
            {
                "OTEL_BREAKER_FAILURE_THRESHOLD": "2",
                "OTEL_BREAKER_RECOVERY_TIMEOUT": "1",
                "OTEL_BREAKER_SUCCESS_THRESHOLD": "1",
            }
        )
    )
    BreakerInstrumentor().instrument(frameworks=["praisonai"])
    add_global_listener(
        lambda change: print(
            f"  breaker {change.breaker.name!r} of agent {change.breaker.agent_name!r}: "
            f"{change.from_state.value} -> {change.to_state.value} ({change.reason})"
        )
    )

    os.environ.update({"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "sk-local", "PRAISONAI_TELEMETRY_DISABLED": "1"})
    from praisonaiagents import Agent
    from praisonaiagents.config.feature_configs import ToolConfig
    from praisonaiagents.tools.retry import RetryPolicy

    agent = Agent(
        name="stock-clerk",
        instructions="Report the stock level.",
        tools=[stock_level],
        model="gpt-4o-mini",
        # praisonaiagents retries a failing tool itself; one attempt keeps the demo quick.
        tool_config=ToolConfig(retry_policy=RetryPolicy(max_attempts=1)),
    )

    print("1) the warehouse service is down; the model calls the tool 4 times (async loop):")
    asyncio.run(agent.achat("How much stock is left?"))
    print(f"   tool body ran {BODY_RUNS} times for 4 calls")

    print("2) the service comes back; after the 1 s cooldown a probe call closes the breaker:")
    BACKEND_UP = True
    CALLS_PER_RUN = 2
    time.sleep(1.1)
    answer = agent.chat("And now?")
    (breaker,) = default_registry().find("stock_level")
    print(f"   answer: {answer!r}; tool body ran {BODY_RUNS} times in total; breaker is {breaker.state.value}")
    server.shutdown()


if __name__ == "__main__":
    main()
