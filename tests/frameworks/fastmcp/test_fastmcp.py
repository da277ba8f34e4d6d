"""FastMCP clients (``fastmcp.Client``) against an in-memory FastMCP server.

``Client.call_tool`` sends ``tools/call`` through the mcp SDK's
``ClientSession.call_tool``, so the mcp adapter alone already guards it; the
fastmcp adapter makes the logical call (``call_tool_mcp``, with its input
rounds) the unit that is counted. Either way the rejection reaches the caller
as FastMCP's own ``ToolError`` (or an ``is_error`` result), like a failing tool.
"""

from __future__ import annotations

import pathlib
import sys

import pytest

pytest.importorskip("fastmcp")
sys.path.insert(0, str(pathlib.Path(__file__).parent))

from fastmcp import Client
from fastmcp.client.mixins.tools import ClientToolsMixin
from fastmcp.exceptions import ToolError
from servers import make_server
from zero_code import launcher, run_script, script_env

from otel_breaker.config import load_settings, set_settings
from otel_breaker.registry import default_registry

UNAVAILABLE = "is temporarily unavailable"
SCRIPT = pathlib.Path(__file__).with_name("agent_script.py")
REPORT = '{"body_runs"'
BOTH = ("mcp", "fastmcp")


pytestmark = pytest.mark.usefixtures("quiet_logs")


@pytest.fixture
def threshold_two():
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2", "OTEL_BREAKER_RECOVERY_TIMEOUT": "600"}))


async def call_n(server, tool: str, n: int, **options) -> list[str]:
    """What a model loop would show the model for ``n`` calls of ``tool``."""
    shown = []
    async with Client(server) as client:
        for x in range(n):
            try:
                result = await client.call_tool(tool, {"x": x}, **options)
                text = result.content[0].text if result.content else ""
                shown.append(f"error: {text}" if result.is_error else text)
            except ToolError as error:
                shown.append(f"error: {error}")
    return shown


def stats(tool: str):
    (breaker,) = default_registry().find(tool)
    return breaker.stats


@pytest.mark.parametrize("frameworks", [("mcp",), ("fastmcp",), BOTH], ids="+".join)
async def test_failing_tool_opens_breaker_and_client_raises_tool_error(instrument, otel, threshold_two, frameworks):
    instrument(*frameworks)
    server, runs = make_server()
    shown = await call_n(server, "flaky", 4)
    assert runs["flaky"] == 2, "the server tool must not run once the breaker is open"
    assert all(text.startswith("error: ") for text in shown)
    assert [UNAVAILABLE in text for text in shown] == [False, False, True, True]
    assert "Tool 'flaky'" in shown[-1] and "secret-token-123" not in shown[-1]
    s = stats("flaky")
    assert (s.failure_count, s.rejected_requests, s.success_count) == (2, 2, 0)
    spans = otel.tool_spans("flaky")
    assert len(spans) == 4, "one span per logical call"
    assert [bool(x.attributes.get("otel_breaker.rejected")) for x in spans] == [False, False, True, True]


async def test_rejection_without_raise_is_an_error_result(instrument, threshold_two):
    instrument(*BOTH)
    server, runs = make_server()
    shown = await call_n(server, "flaky", 3, raise_on_error=False)
    assert runs["flaky"] == 2
    assert shown[-1].startswith("error: Tool 'flaky' " + UNAVAILABLE)


async def test_input_rounds_are_one_logical_call(instrument, otel, threshold_two):
    """``ask`` is sent twice per call (an input round, then the real answer). Guarded
    per send, each first round counted as a success and the breaker never opened."""
    instrument(*BOTH)
    server, runs = make_server()
    shown = await call_n(server, "ask", 3)
    assert runs["ask"] == 4, "two calls of two rounds each, then rejected"
    assert UNAVAILABLE in shown[-1]
    s = stats("ask")
    assert (s.failure_count, s.success_count, s.rejected_requests) == (2, 0, 1)
    assert len(otel.tool_spans("ask")) == 3


async def test_healthy_tool_identical_with_and_without(instrument):
    server, runs = make_server()
    baseline = await call_n(server, "healthy", 3)
    instrument(*BOTH)
    assert await call_n(server, "healthy", 3) == baseline == ["ok 0", "ok 1", "ok 2"]
    assert runs["healthy"] == 6
    assert stats("healthy").success_count == 3


async def listed(server) -> list[str]:
    async with Client(server) as client:
        return [tool.name for tool in await client.list_tools()]


@pytest.mark.parametrize("hide", ["false", "true"])
async def test_list_tools_unchanged_unless_a_tool_is_open(instrument, hide):
    server, _ = make_server()
    baseline = await listed(server)
    assert baseline == ["flaky", "healthy", "ask"]
    set_settings(load_settings({"OTEL_BREAKER_HIDE_OPEN_TOOLS": hide}))
    instrument("fastmcp")
    assert await listed(server) == baseline
    await call_n(server, "healthy", 1)
    assert await listed(server) == baseline


async def test_open_tool_leaves_list_tools_until_half_open(instrument, registry_clock):
    settings = {"OTEL_BREAKER_FAILURE_THRESHOLD": "2", "OTEL_BREAKER_RECOVERY_TIMEOUT": "60"}
    set_settings(load_settings({**settings, "OTEL_BREAKER_HIDE_OPEN_TOOLS": "true"}))
    instrument("fastmcp")
    server, runs = make_server()
    await call_n(server, "flaky", 2)
    assert await listed(server) == ["healthy", "ask"]
    # A caller that kept the old list and calls it anyway gets the usual rejection.
    shown = await call_n(server, "flaky", 1)
    assert runs["flaky"] == 2 and UNAVAILABLE in shown[0]
    set_settings(load_settings(settings))  # switch off: the list is the server's again
    assert await listed(server) == ["flaky", "healthy", "ask"]
    set_settings(load_settings({**settings, "OTEL_BREAKER_HIDE_OPEN_TOOLS": "true"}))
    registry_clock.advance(61)  # past the cooldown: half-open, back for the probe
    assert await listed(server) == ["flaky", "healthy", "ask"]


def test_uninstrument_restores_exactly(instrument):
    names = ("call_tool_mcp", "list_tools")
    before = [ClientToolsMixin.__dict__[n] for n in names]
    instrumentor = instrument("fastmcp")
    assert all(ClientToolsMixin.__dict__[n] is not b for n, b in zip(names, before, strict=True))
    instrumentor.uninstrument()
    assert all(ClientToolsMixin.__dict__[n] is b for n, b in zip(names, before, strict=True))


def test_script_unguarded_baseline():
    out, _ = run_script(SCRIPT, script_env(), marker=REPORT)
    assert out["body_runs"] == 5
    assert not any(UNAVAILABLE in t for t in out["tool_results"])


def test_env_switch_guards_the_script():
    out, _ = run_script(
        SCRIPT, script_env(OTEL_BREAKER_ENABLED="true", OTEL_BREAKER_FAILURE_THRESHOLD="2"), marker=REPORT
    )
    assert out["body_runs"] == 2
    assert sum(UNAVAILABLE in t for t in out["tool_results"]) == 3


def test_opentelemetry_instrument_guards_the_script():
    env = script_env(
        OTEL_BREAKER_FAILURE_THRESHOLD="2",
        OTEL_TRACES_EXPORTER="console",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
    )
    out, stdout = run_script(SCRIPT, env, marker=REPORT, launch=launcher())
    assert out["body_runs"] == 2
    assert sum(UNAVAILABLE in t for t in out["tool_results"]) == 3
    assert stdout.count('"name": "execute_tool inventory"') == 5


@pytest.mark.parametrize("frameworks", [("mcp",), ("fastmcp",), BOTH], ids="+".join)
async def test_a_new_client_per_request_shares_the_servers_breaker(instrument, threshold_two, frameworks):
    # Five requests, each opening its own client to the same server and calling a dead
    # tool three times: the breaker follows the server's tool, not the client object.
    instrument(*frameworks)
    server, runs = make_server()
    shown = []
    for _request in range(5):
        shown.append(await call_n(server, "flaky", 3))
    assert runs["flaky"] == 2
    assert all(UNAVAILABLE in text for texts in shown[1:] for text in texts)
    (breaker,) = default_registry().find("flaky")
    assert breaker.source is not None and "demo-server" in breaker.source


async def test_a_new_client_per_request_is_unchanged_when_healthy(instrument, threshold_two):
    async def requests() -> tuple[list[list[str]], int]:
        server, runs = make_server()
        return [await call_n(server, "healthy", 3) for _ in range(5)], runs["healthy"]

    baseline = await requests()
    assert baseline[1] == 15
    instrument(*BOTH)
    assert await requests() == baseline
