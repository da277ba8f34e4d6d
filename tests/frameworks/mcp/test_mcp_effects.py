"""Side effects and retries in-process, through the mcp adapter (docs/retries.md).

* a server's ``tools/list`` says which tools are read-only or destructive, and retries
  below the client follow it (the user's ``OTEL_BREAKER_TOOL_EFFECTS`` winning). Real
  MCP client and server (in-process transport); each tool fails once with the server's
  own error answer (``isError``: "HTTP Error 503"), then answers;
* with a real server subprocess (stdio, ``../mcp_proxy/effects_server.py``, whose tools
  announce their side effects): a read-only tool whose backend stays down is retried and
  its last ``isError`` answer says how many attempts were made; a destructive tool that
  times out, or whose server answers a gateway timeout, runs once and reads "outcome
  unknown" as an ``isError`` result; a half-open server is pinged before a destructive
  call reaches it, and a read-only call is the probe itself.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from effects_backend import EFFECTS_SERVER, OUTCOME_UNKNOWN, THREE_ATTEMPTS, Backend, Runs, serving_backend
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import TextContent, ToolAnnotations

from otel_breaker import effects, retry_policy, upstream
from otel_breaker.breaker import State
from otel_breaker.config import load_settings, set_settings
from otel_breaker.registry import default_registry

SERVER_ID = "effects-server@1.0.0"
UNAVAILABLE = "is temporarily unavailable"
#: The client's read timeout of a call the server never finishes: generous for a busy machine.
READ_TIMEOUT = 3.0


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


# -- a real server subprocess -------------------------------------------------------------


@pytest.fixture
def pages() -> Iterator[Backend]:
    with serving_backend() as backend:
        yield backend


@pytest.fixture
def runs(tmp_path: Path) -> Runs:
    return Runs(tmp_path / "runs.txt")


def server(runs: Runs, **client: float) -> Client:
    params = StdioServerParameters(command=sys.executable, args=[str(EFFECTS_SERVER), "--runs", str(runs.path)])
    return Client(params, **client)


def text(result) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


def settings(**env: str) -> None:
    set_settings(load_settings({f"OTEL_BREAKER_{k.upper()}": v for k, v in env.items()}))


async def test_a_read_only_tool_that_stays_down_reads_its_last_answer_with_the_attempts(
    instrument, pages: Backend, runs: Runs
):
    settings(retry="transient", failure_threshold="50")
    instrument("mcp")
    async with server(runs) as client:
        await client.list_tools()
        result = await client.call_tool("fetch_page", {"url": f"{pages.url}/down/page"})
    assert result.is_error and "HTTP Error 503" in text(result) and text(result).endswith(THREE_ATTEMPTS)
    assert runs.of("fetch_page") == pages.hits["/down/page"] == 3, "read-only by its annotation: retried twice"


async def test_without_retries_the_answer_is_the_servers_own(instrument, pages: Backend, runs: Runs):
    async with server(runs) as client:
        await client.list_tools()
        alone = await client.call_tool("fetch_page", {"url": f"{pages.url}/down/alone"})
    settings(failure_threshold="50")
    instrument("mcp")
    async with server(runs) as client:
        await client.list_tools()
        guarded = await client.call_tool("fetch_page", {"url": f"{pages.url}/down/guarded"})
    assert text(guarded).replace("guarded", "alone") == text(alone) and guarded.is_error
    assert runs.of("fetch_page") == 2


@pytest.mark.parametrize(
    "env",
    [{}, {"retry": "transient"}, {"retry": "transient", "retry_attempts": "10", "failure_threshold": "50"}],
    ids=["retries-off", "retries-on", "ten-attempts"],
)
@pytest.mark.parametrize("timeout", ["client", "breaker"])
async def test_a_destructive_tool_that_times_out_runs_once_and_reads_outcome_unknown(
    env: dict[str, str], timeout: str, instrument, runs: Runs
):
    """The client's read timeout (an MCP error) or the breaker's own: never run again,
    and answered as MCP answers a failed tool, an ``isError`` result."""
    settings(**env, **({"timeout": str(READ_TIMEOUT)} if timeout == "breaker" else {}))
    instrument("mcp")
    client_options = {"read_timeout_seconds": READ_TIMEOUT} if timeout == "client" else {}
    async with server(runs, **client_options) as client:
        await client.list_tools()
        result = await client.call_tool("post_message", {"text": "standup moved to 10:30"})
    assert result.is_error and OUTCOME_UNKNOWN in text(result), text(result)
    assert runs.of("post_message") == 1, "a destructive tool is never run twice by us"


async def test_a_destructive_tools_gateway_timeout_answer_reads_outcome_unknown(instrument, pages: Backend, runs: Runs):
    """The server's own ``isError`` answer that says a gateway timed out: the request may
    have been served. The user's word makes the fetch destructive (it wins over the annotation)."""
    settings(retry="transient", tool_effects="fetch_page=destructive")
    instrument("mcp")
    async with server(runs) as client:
        await client.list_tools()
        result = await client.call_tool("fetch_page", {"url": f"{pages.url}/gateway/pay"})
        again = await client.call_tool("fetch_page", {"url": f"{pages.url}/gateway/pay"})
    assert result.is_error and OUTCOME_UNKNOWN in text(result) and "HTTP Error 504" in text(result)
    assert again.is_error and OUTCOME_UNKNOWN in text(again), "calling again after checking is no loop"
    assert runs.of("fetch_page") == 2, "once per call of the model"


async def _open_the_upstream(runs: Runs) -> None:
    """Kill the server under a client and call until its upstream breaker opens."""
    async with server(runs) as client:
        await client.list_tools()
        pid = int(text(await client.call_tool("pid", {})))
        os.kill(pid, signal.SIGKILL)
        for _ in range(2):  # failure_threshold: the transport failures of the dead server
            try:
                await client.call_tool("pid", {})
            except Exception:
                pass
    assert upstream.breaker_of(default_registry(), SERVER_ID).state is State.OPEN


@pytest.fixture
def probing(registry_clock):
    """Two transport failures open a server's upstream; two answered probes close it."""
    settings(failure_threshold="2", success_threshold="2", recovery_timeout="30")
    return registry_clock


async def test_a_half_open_server_is_pinged_before_a_destructive_call(instrument, probing, runs: Runs):
    instrument("mcp")
    await _open_the_upstream(runs)
    probing.advance(31)
    breaker = upstream.breaker_of(default_registry(), SERVER_ID)
    assert breaker.state is State.HALF_OPEN
    async with server(runs) as client:  # the server is back (same name@version)
        await client.list_tools()
        sent = await client.call_tool("send_message", {"text": "ship it"})
    assert not sent.is_error and text(sent) == "sent" and runs.of("send_message") == 1
    # Two probes close the upstream (success_threshold=2): pings did, before the send;
    # had the send been the probe, the upstream would still be half-open after it.
    assert breaker.state is State.CLOSED


async def test_a_failed_ping_reopens_the_upstream_and_the_destructive_call_never_goes_out(
    instrument, probing, runs: Runs
):
    instrument("mcp")
    await _open_the_upstream(runs)
    probing.advance(31)
    async with server(runs) as client:
        await client.list_tools()
        pid = await client.call_tool("pid", {})  # read-only: one probe of the two, answered
        os.kill(int(text(pid)), signal.SIGKILL)
        sent = await client.call_tool("send_message", {"text": "ship it"})
    breaker = upstream.breaker_of(default_registry(), SERVER_ID)
    assert breaker.state is State.OPEN, "the ping's transport failure counted for the upstream"
    assert sent.is_error and UNAVAILABLE in text(sent) and f"upstream '{SERVER_ID}'" in text(sent), text(sent)
    assert OUTCOME_UNKNOWN not in text(sent), "the send never reached the dead server"
    assert runs.of("send_message") == 0


async def test_a_read_only_call_to_a_half_open_server_is_the_probe_itself(instrument, probing, runs: Runs):
    instrument("mcp")
    await _open_the_upstream(runs)
    probing.advance(31)
    breaker = upstream.breaker_of(default_registry(), SERVER_ID)
    async with server(runs) as client:
        await client.list_tools()
        answer = await client.call_tool("pid", {})
    assert not answer.is_error
    assert breaker.state is State.HALF_OPEN, "no ping: the read-only call was one probe of two"
