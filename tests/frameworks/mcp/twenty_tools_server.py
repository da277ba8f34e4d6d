"""An MCP server with 20 tools over stdio, for the upstream-breaker tests.

``tool_00`` .. ``tool_19`` answer ``ok``; ``broken`` always returns an error
result (``isError``); ``pid`` tells the client which process to kill to make
the server die, and ``crash`` ends it without any call answered first.
"""

import logging
import os

from mcp.server.mcpserver import MCPServer

logging.disable(logging.ERROR)
server = MCPServer("twenty-tools", version="1.0.0")


def _make(i: int) -> None:
    @server.tool(name=f"tool_{i:02d}", description=f"Tool number {i}.")
    def tool(x: int) -> str:
        return f"ok {i} {x}"


for _i in range(20):
    _make(_i)


@server.tool()
def broken(x: int) -> str:
    """Fails on its own: the server is fine."""
    raise RuntimeError("the tool's own error")


@server.tool()
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@server.tool()
def crash() -> str:
    """Ends the server at once: the call in flight, and every later one, meets a closed connection."""
    os._exit(1)


if __name__ == "__main__":
    server.run("stdio")
