"""Where no tool is broken, an MCP client behaves exactly as it does without otel-breaker.

Each test runs the same calls with the adapter off and on and compares what
the client got back: the model's mistakes (unknown tool names, arguments the
schema rejects, invalid params), auth gates (-32042) and a healthy tool that
shares its name with a broken tool on another server are never rejected.
Both anyio backends (asyncio and trio) drive the client.
"""

from __future__ import annotations

import warnings

import anyio
import pytest

pytest.importorskip("mcp")

from mcp.client.client import Client
from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp.types import CallToolResult, ElicitRequestURLParams, TextContent, Tool

from otel_breaker.config import load_settings, set_settings
from otel_breaker.registry import default_registry

CALLS = 7


pytestmark = pytest.mark.usefixtures("quiet_logs")


@pytest.fixture(autouse=True)
def low_threshold():
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "3", "OTEL_BREAKER_RECOVERY_TIMEOUT": "600"}))


def search_server(name: str, broken: bool) -> MCPServer:
    server = MCPServer(name, version="1.0.0")

    @server.tool()
    def search(query: str) -> str:
        """Searches."""
        if broken:
            raise RuntimeError("index down")
        return f"{name}: results for {query}"

    @server.tool()
    def add(a: int, b: int) -> int:
        """Adds."""
        return a + b

    @server.tool()
    def login(user: str) -> str:
        """Needs the user to sign in in a browser first."""
        raise UrlElicitationRequiredError(
            [ElicitRequestURLParams(message="sign in", url="https://example.test/login", elicitation_id="e1")]
        )

    return server


def text(result: CallToolResult) -> tuple[bool, str]:
    return bool(result.is_error), "\n".join(c.text for c in result.content if isinstance(c, TextContent))


async def call_all(server: MCPServer, calls: list[tuple[str, dict]], listed: bool = False) -> list:
    """What the client got for each call: (is_error, text) or the raised error."""
    out: list = []
    async with Client(server) as client:
        if listed:
            await client.list_tools()
        for name, arguments in calls:
            try:
                out.append(text(await client.call_tool(name, arguments)))
            except MCPError as exc:
                out.append(("raised", exc.error.code, exc.error.message))
    return out


def off_then_on(instrument, run) -> tuple[list, list]:
    off = anyio.run(run)
    instrument("mcp")
    on = anyio.run(run)
    return off, on


def breaker_names() -> set[str]:
    return {b.name for b in default_registry().breakers()}


@pytest.mark.parametrize("listed", [False, True], ids=["unlisted", "listed"])
def test_unknown_tool_is_the_servers_answer_and_creates_no_breaker(instrument, otel, listed):
    calls = [("nope", {})] * CALLS
    off, on = off_then_on(instrument, lambda: call_all(search_server("s", broken=False), calls, listed))
    # The server's own answer, until the loop guard answers the 4th identical call (docs/loops.md).
    assert on[:3] == off[:3]
    assert all(r[0] is True and "Unknown tool: nope" in r[1] for r in off)
    assert all(r[0] is True and "no tool of that name exists" in r[1] for r in on[3:])
    assert "nope" not in breaker_names()
    assert otel.metric_value("otel_breaker.calls", gen_ai_tool_name="nope") == 0
    assert otel.tool_spans("nope") == []


def test_bad_arguments_are_the_models_mistake(instrument, otel):
    calls = [("add", {"a": "x", "b": 1})] * CALLS + [("add", {"a": 1, "b": 2})]
    off, on = off_then_on(instrument, lambda: call_all(search_server("s", broken=False), calls, listed=True))
    # The server's own answer, until the loop guard answers the 4th identical call (docs/loops.md).
    assert on[:3] == off[:3] and on[-1] == off[-1]
    assert all("this exact call, with the same arguments" in r[1] for r in on[3:CALLS])
    assert on[-1] == (False, "3")
    assert otel.metric_value("otel_breaker.calls", gen_ai_tool_name="add", otel_breaker_outcome="failure") == 0


def test_url_elicitation_required_is_an_auth_gate_not_a_failure(instrument, otel):
    calls = [("login", {"user": "u"})] * CALLS
    off, on = off_then_on(instrument, lambda: call_all(search_server("s", broken=False), calls, listed=True))
    assert on == off
    assert all(r[0] == "raised" and r[1] == -32042 for r in on)
    assert otel.metric_value("otel_breaker.calls", gen_ai_tool_name="login", otel_breaker_outcome="failure") == 0


def invalid_params_server() -> Server:
    """A low-level server that answers bad arguments with JSON-RPC invalid params."""

    async def list_tools(ctx, params):
        from mcp.types import ListToolsResult

        schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        return ListToolsResult(tools=[Tool(name="double", input_schema=schema)])

    async def call_tool(ctx, params):
        n = (params.arguments or {}).get("n")
        if not isinstance(n, int):
            raise MCPError(code=-32602, message="n must be an integer")
        return CallToolResult(content=[TextContent(type="text", text=str(2 * n))])

    return Server("strict", version="2.0", on_list_tools=list_tools, on_call_tool=call_tool)


def test_invalid_params_error_is_not_counted(instrument, otel):
    calls = [("double", {"n": "x"})] * CALLS + [("double", {"n": 4})]
    off, on = off_then_on(instrument, lambda: call_all(invalid_params_server(), calls, listed=True))
    assert on[-1] == off[-1] == (False, "8")
    assert all(r[:2] == ("raised", -32602) for r in off[:-1])
    # The server's own error, until the loop guard answers the 4th identical call (docs/loops.md)
    # in MCP's rejection form, an error result.
    assert on[:3] == off[:3]
    assert all(r[0] is True and "this exact call, with the same arguments" in r[1] for r in on[3:-1])


def input_required_server() -> Server:
    """A low-level server whose tool asks the client for input before it answers."""
    from mcp.types import InputRequiredResult, ListToolsResult

    async def list_tools(ctx, params):
        return ListToolsResult(tools=[Tool(name="confirm", input_schema={"type": "object"})])

    async def call_tool(ctx, params):
        return InputRequiredResult(request_state="waiting")

    return Server("asker", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)


def test_a_non_final_result_is_neither_success_nor_failure(instrument, otel):
    """``ClientSession.call_tool`` alone returning ``InputRequiredResult``: the logical call is
    not over, so it counts neither way, and the session gets the same result as without us."""

    async def run():
        async with Client(input_required_server()) as client:
            await client.list_tools()
            out = []
            for _ in range(CALLS):
                result = await client.session.call_tool("confirm", {}, allow_input_required=True)
                out.append((type(result).__name__, result.request_state))
            return out

    off, on = off_then_on(instrument, run)
    assert on == off == [("InputRequiredResult", "waiting")] * CALLS
    for outcome in ("success", "failure"):
        assert otel.metric_value("otel_breaker.calls", gen_ai_tool_name="confirm", otel_breaker_outcome=outcome) == 0
    assert otel.metric_value("otel_breaker.calls", gen_ai_tool_name="confirm", otel_breaker_outcome="ignored") == CALLS


def test_without_server_info_the_transport_is_the_source():
    from mcp.client.stdio import StdioServerParameters

    from otel_breaker.instrumentation.mcp_identity import server_identity

    class NoInfo:
        server_info = None

        def __init__(self, server):
            self.server = server

    url = NoInfo("http://127.0.0.1:9/mcp?token=secret")
    assert server_identity(url) == "http://127.0.0.1:9/mcp"
    stdio = NoInfo(StdioServerParameters(command="python", args=["-m", "search_server"]))
    assert server_identity(stdio) == "python -m search_server"
    assert server_identity(NoInfo(object())) is None


def test_same_tool_name_on_two_servers_has_two_breakers(instrument, otel):
    """A ``search`` that is down on one server never rejects another server's ``search``."""

    async def run():
        down, up = search_server("down-server", broken=True), search_server("up-server", broken=False)
        broken = await call_all(down, [("search", {"query": "q"})] * 5, listed=True)
        healthy = await call_all(up, [("search", {"query": "q"})] * 3, listed=True)
        return broken, healthy

    (_off_broken, off_healthy), (on_broken, on_healthy) = off_then_on(instrument, run)
    assert on_healthy == off_healthy == [(False, "up-server: results for q")] * 3
    assert "temporarily unavailable" in on_broken[-1][1], "the broken server's own breaker opened"
    sources = {(b.name, b.source) for b in default_registry().breakers()}
    assert {("search", "down-server@1.0.0"), ("search", "up-server@1.0.0")} <= sources
    spans = otel.tool_spans("search")
    assert {s.attributes.get("otel_breaker.tool.source") for s in spans} == {"down-server@1.0.0", "up-server@1.0.0"}
    duration = "gen_ai.execute_tool.duration"
    assert otel.metric_value(duration, gen_ai_tool_name="search", otel_breaker_tool_source="up-server@1.0.0") == 3


def test_two_sessions_to_the_same_server_share_a_breaker(instrument, otel):
    instrument("mcp")

    async def run():
        server = search_server("down-server", broken=True)
        first = await call_all(server, [("search", {"query": "q"})] * 3, listed=True)
        second = await call_all(server, [("search", {"query": "q"})], listed=True)
        return first, second

    first, second = anyio.run(run)
    assert "temporarily unavailable" not in first[-1][1]
    assert "temporarily unavailable" in second[0][1]


@pytest.mark.parametrize("timeout", [None, "5"], ids=["no-timeout", "timeout-5s"])
@pytest.mark.parametrize("backend", ["asyncio", "uvloop", "trio"])
def test_any_event_loop(instrument, otel, backend, timeout):
    """The client on both anyio backends (and asyncio on uvloop), with and without a tool
    timeout: the same results, no error of ours, no coroutine left un-awaited, a span per call."""
    pytest.importorskip(backend)
    options = {"use_uvloop": True} if backend == "uvloop" else {}
    backend = "asyncio" if backend == "uvloop" else backend
    if timeout is not None:
        set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "3", "OTEL_BREAKER_TIMEOUT": timeout}))
    calls = [("search", {"query": "q"})] * 6

    async def run():
        return await call_all(search_server("s", broken=False), calls)

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        off = anyio.run(run, backend=backend, backend_options=options)
        instrument("mcp")
        on = anyio.run(run, backend=backend, backend_options=options)
    assert on == off == [(False, "s: results for q")] * 6
    assert len(otel.tool_spans("search")) >= 5
    assert otel.metric_value("otel_breaker.calls", gen_ai_tool_name="search", otel_breaker_outcome="failure") == 0


def test_a_slow_tool_times_out_under_trio(instrument, otel):
    """An enabled timeout cancels the call on trio too, and counts it as a failure."""
    pytest.importorskip("trio")
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "3", "OTEL_BREAKER_TIMEOUT": "0.05"}))
    from otel_breaker.guards import ToolTimeoutError, default_guard
    from otel_breaker.toolcall import ToolCall

    async def slow():
        await anyio.sleep(5)
        return "late"

    async def run():
        with anyio.fail_after(3):  # proves it does not hang
            return await default_guard().acall(ToolCall("slow_tool", framework="mcp"), slow)

    with pytest.raises(ToolTimeoutError):
        anyio.run(run, backend="trio")
    assert otel.metric_value("otel_breaker.calls", gen_ai_tool_name="slow_tool", otel_breaker_outcome="failure") == 1


def test_status_block_names_the_server(instrument, otel):
    from otel_breaker.degrade import tool_status_block

    instrument("mcp")
    anyio.run(call_all, search_server("down-server", broken=True), [("search", {"query": "q"})] * 3, True)
    anyio.run(call_all, search_server("up-server", broken=False), [("search", {"query": "q"})], True)
    block = tool_status_block()
    assert "'search' on server 'down-server@1.0.0' (open)" in block
    assert "up-server" not in block
