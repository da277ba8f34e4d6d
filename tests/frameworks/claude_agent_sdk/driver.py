"""Drives the real Claude Agent SDK and its bundled Claude Code CLI against the local Messages API.

Each :func:`ask` is one request the way a server handles one: a new ``ClaudeSDKClient``
(or a ``query()`` call) with the given MCP servers, whose model answers from the
script of :class:`~fake_messages_api.FakeMessagesAPI`. Nothing of the SDK is replaced:
the CLI runs the agent loop, calls the in-process tools through the SDK's control
protocol and calls the SDK's hook callbacks.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from typing import Any

from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    ResultMessage,
    TextBlock,
    create_sdk_mcp_server,
    query,
    tool,
)

#: How long one request may take on a busy machine (the CLI takes a second or two to start).
REQUEST_TIMEOUT = 180.0
#: What a rejection tells the model (the start of the rejection text).
UNAVAILABLE = "is temporarily unavailable"
#: The in-process server's name in ``mcp_servers`` (the model calls ``mcp__tools__<tool>``).
SERVER = "tools"


class Tool:
    """An in-process tool ``fn(args) -> text``; ``runs`` counts how often its body ran."""

    def __init__(self, name: str, fn: Any, schema: dict[str, type] | None = None) -> None:
        self.name, self.fn, self.runs = name, fn, 0
        self.schema = schema or {"x": int}

    def sdk_tool(self) -> Any:
        async def handler(args: dict[str, Any]) -> dict[str, Any]:
            self.runs += 1
            return {"content": [{"type": "text", "text": self.fn(args)}]}

        return tool(self.name, f"The {self.name} tool.", self.schema)(handler)

    @classmethod
    def failing(cls, name: str, message: str = "service down") -> Tool:
        def fn(args: dict[str, Any]) -> str:
            raise RuntimeError(message)

        return cls(name, fn)

    @classmethod
    def healthy(cls, name: str) -> Tool:
        def fn(args: dict[str, Any]) -> str:
            return f"{name} ok {args.get('x')}"

        return cls(name, fn)


def call(tool_name: str, **arguments: Any) -> tuple[str, dict[str, Any]]:
    """A scripted step calling in-process tool ``tool_name``."""
    return (f"mcp__{SERVER}__{tool_name}", arguments)


def server(tools: list[Tool], name: str = SERVER) -> Any:
    """A new in-process MCP server with ``tools`` (the usual per-request pattern)."""
    return create_sdk_mcp_server(name, tools=[t.sdk_tool() for t in tools])


def options(api_url: str, mcp_servers: dict[str, Any], **more: Any) -> ClaudeAgentOptions:
    """Options for an offline CLI: the local API, no built-in tools, no user settings."""
    allowed = [f"mcp__{key}" for key in mcp_servers]
    env = {
        "ANTHROPIC_BASE_URL": api_url,
        "ANTHROPIC_API_KEY": "test",
        "CLAUDE_CONFIG_DIR": tempfile.mkdtemp(prefix="claude-config-"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        **more.pop("env", {}),
    }
    return ClaudeAgentOptions(
        mcp_servers=mcp_servers,
        allowed_tools=allowed,
        tools=[],
        setting_sources=[],
        cwd=os.getcwd(),
        env=env,
        **more,
    )


def _final_text(messages: list[Any]) -> str:
    texts = [
        block.text
        for message in messages
        if isinstance(message, AssistantMessage)
        for block in message.content
        if isinstance(block, TextBlock)
    ]
    return texts[-1].strip() if texts else ""


async def _with_client(opts: ClaudeAgentOptions, prompt: str) -> list[Any]:
    messages = []
    async with ClaudeSDKClient(options=opts) as client:
        await client.query(prompt)
        async for message in client.receive_response():
            messages.append(message)
    return messages


async def _with_query(opts: ClaudeAgentOptions, prompt: str) -> list[Any]:
    return [message async for message in query(prompt=prompt, options=opts)]


def ask(opts: ClaudeAgentOptions, prompt: str = "go", *, client: bool = True) -> str:
    """One request, with a new client (or ``query()``); the model's final text."""
    run = _with_client if client else _with_query

    async def bounded() -> list[Any]:
        return await asyncio.wait_for(run(opts, prompt), REQUEST_TIMEOUT)

    messages = asyncio.run(bounded())
    assert any(isinstance(m, ResultMessage) for m in messages), "the run ended without a result"
    return _final_text(messages)
