"""A FastMCP server tool fails, its breaker opens, the client gets FastMCP's ``ToolError`` with the reason,
and the breaker recovers.

Offline: the client talks to the FastMCP server in memory (``Client(server)``).
Run:  pip install -e ".[fastmcp]"   (fastmcp)
      (in a clone of this repository; once released: pip install "otel-breaker[fastmcp]")
      python examples/fastmcp_flaky_tool.py
"""

from __future__ import annotations

import asyncio
import logging
import time

from fastmcp import Client, FastMCP
from fastmcp.exceptions import ToolError

from otel_breaker.config import load_settings, set_settings
from otel_breaker.instrumentation import BreakerInstrumentor
from otel_breaker.registry import default_registry

BACKEND_UP = False
BODY_RUNS = 0
server = FastMCP("weather-server")


@server.tool
def weather(city: str) -> str:
    """Current weather for a city."""
    global BODY_RUNS
    BODY_RUNS += 1
    if not BACKEND_UP:
        raise ConnectionError("weather service unreachable")
    return f"sunny in {city}"


async def ask(client: Client, times: int) -> None:
    for _ in range(times):
        try:
            print(f"    client got: {(await client.call_tool('weather', {'city': 'Paris'})).data}")
        except ToolError as error:
            print(f"    client got ToolError: {str(error)[:100]}")


async def main() -> None:
    logging.disable(logging.ERROR)  # the server logs every failing tool
    # Open after 2 consecutive failures; try one probe call 1 second later.
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2", "OTEL_BREAKER_RECOVERY_TIMEOUT": "1"}))
    BreakerInstrumentor().instrument(frameworks=["mcp", "fastmcp"])
    global BACKEND_UP

    async with Client(server) as client:
        print("1) the weather service is down; the tool is called 4 times:")
        await ask(client, 4)
        print(f"   tool body ran {BODY_RUNS} times for 4 calls")

        print("2) the service comes back; after the 1 s cooldown a probe call closes the breaker:")
        BACKEND_UP = True
        time.sleep(1.1)
        await ask(client, 2)
    (breaker,) = default_registry().find("weather")
    print(f"   tool body ran {BODY_RUNS} times in total; breaker is {breaker.state.value}")


if __name__ == "__main__":
    asyncio.run(main())
