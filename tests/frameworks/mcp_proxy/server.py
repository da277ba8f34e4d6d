"""An MCP server for the proxy's tests, over stdio (or streamable HTTP).

``python server.py [--http PORT] [--runs FILE] [--down FILE] [--name NAME]``

Tools: ``echo`` (healthy), ``broken`` (always fails: an ``isError`` result),
``pid`` (the process id, so a test can kill it), ``slow`` (reports progress and
logs), ``ask`` (asks the client to sample), ``ask_big`` (the same, with a question of any
size), ``ask_when`` (the same, once a file exists), ``confirm`` (asks the client to
elicit), ``roots`` (asks for the client's roots), ``hang`` (runs until cancelled), ``big`` (a result of any size). One
resource, one resource template and one prompt.

``--runs FILE`` appends a line per run of ``broken``: how often the failing
tool really ran, whatever the proxy answered. ``--down FILE``: while FILE
exists the server exits at once, as a server that cannot start does.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import SamplingMessage, TextContent
from pydantic import BaseModel


class Answer(BaseModel):
    ok: bool


def build(runs: str | None, name: str = "proxy-test-server") -> MCPServer:
    server = MCPServer(name, version="3.1.4", instructions="Test server for the MCP proxy.")

    @server.tool()
    def echo(text: str) -> str:
        """Say it back."""
        return f"echo: {text}"

    @server.tool()
    def broken(text: str) -> str:
        """Always fails, as a tool whose backend is down."""
        if runs:
            with open(runs, "a", encoding="utf-8") as out:
                out.write("run\n")
        raise RuntimeError("backend exploded")

    @server.tool()
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool()
    async def slow(steps: int, ctx: Context) -> str:
        """Reports progress and logs a line per step."""
        for step in range(steps):
            await ctx.report_progress(step + 1, steps, f"step {step + 1}")
            await ctx.info(f"did step {step + 1}")
        return f"{steps} steps"

    @server.tool()
    async def ask(question: str, ctx: Context) -> str:
        """Asks the client's model."""
        result = await ctx.session.create_message(
            messages=[SamplingMessage(role="user", content=TextContent(type="text", text=question))],
            max_tokens=20,
            related_request_id=ctx.request_id,
        )
        return f"model said: {result.content.text}"

    @server.tool()
    async def ask_big(size: int, ctx: Context) -> str:
        """Asks the client's model with a question of ``size`` characters."""
        result = await ctx.session.create_message(
            messages=[SamplingMessage(role="user", content=TextContent(type="text", text="q" * size))],
            max_tokens=20,
            related_request_id=ctx.request_id,
        )
        return f"model said: {result.content.text}"

    @server.tool()
    async def ask_when(question: str, ctx: Context, mark: str = "", wait_for: str = "") -> str:
        """Writes ``mark`` (the call has started), waits until ``wait_for`` exists, then asks
        the client's model: two clients' calls overlap as a test needs, without sleeps."""
        if mark:
            with open(mark, "w", encoding="utf-8") as out:
                out.write("started\n")
        if wait_for:
            with anyio.fail_after(60):
                while not os.path.exists(wait_for):
                    await anyio.sleep(0.01)
        await ctx.info(f"asking: {question}")
        result = await ctx.session.create_message(
            messages=[SamplingMessage(role="user", content=TextContent(type="text", text=question))],
            max_tokens=20,
            related_request_id=ctx.request_id,
        )
        return f"model said: {result.content.text}"

    @server.tool()
    async def confirm(ctx: Context) -> str:
        """Asks the user."""
        result = await ctx.elicit("Proceed?", Answer)
        return f"{result.action}: {result.data.ok if result.data else None}"

    @server.tool()
    async def roots(ctx: Context) -> str:
        """The client's roots."""
        listed = await ctx.session.list_roots()
        return ", ".join(str(root.uri) for root in listed.roots)

    @server.tool()
    async def hang() -> str:
        """Never finishes on its own; notes its start and its cancellation in the runs file."""
        note("started")
        try:
            await anyio.sleep(3600)
        except anyio.get_cancelled_exc_class():
            note("cancelled")
            raise
        return "done"

    @server.tool()
    def big(size: int) -> str:
        """A large result."""
        return "x" * size

    def note(what: str) -> None:
        if runs:
            with open(runs, "a", encoding="utf-8") as out:
                out.write(what + "\n")

    @server.resource("notes://today")
    def today() -> str:
        """Today's notes."""
        return "buy milk"

    @server.resource("notes://day/{day}")
    def day(day: str) -> str:
        """A day's notes."""
        return f"notes of {day}"

    @server.prompt()
    def review(code: str) -> str:
        """Review some code."""
        return f"Please review: {code}"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int)
    parser.add_argument("--runs")
    parser.add_argument("--down")
    parser.add_argument("--name", default="proxy-test-server")
    args = parser.parse_args()
    if args.down and os.path.exists(args.down):
        sys.exit(3)
    logging.disable(logging.ERROR)  # a failing tool would log a traceback per call on stderr
    server = build(args.runs, args.name)
    if args.http is not None:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
