"""An ordinary praisonaiagents program with a broken tool; it knows nothing about circuit breakers.

It runs one agent through the async loop (four tool calls in one conversation)
and another through the sync loop (three conversations, each ending in the
framework's ToolExecutionError while the tool is allowed to run), against the
local scripted model, and prints one JSON line: how often the tool body ran and
what the model read.
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

server = FakeOpenAI(calls=4).start()
os.environ.update(server.env())
os.environ.setdefault("PRAISONAI_TELEMETRY_DISABLED", "true")
logging.disable(logging.CRITICAL)

from praisonaiagents import Agent  # noqa: E402
from praisonaiagents.config.feature_configs import ToolConfig  # noqa: E402
from praisonaiagents.tools.retry import RetryPolicy  # noqa: E402

runs = {"async": 0, "sync": 0}
mode = "async"


def inventory(q: str) -> str:
    """Check the inventory service.

    Args:
        q: the item
    """
    runs[mode] += 1
    raise ConnectionError("inventory service unreachable")


def make_agent(name: str) -> Agent:
    return Agent(
        name=name,
        instructions="Check the inventory.",
        tools=[inventory],
        model="gpt-4o-mini",
        tool_config=ToolConfig(retry_policy=RetryPolicy(max_attempts=1)),
    )


async_output = asyncio.run(make_agent("async-clerk").achat("how many widgets?"))
async_seen = list(server.seen)

mode = "sync"
clerk = make_agent("sync-clerk")
sync_errors, sync_output = 0, None
for _ in range(3):
    server.reset(calls=2)
    try:
        sync_output = clerk.chat("how many widgets?")
    except Exception:
        sync_errors += 1
sync_seen = list(server.seen)
server.stop()

print(
    "RESULT "
    + json.dumps(
        {
            "runs": runs,
            "async_seen": async_seen,
            "async_output": str(async_output),
            "sync_errors": sync_errors,
            "sync_seen": sync_seen,
            "sync_output": None if sync_output is None else str(sync_output),
        }
    )
)
