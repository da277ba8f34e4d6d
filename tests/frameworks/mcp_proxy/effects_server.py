"""An MCP server whose tools announce their side effects, for the proxy's retry tests.

``python effects_server.py --runs FILE [--down FILE]``

* ``fetch_page(url)``: ``readOnlyHint``; fetches a page with ``urllib`` (an error
  status is the tool's error);
* ``send_message(text)``: ``destructiveHint``; sends at once;
* ``post_message(text)``: ``destructiveHint``; never finishes on its own;
* ``pid()``: ``readOnlyHint``; the process id, so a test can kill the server.

Every run of a tool appends its name to the runs file. ``--down FILE``: while FILE
exists the server exits at once, as a server that cannot start does.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import urllib.error
import urllib.request

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

READ_ONLY = ToolAnnotations(readOnlyHint=True)
DESTRUCTIVE = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False)


def build(runs: str) -> MCPServer:
    server = MCPServer("effects-server", version="1.0.0")

    def ran(tool: str) -> None:
        with open(runs, "a", encoding="utf-8") as out:
            out.write(tool + "\n")

    @server.tool(annotations=READ_ONLY)
    def fetch_page(url: str) -> str:
        """Fetches a web page and returns its HTML."""
        ran("fetch_page")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1, never a proxy
        try:
            with opener.open(url, timeout=60.0) as response:
                return response.read().decode()
        except urllib.error.HTTPError as exc:
            raise ToolError(str(exc)) from exc  # the page's status, for the client to read

    @server.tool(annotations=DESTRUCTIVE)
    def send_message(text: str) -> str:
        """Sends a message to the team channel."""
        ran("send_message")
        return "sent"

    @server.tool(annotations=DESTRUCTIVE)
    async def post_message(text: str) -> str:
        """Posts a message to the team channel (the channel never confirms)."""
        ran("post_message")
        await anyio.sleep(3600)
        return "posted"

    @server.tool(annotations=READ_ONLY)
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", required=True)
    parser.add_argument("--down")
    args = parser.parse_args()
    if args.down and os.path.exists(args.down):
        sys.exit(3)
    logging.disable(logging.ERROR)
    build(args.runs).run("stdio")


if __name__ == "__main__":
    main()
