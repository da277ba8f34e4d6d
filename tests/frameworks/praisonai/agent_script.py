"""An ordinary praisonaiagents program with a broken tool; it knows nothing about circuit breakers.

A local scripted model (praisonaiagents has no fake model of its own) asks an
agent's async loop to call a tool whose backend is down five times, then
answers "done". It prints one JSON line: how often the tool body ran, the tool
results the model read and the final answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from fake_openai_server import FakeOpenAI

BODY_RUNS = [0]
SEEN: list[str] = []


def model(body):
    SEEN[:] = [str(m.get("content")) for m in body["messages"] if m.get("role") == "tool"]
    if len(SEEN) >= 5:
        return {"role": "assistant", "content": "done"}, "stop"
    arguments = json.dumps({"x": len(SEEN)})
    call = {"id": f"call_{len(SEEN)}", "type": "function", "function": {"name": "inventory", "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"


server = FakeOpenAI().start()
server.responder = model
os.environ.update(server.env())
os.environ.setdefault("PRAISONAI_TELEMETRY_DISABLED", "true")
logging.disable(logging.CRITICAL)

from praisonaiagents import Agent  # noqa: E402
from praisonaiagents.config.feature_configs import ToolConfig  # noqa: E402
from praisonaiagents.tools.retry import RetryPolicy  # noqa: E402


def inventory(x: int) -> str:
    """Check the stock of product x.

    Args:
        x: the product
    """
    BODY_RUNS[0] += 1
    raise ConnectionError("inventory service unreachable")


agent = Agent(
    name="clerk",
    instructions="Check the inventory.",
    tools=[inventory],
    model="gpt-4o-mini",
    tool_config=ToolConfig(retry_policy=RetryPolicy(max_attempts=1)),
)
final = asyncio.run(agent.achat("how many widgets?", stream=False))
server.stop()
print(json.dumps({"body_runs": BODY_RUNS[0], "tool_results": SEEN, "final": str(final)}))
