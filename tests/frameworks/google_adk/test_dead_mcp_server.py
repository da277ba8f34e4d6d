"""A dead MCP server among two ``McpToolset``s of a Google ADK agent. ADK runs the agent
without the tools of a toolset that fails to load, and tries the server again on every
model request: a dead stdio server is started again each time. With otel-breaker the
failure counts on the server's upstream breaker; while it is open the server is not
started at all, the status block names it, and once the cooldown ends and the server
is back, its tools are back."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytest.importorskip("google.adk")
pytest.importorskip("mcp.client.stdio")
sys.path.insert(0, str(Path(__file__).parent))

from google.adk.agents import LlmAgent
from google.adk.tools.mcp_tool.mcp_session_manager import StdioConnectionParams
from google.adk.tools.mcp_tool.mcp_toolset import McpToolset
from mcp import StdioServerParameters
from scripted_model import ScriptedLlm, run
from status_prompt import breaker_settings

from otel_breaker.breaker import State
from otel_breaker.registry import default_registry
from otel_breaker.upstream import upstream_name

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from mcp_dead_server import bring_up, dead_command, starts
from mcp_search_server import stdio_command

COOLDOWN = 60.0
LIVE = "live: 3 results for 'lamps'"


def toolset(command: str, args: list[str]) -> McpToolset:
    # A generous timeout: a busy machine starts a Python server slowly.
    return McpToolset(
        connection_params=StdioConnectionParams(
            server_params=StdioServerParameters(command=command, args=args), timeout=60
        )
    )


def run_once(state: Path) -> tuple[str, ScriptedLlm]:
    """One run of an agent with the live server and the dead one: ``search``, then an answer."""
    model = ScriptedLlm(steps=[("search", {"query": "lamps"}), "done"], requests=[])
    agent = LlmAgent(
        name="assistant",
        model=model,
        instruction="Find things.",
        tools=[toolset(*stdio_command("live", "up")), toolset(*dead_command(state))],
    )
    return asyncio.run(run(agent)), model


def read(model: ScriptedLlm) -> str:
    return model.requests[-1]["tool_results"][-1]


def open_upstreams() -> list[str]:
    return [upstream_name(b) for b in default_registry().breakers() if upstream_name(b) and b.state is State.OPEN]


def test_without_otel_breaker_the_dead_server_is_started_on_every_request(tmp_path: Path) -> None:
    final, model = run_once(tmp_path)
    assert final == "done" and LIVE in read(model)
    # Every request lists the toolset again, and ADK's session manager retries a failed start.
    assert len(model.requests) == 2 and starts(tmp_path) >= 2 * len(model.requests)


def test_a_dead_server_is_counted_skipped_named_and_back_when_it_is(tmp_path: Path, instrument, registry_clock):
    breaker_settings(
        failure_threshold="1", success_threshold="1", recovery_timeout=str(COOLDOWN), status_in_prompt="true"
    )
    instrument("google_adk")
    final, model = run_once(tmp_path)
    assert final == "done" and LIVE in read(model)
    assert [sorted(r["tools"]) for r in model.requests] == [["search"], ["search"]]
    # Open after the first listing failed: not started again for the second request.
    first = starts(tmp_path)
    assert 1 <= first <= 2
    (dead,) = open_upstreams()

    final, model = run_once(tmp_path)
    assert final == "done" and starts(tmp_path) == first
    assert "every tool of upstream" in str(model.requests[0]["system_instruction"])

    bring_up(tmp_path)
    registry_clock.advance(COOLDOWN * 2)
    final, model = run_once(tmp_path)
    assert final == "done" and starts(tmp_path) > first
    assert sorted(model.requests[0]["tools"]) == ["lookup", "search"]
    assert dead not in open_upstreams()
    assert "every tool of upstream" not in str(model.requests[0]["system_instruction"])
