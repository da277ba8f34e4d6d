"""An MCP server over stdio that may be dead, for the suites where one dead server among
two must not sink a run (PydanticAI, Google ADK, LangChain's MCP adapters).

``python mcp_dead_server.py STATE_DIR``: each start is noted in ``STATE_DIR/starts``;
while ``STATE_DIR/up`` does not exist the process exits at once (a server that cannot
start), else it serves one tool, ``lookup``, as the server ``backup`` (version 1.0.0 with
mcp 2, the SDK's own version with mcp 1).
The live server of those tests is ``mcp_search_server.py`` (its tool is ``search``).
"""

from __future__ import annotations

import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve()


def dead_command(state: Path) -> tuple[str, list[str]]:
    """``(command, args)`` that start this server with its state in ``state``."""
    return sys.executable, [str(SCRIPT), str(state)]


def starts(state: Path) -> int:
    """How many times the server was started."""
    path = state / "starts"
    return len(path.read_text()) if path.exists() else 0


def bring_up(state: Path) -> None:
    """From the next start on, the server answers."""
    (state / "up").write_text("up")


def main(state: Path) -> None:
    with (state / "starts").open("a") as noted:
        noted.write("x")
    if not (state / "up").exists():
        sys.exit(3)
    import logging

    logging.disable(logging.ERROR)
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError:  # mcp 1.x
        from mcp.server.fastmcp import FastMCP

        server = FastMCP("backup")
    else:
        server = MCPServer("backup", version="1.0.0")

    @server.tool()
    def lookup(query: str) -> str:
        """Look a query up in the backup catalogue."""
        return f"backup: 1 result for {query!r}"

    server.run("stdio")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
