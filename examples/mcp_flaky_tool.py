"""An MCP server's flaky tool trips the client-side circuit breaker, the model is told why, and it recovers.

Offline: an in-process MCP server and the SDK's ``Client``, driven by a scripted model loop.
Run:  pip install -e ".[mcp]"   (the MCP Python SDK)
      (in a clone of this repository; once released: pip install "otel-breaker[mcp]")
      python examples/mcp_flaky_tool.py
"""

from __future__ import annotations

import asyncio
import logging
import time

from mcp.client.client import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import TextContent

from otel_breaker import CircuitBreakerConfig, get_circuit_breaker
from otel_breaker.breaker import add_global_listener
from otel_breaker.instrumentation import BreakerInstrumentor

logging.disable(logging.ERROR)  # the server logs a traceback per failing tool

server = MCPServer("catalogue")
BACKEND_UP = False
BODY_RUNS = 0


@server.tool()
def search(query: str) -> str:
    """Searches the product catalogue."""
    global BODY_RUNS
    BODY_RUNS += 1
    if not BACKEND_UP:
        raise ConnectionError("catalogue backend unreachable")
    return f"3 results for {query!r}"


async def run_agent(client: Client, n_calls: int) -> None:
    """A minimal agent loop: the 'model' asks for the tool n times and reads each result."""
    for _ in range(n_calls):
        result = await client.call_tool("search", {"query": "lamps"})
        text = " ".join(c.text for c in result.content if isinstance(c, TextContent))
        print(f"  model reads [{'error' if result.is_error else 'ok'}] {text[:110]}")


async def main() -> None:
    BreakerInstrumentor().instrument(frameworks=["mcp"])
    # Open after 2 failures; allow a probe after a short cooldown; close after one good probe.
    get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=2, recovery_timeout=0.5, success_threshold=1))
    add_global_listener(
        lambda change: print(f"  breaker {change.breaker.name}: {change.from_state.value} -> {change.to_state.value}")
    )
    global BACKEND_UP
    async with Client(server) as client:
        await client.list_tools()
        print("1) backend down: 4 tool calls")
        await run_agent(client, 4)
        print(f"   server tool ran {BODY_RUNS} times (2 failures, then the breaker answered instead)")

        print("2) backend back; cooldown passes; 2 tool calls")
        BACKEND_UP = True
        time.sleep(0.6)
        await run_agent(client, 2)
        print(f"   server tool ran {BODY_RUNS} times in total")


if __name__ == "__main__":
    asyncio.run(main())
