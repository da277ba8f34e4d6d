"""An ordinary offline MCP client loop whose server tool always fails (no otel-breaker import).

A scripted model asks for the tool five times through the SDK's ``Client``;
prints JSON: how often the server tool ran and what the model read back.
"""

import asyncio
import json
import logging

from mcp.client.client import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import TextContent

logging.disable(logging.ERROR)
server = MCPServer("weather-server")
BODY_RUNS = 0


@server.tool()
def weather(city: str) -> str:
    """Looks up the weather."""
    global BODY_RUNS
    BODY_RUNS += 1
    raise RuntimeError("weather service down")


async def main() -> None:
    seen = []
    async with Client(server) as client:
        await client.list_tools()
        for _ in range(5):
            result = await client.call_tool("weather", {"city": "Oslo"})
            seen.append("\n".join(c.text for c in result.content if isinstance(c, TextContent)))
    print(json.dumps({"body_runs": BODY_RUNS, "tool_results": seen, "final": "done"}))


if __name__ == "__main__":
    asyncio.run(main())
