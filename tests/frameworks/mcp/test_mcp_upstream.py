"""Upstream breakers with a real MCP client and a real MCP server subprocess (stdio).

A 20-tool server dies mid-conversation: how many calls go out to it before
every tool is rejected? With the server's upstream breaker: ``failure_threshold``.
With per-tool breakers only: 20 x ``failure_threshold``.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import TextContent

from otel_breaker import upstream
from otel_breaker.breaker import State
from otel_breaker.config import load_settings, set_settings
from otel_breaker.degrade import tool_status_block
from otel_breaker.registry import default_registry

SERVER = Path(__file__).with_name("twenty_tools_server.py")
SERVER_ID = "twenty-tools@1.0.0"
THRESHOLD = 3
TOOLS = [f"tool_{i:02d}" for i in range(20)]
UNAVAILABLE = "is temporarily unavailable"


pytestmark = pytest.mark.usefixtures("quiet_logs")


@pytest.fixture
def threshold():
    set_settings(
        load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": str(THRESHOLD), "OTEL_BREAKER_RECOVERY_TIMEOUT": "30"})
    )


def params() -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[str(SERVER)])


async def agent_loop(client, calls: list[str]) -> list[dict]:
    """A plain agent loop: each tool call's result (or error) goes back to the model as text."""
    transcript = []
    for i, name in enumerate(calls):
        try:
            result = await client.call_tool(name, {"x": i})
            text = "\n".join(c.text for c in result.content if isinstance(c, TextContent))
            transcript.append({"tool": name, "text": text, "is_error": bool(result.is_error), "raised": False})
        except Exception as exc:  # what an agent loop shows the model when the transport fails
            transcript.append({"tool": name, "text": f"error: {exc}", "is_error": True, "raised": True})
    return transcript


async def kill_server(client) -> None:
    result = await client.call_tool("pid", {})
    os.kill(int(result.content[0].text), signal.SIGKILL)


async def dead_server_round_trips(rounds: int = 3) -> tuple[int, list[dict]]:
    """Kill the server, then call each of its 20 tools ``rounds`` times: the number of
    calls that went out to it (transport errors), and the transcript."""
    async with Client(params()) as client:
        await client.list_tools()
        healthy = await agent_loop(client, TOOLS)
        assert not any(m["is_error"] for m in healthy)
        await kill_server(client)
        transcript = await agent_loop(client, TOOLS * rounds)
    return sum(1 for m in transcript if m["raised"]), transcript


async def test_dead_twenty_tool_server_costs_threshold_calls(instrument, threshold, capsys):
    instrument("mcp")
    reached, transcript = await dead_server_round_trips()
    assert reached == THRESHOLD
    rejected = transcript[THRESHOLD:]
    assert rejected and all(UNAVAILABLE in m["text"] and f"upstream '{SERVER_ID}'" in m["text"] for m in rejected)
    breaker = upstream.breaker_of(default_registry(), SERVER_ID)
    assert breaker.state is State.OPEN
    # The tools themselves are not to blame: none of them is open, none has a failure streak.
    tools = [b for b in default_registry().breakers() if b.name in TOOLS]
    assert tools and all(b.state is State.CLOSED and b.stats.consecutive_failures == 0 for b in tools)
    assert f"upstream '{SERVER_ID}'" in tool_status_block()
    with capsys.disabled():
        print(f"\n[upstream] 20-tool MCP server died: {reached} calls reached it (threshold {THRESHOLD})")


async def test_first_calls_to_a_dead_server_count_for_its_upstream_as_on_the_call_path(instrument, threshold):
    """Names never listed run their first call as without us and are counted after the
    fact, as the call path counts a call: the dead server's transport failures open its
    upstream breaker and leave the tools unblamed, also while the upstream is open."""
    instrument("mcp")
    async with Client(params()) as client:  # nothing listed or answered: every name is new to the client
        first = await agent_loop(client, ["crash", *TOOLS[:THRESHOLD]])
        again = await agent_loop(client, TOOLS[:1])
    assert all(m["raised"] for m in first), "a first call goes out, the upstream open or not"
    breaker = upstream.breaker_of(default_registry(), SERVER_ID)
    assert breaker.state is State.OPEN
    tools = [b for b in default_registry().breakers() if b.name in TOOLS]
    assert len(tools) == THRESHOLD
    assert all(b.state is State.CLOSED and b.stats.failure_count == 0 for b in tools)
    # A name counted once is guarded from then on: the open upstream answers for it.
    assert not again[0]["raised"] and f"upstream '{SERVER_ID}'" in again[0]["text"]


async def test_without_upstream_grouping_each_tool_pays_the_threshold(instrument, threshold, monkeypatch, capsys):
    """The comparison: breakers per tool only (upstream lookup switched off)."""
    monkeypatch.setattr(upstream, "upstream_of", lambda *a, **k: None)
    instrument("mcp")
    reached, _ = await dead_server_round_trips(rounds=THRESHOLD + 1)
    assert reached == len(TOOLS) * THRESHOLD
    with capsys.disabled():
        print(f"\n[upstream] same server, per-tool breakers only: {reached} calls reached it")


async def test_a_tools_own_error_results_open_only_that_tool(instrument, threshold):
    instrument("mcp")
    async with Client(params()) as client:
        await client.list_tools()
        transcript = await agent_loop(client, ["broken"] * (THRESHOLD + 3) + TOOLS)
    broken = transcript[: THRESHOLD + 3]
    assert all(m["is_error"] and not m["raised"] for m in broken)
    assert all(f"Tool 'broken' {UNAVAILABLE}" in m["text"] for m in broken[THRESHOLD:])
    assert not any("upstream '" in m["text"] for m in broken)
    others = transcript[THRESHOLD + 3 :]
    assert all(not m["is_error"] and m["text"].startswith("ok ") for m in others)
    assert upstream.breaker_of(default_registry(), SERVER_ID).state is State.CLOSED


async def test_half_open_probe_through_any_tool_closes_the_upstream(instrument, threshold, registry_clock):
    instrument("mcp")
    await dead_server_round_trips(rounds=1)
    breaker = upstream.breaker_of(default_registry(), SERVER_ID)
    assert breaker.state is State.OPEN
    registry_clock.advance(31)
    async with Client(params()) as client:  # the server is back (same name@version)
        await client.list_tools()
        transcript = await agent_loop(client, ["tool_07", *TOOLS])
    assert all(not m["is_error"] for m in transcript), "one probe through tool_07 closed it for all"
    assert breaker.state is State.CLOSED


@pytest.mark.parametrize("upstreams", [None, "other=tool_0*"], ids=["automatic", "configured"])
async def test_healthy_server_behaves_the_same_with_and_without(instrument, upstreams):
    calls = ["broken", *TOOLS, "broken", *TOOLS[:5]]
    async with Client(params()) as client:
        await client.list_tools()
        plain = await agent_loop(client, calls)
    if upstreams:
        set_settings(load_settings({"OTEL_BREAKER_UPSTREAMS": upstreams}))
    instrument("mcp")
    async with Client(params()) as client:
        await client.list_tools()
        guarded = await agent_loop(client, calls)
    assert guarded == plain


async def test_upstream_on_spans_and_in_the_state_gauge(instrument, otel, threshold):
    instrument("mcp")
    await dead_server_round_trips(rounds=1)
    spans = otel.tool_spans("tool_05")
    assert spans and all(s.attributes.get("otel_breaker.upstream") == SERVER_ID for s in spans)
    failed = [s for s in otel.tool_spans("tool_00") if s.attributes.get("error.type")]
    # error.type of an MCP protocol error is its JSON-RPC code (the MCP semantic conventions): -32000, connection closed
    assert [s.attributes["error.type"] for s in failed] == ["-32000"], "the transport failure shows on the span"
    rejected = [s for s in otel.tool_spans("tool_19") if s.attributes.get("otel_breaker.rejected")]
    assert rejected, "a call the upstream rejected still has its span"
    state = otel.metric_value(
        "otel_breaker.state",
        gen_ai_tool_name=f"upstream:{SERVER_ID}",
        otel_breaker_upstream=SERVER_ID,
        otel_breaker_state="open",
    )
    assert state == 1
