"""A small MCP server with one ``search`` tool, over stdio or in memory.

``python mcp_search_server.py NAME [broken]`` serves it on stdio; a broken
server's ``search`` fails on every call (the tool raises: an ``isError`` result).
"""

from __future__ import annotations

import sys

from mcp.server.fastmcp import FastMCP


def search_server(name: str, *, broken: bool = False) -> FastMCP:
    server = FastMCP(name)

    @server.tool()
    def search(query: str) -> str:
        """Searches the web."""
        if broken:
            raise RuntimeError(f"{name} search backend is down")
        return f"{name}: 3 results for {query!r}"

    return server


if __name__ == "__main__":
    search_server(sys.argv[1], broken="broken" in sys.argv[2:]).run("stdio")
