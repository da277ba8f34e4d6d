"""FastMCP servers for the client tests, run in memory (``Client(server)``)."""

from __future__ import annotations

import mcp_types
from fastmcp import Context, FastMCP


def make_server() -> tuple[FastMCP, dict[str, int]]:
    """``flaky`` always fails, ``healthy`` works, ``ask`` needs one input round
    (it answers the first send with an ``InputRequiredResult``) and then fails."""
    runs = {"flaky": 0, "healthy": 0, "ask": 0}
    server = FastMCP("demo-server")

    @server.tool
    def flaky(x: int) -> str:
        """Calls a backend that is down."""
        runs["flaky"] += 1
        raise RuntimeError("backend down: secret-token-123")

    @server.tool
    def healthy(x: int) -> str:
        """Works."""
        runs["healthy"] += 1
        return f"ok {x}"

    @server.tool
    def ask(x: int, ctx: Context) -> str:
        """Asks for input first, then calls a backend that is down."""
        runs["ask"] += 1
        if ctx.request_state is None:
            return mcp_types.InputRequiredResult(request_state="asked")
        raise RuntimeError("backend down")

    return server, runs
