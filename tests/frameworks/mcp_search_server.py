"""A tiny MCP server over stdio with one tool, ``search``, for the framework suites
that load MCP tools (PydanticAI MCP toolsets, OpenAI Agents MCP servers).

``python mcp_search_server.py NAME up|down``: the server calls itself ``NAME``
(its identity in ``initialize``); ``down`` makes its ``search`` fail, as a tool
whose backend is unreachable does. Two of them, one up and one down, are two
servers whose same-named tools must never share a breaker.

:func:`stdio_command` gives the command line the suites start it with.
"""

from __future__ import annotations

import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve()


def stdio_command(name: str, mode: str) -> tuple[str, list[str]]:
    """``(command, args)`` that start this server as ``name`` in ``mode`` (``up`` or ``down``)."""
    return sys.executable, [str(SCRIPT), name, mode]


def main(name: str, mode: str) -> None:
    import logging

    from mcp.server.mcpserver import MCPServer

    logging.disable(logging.ERROR)  # a failing tool would log a traceback per call on stderr
    server = MCPServer(name, version="1.0.0")

    @server.tool()
    def search(query: str) -> str:
        """Search the catalogue."""
        if mode == "down":
            raise ConnectionError("search backend unreachable")
        return f"{name}: 3 results for {query!r}"

    server.run("stdio")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
