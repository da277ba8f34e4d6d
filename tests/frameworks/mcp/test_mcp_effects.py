"""Tool annotations read in-process by the mcp adapter (docs/retries.md): a server's
``tools/list`` says which tools are read-only or destructive, and retries below the
client follow it (the user's ``OTEL_BREAKER_TOOL_EFFECTS`` winning).

Real MCP client and server (in-process transport); each tool fails once with the
server's own error answer (``isError``: "HTTP Error 503"), then answers.
"""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("mcp")

from mcp.client.client import Client
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import TextContent, ToolAnnotations

from otel_breaker import effects, retry_policy
from otel_breaker.config import load_settings, set_settings


@pytest.fixture(autouse=True)
def no_back_off():
    """Back-offs return at once (nothing sleeps); the server's tracebacks stay quiet."""

    async def skip(seconds: float) -> None:
        return None

    retry_policy.set_retry_timing(lambda seconds: None, skip)
    logging.disable(logging.ERROR)
    yield
    logging.disable(logging.NOTSET)
    retry_policy.set_retry_timing()
    effects.clear_registered_effects()


def make_server() -> tuple[MCPServer, dict[str, int]]:
    runs = {"lookup": 0, "archive": 0}
    server = MCPServer("records-server", version="1.0.0")

    def blip(tool: str) -> None:
        runs[tool] += 1
        if runs[tool] == 1:
            raise ToolError("HTTP Error 503: Service Unavailable")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def lookup(key: str) -> str:
        """Looks a record up."""
        blip("lookup")
        return f"record {key}"

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
    def archive(key: str) -> str:
        """Archives a record."""
        blip("archive")
        return f"archived {key}"

    return server, runs


async def call_each(server: MCPServer) -> dict[str, tuple[bool, str]]:
    answers = {}
    async with Client(server) as client:
        await client.list_tools()  # the listing the adapter reads the annotations from
        for tool in ("lookup", "archive"):
            result = await client.call_tool(tool, {"key": "42"})
            text = "\n".join(c.text for c in result.content if isinstance(c, TextContent))
            answers[tool] = (bool(result.is_error), text)
    return answers


async def test_the_annotations_decide_what_is_retried(instrument):
    set_settings(load_settings({"OTEL_BREAKER_RETRY": "transient"}))
    instrument("mcp")
    server, runs = make_server()
    answers = await call_each(server)
    assert answers["lookup"] == (False, "record 42"), "read-only by its annotation: retried below the client"
    assert runs["lookup"] == 2
    assert answers["archive"][0] and "503" in answers["archive"][1], "destructive: never run twice"
    assert runs["archive"] == 1


async def test_the_users_word_wins_over_the_annotations(instrument):
    set_settings(load_settings({"OTEL_BREAKER_RETRY": "transient", "OTEL_BREAKER_TOOL_EFFECTS": "lookup=destructive"}))
    instrument("mcp")
    server, runs = make_server()
    answers = await call_each(server)
    assert answers["lookup"][0] and runs["lookup"] == 1


async def test_without_retries_the_annotations_change_nothing(instrument):
    set_settings(load_settings({}))
    instrument("mcp")
    server, runs = make_server()
    answers = await call_each(server)
    assert answers["lookup"][0] and runs == {"lookup": 1, "archive": 1}
