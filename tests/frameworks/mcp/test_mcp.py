"""Real MCP client and server (in-process transport) through the mcp adapter.

MCP has no agent loop of its own; a scripted model drives the tool calls the
way an agent loop does and records what it was shown.
"""

from __future__ import annotations

import pytest

pytest.importorskip("mcp")

from mcp.client import client as client_module
from mcp.client import session as session_module
from mcp.client.client import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import TextContent

from otel_breaker.config import load_settings, set_settings
from otel_breaker.instrumentation.base import FrameworkAdapter
from otel_breaker.toolcall import ToolCall

UNAVAILABLE = "is temporarily unavailable"
N_CALLS = 4


pytestmark = pytest.mark.usefixtures("quiet_logs")


@pytest.fixture
def threshold_two():
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2", "OTEL_BREAKER_RECOVERY_TIMEOUT": "600"}))


def make_server():
    runs = {"flaky": 0, "healthy": 0}
    server = MCPServer("demo-server", version="1.0.0")

    @server.tool()
    def flaky(x: int) -> str:
        """Calls a backend that is down."""
        runs["flaky"] += 1
        raise RuntimeError("backend down: secret-token-123")

    @server.tool()
    def healthy(x: int) -> str:
        """Works."""
        runs["healthy"] += 1
        return f"ok {x}"

    return server, runs


class ScriptedModel:
    """Asks for ``tool`` N_CALLS times, then answers; records the transcript it was shown."""

    def __init__(self, tool: str):
        self.tool = tool
        self.seen: list[dict] = []

    def step(self, transcript: list[dict]) -> dict:
        self.seen = list(transcript)
        done = sum(1 for m in transcript if m["role"] == "tool")
        if done < N_CALLS:
            return {
                "role": "assistant",
                "tool_call": {"id": f"call_{done + 1}", "name": self.tool, "args": {"x": done}},
            }
        return {"role": "assistant", "content": "done"}

    def tool_results(self) -> list[dict]:
        return [m for m in self.seen if m["role"] == "tool"]


async def agent_loop(model: ScriptedModel, call) -> str:
    transcript: list[dict] = [{"role": "user", "content": "go"}]
    while True:
        message = model.step(transcript)
        transcript.append(message)
        if "tool_call" not in message:
            return message["content"]
        tool_call = message["tool_call"]
        result = await call(tool_call["name"], tool_call["args"])
        text = "\n".join(c.text for c in result.content if isinstance(c, TextContent))
        transcript.append({"role": "tool", "id": tool_call["id"], "content": text, "is_error": bool(result.is_error)})


async def run_loop(server, tool: str, low_level: bool) -> tuple[ScriptedModel, str]:
    async with Client(server) as client:
        await client.list_tools()
        model = ScriptedModel(tool)
        call = client.session.call_tool if low_level else client.call_tool
        return model, await agent_loop(model, call)


def counts(otel, name: str) -> tuple[float, float, float]:
    """Exported call counters of ``name`` (cumulative per process: compare against a baseline)."""
    return (
        otel.metric_value("otel_breaker.calls", gen_ai_tool_name=name),
        otel.metric_value("otel_breaker.calls", gen_ai_tool_name=name, otel_breaker_outcome="failure"),
        otel.metric_value("otel_breaker.calls.rejected", gen_ai_tool_name=name),
    )


@pytest.mark.parametrize("low_level", [False, True], ids=["Client.call_tool", "ClientSession.call_tool"])
async def test_failing_server_tool_trips_breaker(instrument, otel, threshold_two, low_level):
    instrument("mcp")
    server, runs = make_server()
    before = counts(otel, "flaky")
    model, final = await run_loop(server, "flaky", low_level)
    assert final == "done"
    assert runs["flaky"] == 2, "the server tool must not run once the breaker is open"
    results = model.tool_results()
    assert len(results) == N_CALLS and all(r["is_error"] for r in results)
    assert not any(UNAVAILABLE in r["content"] for r in results[:2])
    for r in results[2:]:
        assert f"Tool 'flaky' {UNAVAILABLE}" in r["content"]
    spans = otel.tool_spans("flaky")
    assert len(spans) == N_CALLS, "one span per logical call"
    assert [bool(s.attributes.get("otel_breaker.rejected")) for s in spans] == [False, False, True, True]
    assert [s.attributes.get("error.type") for s in spans[:2]] == ["tool_error", "tool_error"]
    assert all(s.name == "execute_tool flaky" for s in spans)
    after = counts(otel, "flaky")
    assert tuple(a - b for a, b in zip(after, before, strict=True)) == (2, 2, 2)
    assert otel.metric_value("otel_breaker.state", gen_ai_tool_name="flaky", otel_breaker_state="open") == 1


@pytest.mark.parametrize("low_level", [False, True], ids=["Client.call_tool", "ClientSession.call_tool"])
async def test_healthy_tool_results_unchanged(instrument, otel, low_level):
    server, runs = make_server()
    plain_model, plain_final = await run_loop(server, "healthy", low_level)
    instrument("mcp")
    before = counts(otel, "healthy")
    model, final = await run_loop(server, "healthy", low_level)
    assert final == plain_final == "done"
    assert model.tool_results() == plain_model.tool_results()
    assert runs["healthy"] == 2 * N_CALLS
    after = counts(otel, "healthy")
    assert tuple(a - b for a, b in zip(after, before, strict=True)) == (N_CALLS, 0, 0)
    assert len(otel.tool_spans("healthy")) == N_CALLS


async def test_call_inside_another_frameworks_guarded_call_counts_once(instrument, otel, threshold_two):
    """An agent framework that exposes the MCP tool under its server name and guards it
    first owns the call; the MCP layer passes through instead of counting it again."""
    instrument("mcp")
    server, runs = make_server()
    outer_adapter = FrameworkAdapter()
    outer_adapter.name = "outer"

    async with Client(server) as client:
        await client.list_tools()
        for i in range(2):
            outer = ToolCall("healthy", framework="outer", call_id=f"outer_{i}")
            await outer_adapter.run_async(outer, client.call_tool, ("healthy", {"x": i}), {})
    spans = otel.tool_spans("healthy")
    assert len(spans) == 2
    assert {s.attributes.get("otel_breaker.framework") for s in spans} == {"outer"}
    assert runs["healthy"] == 2


async def test_agent_of_an_enclosing_call_is_inherited(instrument, otel):
    """A tool of another framework that calls an MCP tool of a different name: the MCP
    call is keyed to the same agent."""
    instrument("mcp")
    server, _ = make_server()
    outer_adapter = FrameworkAdapter()

    class Agent:
        name = "planner"

    agent = Agent()

    async def composite():
        return await client.call_tool("healthy", {"x": 1})

    async with Client(server) as client:
        await client.list_tools()
        await outer_adapter.run_async(ToolCall("composite", agent=agent, agent_name="planner"), composite, (), {})
    (span,) = otel.tool_spans("healthy")
    assert span.attributes.get("gen_ai.agent.name") == "planner"
    assert span.attributes.get("gen_ai.tool.type") == "extension"


async def test_uninstrument_restores_originals(instrument, threshold_two):
    originals = (client_module.Client.__dict__["call_tool"], session_module.ClientSession.__dict__["call_tool"])
    instrumentor = instrument("mcp")
    assert client_module.Client.__dict__["call_tool"] is not originals[0]
    assert session_module.ClientSession.__dict__["call_tool"] is not originals[1]
    instrumentor.uninstrument()
    assert client_module.Client.__dict__["call_tool"] is originals[0]
    assert session_module.ClientSession.__dict__["call_tool"] is originals[1]
    server, runs = make_server()
    await run_loop(server, "flaky", False)
    assert runs["flaky"] == N_CALLS


@pytest.mark.parametrize("low_level", [False, True], ids=["Client.call_tool", "ClientSession.call_tool"])
async def test_a_tool_called_before_any_listing_still_gets_its_span_and_points(instrument, otel, low_level):
    """The server must first show a name is a real tool (no breaker or series for names it
    does not have); the first call then gets its span after the fact, with its own times."""
    instrument("mcp")
    server, runs = make_server()
    async with Client(server) as client:  # no list_tools(): the name is unknown to the client
        call = client.session.call_tool if low_level else client.call_tool
        first = await call("healthy", {"x": 1})
        second = await call("healthy", {"x": 2})
        unknown = await call("nope", {"x": 3})
    assert [first.content[0].text, second.content[0].text] == ["ok 1", "ok 2"] and runs["healthy"] == 2
    assert unknown.is_error
    spans = otel.tool_spans("healthy")
    assert len(spans) == 2, "every call of a real tool has its span"
    assert all(s.end_time >= s.start_time for s in spans) and spans[0].start_time <= spans[1].start_time
    assert spans[0].attributes.get("otel_breaker.tool.source") == "demo-server@1.0.0"
    assert otel.tool_spans("nope") == []
    assert otel.metric_value("otel_breaker.calls", gen_ai_tool_name="healthy") == 2


def test_long_server_commands_stay_apart_within_the_bound():
    """Two stdio servers whose command lines differ only past the bound never share a key."""
    from otel_breaker.instrumentation.mcp_identity import MAX_SOURCE_CHARS as _MAX_SOURCE_CHARS
    from otel_breaker.instrumentation.mcp_identity import bounded_source as _bounded_source

    base = "/opt/" + "deep/" * 40 + "python server.py"
    alpha, beta = _bounded_source(base + " alpha broken"), _bounded_source(base + " beta")
    assert alpha != beta
    assert len(alpha) == len(beta) == _MAX_SOURCE_CHARS
    assert " alpha broken#" in alpha  # the tail that tells them apart is kept
    assert _bounded_source("python server.py beta") == "python server.py beta"  # short: unchanged
