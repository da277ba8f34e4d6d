"""A dead MCP server among two of a ``MultiServerMCPClient``: without otel-breaker
``get_tools`` fails for both (the agent never gets built); with it, the listing holds the
live server's tools, the dead server's upstream breaker counts the failure (open, it is
not started again), the status block names it, and once the cooldown ends and the
server is back, its tools are back."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytest.importorskip("langchain_mcp_adapters")

from langchain_mcp_adapters.client import MultiServerMCPClient
from status_prompt import breaker_settings

from otel_breaker.breaker import State
from otel_breaker.degrade import tool_status_block
from otel_breaker.registry import default_registry
from otel_breaker.upstream import upstream_name

FRAMEWORKS = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(FRAMEWORKS))
from mcp_dead_server import bring_up, dead_command, starts  # noqa: E402

COOLDOWN = 60.0


def client(state: Path) -> MultiServerMCPClient:
    dead, dead_args = dead_command(state)
    return MultiServerMCPClient(
        {
            "live": {
                "transport": "stdio",
                "command": sys.executable,
                "args": [str(Path(__file__).with_name("mcp_search_server.py")), "live"],
            },
            "backup": {"transport": "stdio", "command": dead, "args": dead_args},
        }
    )


def tools_of(state: Path) -> dict:
    return {tool.name: tool for tool in asyncio.run(client(state).get_tools())}


def open_upstreams() -> list[str]:
    return [upstream_name(b) for b in default_registry().breakers() if upstream_name(b) and b.state is State.OPEN]


def test_without_otel_breaker_a_dead_server_fails_the_whole_listing(tmp_path: Path) -> None:
    with pytest.raises(BaseException, match=r"Connection closed|unhandled errors"):
        tools_of(tmp_path)


def test_a_dead_server_is_counted_skipped_named_and_back_when_it_is(tmp_path: Path, instrument, registry_clock):
    breaker_settings(failure_threshold="1", success_threshold="1", recovery_timeout=str(COOLDOWN))
    instrument("langchain")
    tools = tools_of(tmp_path)
    assert sorted(tools) == ["search"]
    assert "live: 3 results for 'lamps'" in str(asyncio.run(tools["search"].ainvoke({"query": "lamps"})))
    first = starts(tmp_path)
    assert first >= 1
    (dead,) = open_upstreams()

    assert sorted(tools_of(tmp_path)) == ["search"] and starts(tmp_path) == first  # open: not started
    assert "every tool of upstream" in tool_status_block()

    bring_up(tmp_path)
    registry_clock.advance(COOLDOWN * 2)
    assert sorted(tools_of(tmp_path)) == ["lookup", "search"] and starts(tmp_path) > first
    assert dead not in open_upstreams() and "every tool of upstream" not in tool_status_block()
