"""Any MCP client behind ``otel-breaker mcp-proxy``: a flaky server tool stops being called.

The client here is the MCP SDK's own, but it could be Claude Desktop, Cursor or VS Code: it starts
``otel-breaker mcp-proxy -- python catalogue_server.py`` where it would have started the server.
Offline: the server is a small stdio MCP server written to a temporary directory.
Run:  pip install -e ".[mcp]"
      (in a clone of this repository; once released: pip install "otel-breaker[mcp]")
      python examples/mcp_proxy_flaky_tool.py
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters

SERVER = '''
import logging, sys
from mcp.server.mcpserver import MCPServer

logging.disable(logging.ERROR)
server = MCPServer("catalogue", version="1.0.0")
runs = sys.argv[1]


@server.tool()
def search(query: str) -> str:
    """Search the catalogue (its backend is down)."""
    with open(runs, "a") as out:
        out.write("run\\n")
    raise ConnectionError("catalogue backend unreachable")


@server.tool()
def price(item: str) -> str:
    """The price of an item."""
    return f"{item}: 4.20 EUR"


server.run("stdio")
'''


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        script, runs = Path(tmp) / "catalogue_server.py", Path(tmp) / "runs.txt"
        script.write_text(SERVER)
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env.update(OTEL_BREAKER_FAILURE_THRESHOLD="3", OTEL_SDK_DISABLED="true")
        proxy = StdioServerParameters(
            command=sys.executable,
            args=["-m", "otel_breaker", "mcp-proxy", "--", sys.executable, str(script), str(runs)],
            env=env,
        )
        async with Client(proxy) as client:
            print("server:", client.session.server_info.name, client.session.server_info.version)
            for turn in range(6):
                result = await client.call_tool("search", {"query": "tea"})
                print(f"search #{turn + 1}:", result.content[0].text[:110])
            print("price:", (await client.call_tool("price", {"item": "tea"})).content[0].text)
        ran = len(runs.read_text().splitlines())
        print(f"the failing tool ran {ran} times over 6 calls; the other tool was never affected")
        assert ran == 3


if __name__ == "__main__":
    asyncio.run(main())
