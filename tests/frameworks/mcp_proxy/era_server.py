"""A small MCP server that speaks only one protocol era, for the proxy's era tests.

``python era_server.py --era handshake|2026-07-28 [--http PORT] [--runs FILE]``

Built on the SDK's low-level ``Server``, served by the SDK's own loops:

* ``handshake``: over stdio the handshake-only loop (``serve_loop``: ``server/discover``
  is an unknown method); over HTTP every 2026-07-28 request is refused with
  ``UNSUPPORTED_PROTOCOL_VERSION`` naming the handshake versions. A request that carries
  a 2026-07-28 envelope on a handshake connection is refused, as the SDK's own loop does.
* ``2026-07-28``: over stdio the SDK's 2026-07-28 stream loop (``initialize`` is
  refused with ``UNSUPPORTED_PROTOCOL_VERSION``); over HTTP ``initialize`` is refused
  the same way. It serves ``subscriptions/listen``.

Tools: ``echo`` (healthy) and ``broken`` (always an ``isError`` result; ``--runs FILE``
gets a line per run, so a test knows how often it really ran).
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

import anyio
import mcp.types as types
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.runner import _serve_modern_stream, serve_loop
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.exceptions import MCPError
from mcp_types import PROTOCOL_VERSION_META_KEY, UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

ERAS = ("handshake", "2026-07-28")
NAME = "era-server"
VERSION = "1.0.0"
TOOLS = [
    types.Tool(
        name="echo",
        description="Say it back.",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    ),
    types.Tool(
        name="broken",
        description="Always fails, as a tool whose backend is down.",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
    ),
]


def build(era: str, runs: str | None) -> Server[Any]:
    async def list_tools(ctx: ServerRequestContext[Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = params.arguments or {}
        if params.name == "echo":
            return types.CallToolResult(content=[types.TextContent(type="text", text=f"echo: {arguments['text']}")])
        if params.name == "broken":
            if runs:
                with open(runs, "a", encoding="utf-8") as out:
                    out.write("run\n")
            return types.CallToolResult(
                content=[types.TextContent(type="text", text="backend exploded")], is_error=True
            )
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")

    listen = ListenHandler(InMemorySubscriptionBus()) if era != "handshake" else None
    server: Server[Any] = Server(
        NAME,
        version=VERSION,
        instructions=f"Speaks only the {era} era.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_subscriptions_listen=listen,
    )
    server.middleware.append(_pin(era))
    return server


def _pin(era: str) -> Any:
    """The middleware that refuses the other era's requests (the HTTP entry serves both)."""

    async def pin(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        meta = (ctx.params or {}).get("_meta")
        enveloped = isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta
        if era == "handshake" and enveloped and not modern:
            # As the SDK's own loop does: a 2026-07-28 envelope on a handshake connection is refused
            # (a proxy that passed its client's envelope on would be caught here).
            raise MCPError(code=types.INVALID_REQUEST, message="A 2026-07-28 envelope on a handshake connection")
        if era == "handshake" and modern:
            raise MCPError(
                code=UNSUPPORTED_PROTOCOL_VERSION,
                message="This server speaks only the handshake era",
                data={"supported": list(HANDSHAKE_PROTOCOL_VERSIONS), "requested": ctx.protocol_version},
            )
        if era != "handshake" and ctx.method == "initialize":
            raise MCPError(
                code=UNSUPPORTED_PROTOCOL_VERSION,
                message="This server speaks only 2026-07-28",
                data={"supported": list(MODERN_PROTOCOL_VERSIONS), "requested": "handshake"},
            )
        return await call_next(ctx)

    return pin


async def serve_stdio(server: Server[Any], era: str) -> None:
    async with server.lifespan(server) as state, stdio_server() as (read, write):
        if era == "handshake":
            await serve_loop(server, read, write, lifespan_state=state)
        else:
            await _serve_modern_stream(server, read, write, lifespan_state=state, raise_exceptions=False)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--era", choices=ERAS, required=True)
    parser.add_argument("--http", type=int)
    parser.add_argument("--runs")
    args = parser.parse_args()
    logging.disable(logging.ERROR)
    server = build(args.era, args.runs)
    if args.http is None:
        anyio.run(serve_stdio, server, args.era)
        return
    import uvicorn

    app = server.streamable_http_app(host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=args.http, log_level="warning")


if __name__ == "__main__":
    main()
