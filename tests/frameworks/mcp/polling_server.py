"""An MCP server whose answers look like mistakes but are not all the model's, in process
(:func:`build`) or over stdio (``python polling_server.py``).

Tools:

* ``job(id)``: a job that is created on its sixth look. Until then the answer is the
  JSON-RPC error -32602 "job <id> not found", as many servers answer for an id that
  does not exist yet; then ``done``. A client that polls must reach the sixth call.
* ``describe(tool_name)``: a catalogue of other tools; a name it does not know is
  answered ``Tool not found: <name>`` (an ``isError`` result). The tool itself is
  listed: the answer is about the catalogue, not an unknown tool of this server.
* ``broken(text)``: always fails with the same text nothing recognises, as a tool
  whose backend is down.
* ``limited()``: rate limited (-32023) with ``retryAfter`` in the error's data.
"""

from __future__ import annotations

import logging

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, CallToolResult, TextContent

#: How many looks at a job answer "not found" before it is done.
NOT_FOUND_LOOKS = 5
RATE_LIMITED = -32023
RETRY_AFTER_SECONDS = 30


def build(name: str = "polling-server") -> MCPServer:
    """A fresh server: every job starts unseen."""
    server = MCPServer(name, version="1.0.0")
    looks: dict[str, int] = {}

    @server.tool()
    def job(id: str) -> str:
        """The state of a job: ``done`` once it exists."""
        looks[id] = looks.get(id, 0) + 1
        if looks[id] <= NOT_FOUND_LOOKS:
            raise MCPError(code=INVALID_PARAMS, message=f"job {id} not found")
        return "done"

    @server.tool()
    def describe(tool_name: str) -> CallToolResult:
        """What a tool of the catalogue does."""
        if tool_name == "search":
            return CallToolResult(content=[TextContent(type="text", text="search: finds documents")])
        return CallToolResult(content=[TextContent(type="text", text=f"Tool not found: {tool_name}")], is_error=True)

    @server.tool()
    def broken(text: str) -> str:
        """Always fails, as a tool whose backend is down."""
        raise ToolError("the flux capacitor is misaligned")

    @server.tool()
    def limited() -> str:
        """Always rate limited."""
        raise MCPError(code=RATE_LIMITED, message="rate limited", data={"retryAfter": RETRY_AFTER_SECONDS})

    return server


def main() -> None:
    logging.disable(logging.ERROR)  # a failing tool would log a line per call on stderr
    build().run("stdio")


if __name__ == "__main__":
    main()
