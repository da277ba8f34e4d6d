"""The proxy in both protocol eras of MCP, on both sides: the four pairings.

A client of the handshake era (``initialize``) or of 2026-07-28 (``server/discover``,
an envelope per request, ``subscriptions/listen``) talks to the proxy, which fronts a
server that speaks only the handshake era or only 2026-07-28 (era_server.py, real
processes). In every pairing, over stdio and over HTTP: the tools are listed and
called, the failing tool's breaker opens (the rejection answer), an open tool leaves
the list and comes back with a change notice in the client's era, and the status
endpoint shows the breakers. The SDK's own client is pinned to each era.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from proxy_scenarios import (
    PATIENCE,
    UNAVAILABLE,
    ListChanges,
    assert_breaker_stopped_it,
    hidden_tool_leaves_and_returns,
    six_failing_calls,
    text,
    tool_names,
)
from proxy_support import announced_url, breaker_env, free_port, stop, wait_for_port
from proxy_wire import status_rows

sys.path.append(str(Path(__file__).parents[1] / "mcp"))  # the real servers, shared with the MCP client suite

from reference_servers import filesystem_command

ERA_SERVER = Path(__file__).with_name("era_server.py")
CLIENT_ERAS = ("legacy", "2026-07-28")  # the SDK client's mode: the handshake, or 2026-07-28 pinned
SERVER_ERAS = ("handshake", "2026-07-28")
IDENTITY = "era-server@1.0.0"
HIDING = {"OTEL_BREAKER_HIDE_OPEN_TOOLS": "true", "OTEL_BREAKER_RECOVERY_TIMEOUT": "2"}
FAST_WATCH = ("--watch-interval", "0.05")

pairings = pytest.mark.parametrize(
    ("client_era", "server_era"), [(c, s) for c in CLIENT_ERAS for s in SERVER_ERAS], ids=lambda era: era
)


pytestmark = pytest.mark.usefixtures("quiet_logs")


@pytest.fixture
def runs_file(tmp_path: Path) -> Path:
    return tmp_path / "runs.txt"


def era_server(era: str, *args: str) -> list[str]:
    return [sys.executable, str(ERA_SERVER), "--era", era, *args]


@pytest.fixture
def proxies():
    """Start the proxy in front of a command or URL, over stdio (the client starts it)
    or HTTP (started here): what the client connects to."""
    started: list[subprocess.Popen] = []

    def start(transport: str, upstream: list[str], env: dict[str, str], proxy_args: tuple[str, ...] = ()) -> Any:
        command = ["-m", "otel_breaker", "mcp-proxy", *proxy_args, *upstream]
        if transport == "stdio":
            return StdioServerParameters(command=sys.executable, args=command, env=env)
        proc = subprocess.Popen(
            [sys.executable, *command[:3], "--listen", "127.0.0.1:0", *command[3:]],
            env=env,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        return announced_url(proc)

    yield start
    for proc in started:
        stop(proc)


@pytest.fixture
def http_era_server():
    """An era server over streamable HTTP: its URL."""
    started: list[subprocess.Popen] = []

    def start(era: str, *args: str) -> str:
        port = free_port()
        proc = subprocess.Popen(era_server(era, "--http", str(port), *args), stderr=subprocess.DEVNULL)
        started.append(proc)
        wait_for_port(port, proc)
        return f"http://127.0.0.1:{port}/mcp"

    yield start
    for proc in started:
        stop(proc)


@contextlib.asynccontextmanager
async def connect(target: Any, client_era: str, **kwargs: Any) -> AsyncIterator[Client]:
    async with Client(target, mode=client_era, read_timeout_seconds=PATIENCE, **kwargs) as client:
        yield client


def in_era(client: Client, client_era: str) -> bool:
    """Whether the client speaks the era it was pinned to, with the proxy."""
    if client_era == "legacy":
        return client.session.initialize_result is not None and client.protocol_version != "2026-07-28"
    return client.protocol_version == "2026-07-28" and client.session.initialize_result is None


def status(port: int) -> dict[str, dict]:
    return {row["tool"]: row for row in status_rows(port)}


async def status_when(port: int, tool: str, state: str) -> dict[str, dict]:
    """The status endpoint answers from the board's snapshot of the last second: wait for it."""
    with anyio.fail_after(PATIENCE):
        while True:
            rows = status(port)
            if rows.get(tool, {}).get("state") == state:
                return rows
            await anyio.sleep(0.2)


async def list_call_open_and_status(client: Client, runs: Path, status_port: int) -> None:
    assert set(await tool_names(client)) == {"echo", "broken"}
    assert text(await client.call_tool("echo", {"text": "hi"})) == "echo: hi"
    results = await six_failing_calls(client)
    ran = len(runs.read_text().splitlines()) if runs.exists() else 0
    assert_breaker_stopped_it(results, ran)
    assert ran >= 1  # the tool really ran before its breaker opened
    assert text(await client.call_tool("echo", {"text": "still"})) == "echo: still"
    rows = await status_when(status_port, "broken", "open")
    assert rows["echo"]["state"] == "closed"
    assert rows[f"upstream:{IDENTITY}"]["state"] == "closed"


# -- the four pairings, over stdio and over HTTP ---------------------------------------------------------


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pairings
async def test_list_call_breaker_and_status(proxies, runs_file, transport, client_era, server_era):
    status_port = free_port()
    env = breaker_env(OTEL_BREAKER_STATUS_ADDR=f"127.0.0.1:{status_port}")
    target = proxies(transport, ["--", *era_server(server_era, "--runs", str(runs_file))], env)
    async with connect(target, client_era) as client:
        assert in_era(client, client_era)
        await list_call_open_and_status(client, runs_file, status_port)


class ListenChanges(ListChanges):
    """``ListChanges`` fed by a 2026-07-28 client's ``subscriptions/listen`` stream."""

    async def follow(self, subscription: Any) -> None:
        async for _event in subscription:
            self.count += 1


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pairings
async def test_open_tools_are_hidden_and_come_back(proxies, transport, client_era, server_era):
    target = proxies(transport, ["--", *era_server(server_era)], breaker_env(**HIDING), FAST_WATCH)
    if client_era == "legacy":
        changes = ListChanges()
        async with connect(target, client_era, message_handler=changes) as client:
            assert client.session.server_capabilities.tools.list_changed
            await hidden_tool_leaves_and_returns(client, changes)
        return
    changes = ListenChanges()
    async with connect(target, client_era) as client, client.listen(tools_list_changed=True) as subscription:
        assert subscription.honored.tools_list_changed
        async with anyio.create_task_group() as group:
            group.start_soon(changes.follow, subscription)
            await hidden_tool_leaves_and_returns(client, changes)
            group.cancel_scope.cancel()


# -- the proxy's clients of 2026-07-28 discover it; its servers over HTTP ----------------------------------


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("server_era", SERVER_ERAS)
async def test_a_new_protocol_client_discovers_the_server_behind_the_proxy(proxies, transport, server_era):
    target = proxies(transport, ["--", *era_server(server_era)], breaker_env())
    async with connect(target, "auto") as client:  # the SDK's negotiation: server/discover first
        discovered = client.session.discover_result
        assert discovered is not None and "2026-07-28" in discovered.supported_versions
        assert client.server_info is not None and client.server_info.name == "era-server"
        assert client.session.instructions == f"Speaks only the {server_era} era."
        assert client.server_capabilities.tools is not None and client.server_capabilities.tools.list_changed
        assert text(await client.call_tool("echo", {"text": "found"})) == "echo: found"


@pairings
async def test_an_http_server_of_either_era_is_fronted(proxies, http_era_server, runs_file, client_era, server_era):
    url = http_era_server(server_era, "--runs", str(runs_file))
    status_port = free_port()
    env = breaker_env(OTEL_BREAKER_STATUS_ADDR=f"127.0.0.1:{status_port}")
    async with connect(proxies("stdio", ["--upstream", url], env), client_era) as client:
        assert in_era(client, client_era)
        await list_call_open_and_status(client, runs_file, status_port)


@pytest.mark.parametrize("client_era", CLIENT_ERAS)
async def test_the_npm_filesystem_server_is_fronted_for_a_client_of_either_era(proxies, tmp_path, client_era):
    """The npm reference servers speak only the handshake era (their TypeScript SDK, 1.32,
    knows no 2026-07-28): a client of either era reaches one through the proxy. Its missing
    files are counted here (an override), so its breaker opens."""
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "exists.txt").write_text("here", encoding="utf-8")
    status_port = free_port()
    env = breaker_env(
        OTEL_BREAKER_FAILURE_ERRORS="@secure-filesystem-server*=ENOENT",
        OTEL_BREAKER_STATUS_ADDR=f"127.0.0.1:{status_port}",
    )
    async with connect(proxies("stdio", ["--", *filesystem_command(allowed)], env), client_era) as client:
        assert in_era(client, client_era)
        assert "read_text_file" in await tool_names(client)
        assert "here" in text(await client.call_tool("read_text_file", {"path": str(allowed / "exists.txt")}))
        missing = [str(allowed / f"missing-{i}.txt") for i in range(6)]
        results = [await client.call_tool("read_text_file", {"path": path}) for path in missing]
        assert all(result.is_error for result in results)
        assert UNAVAILABLE in text(results[-1])
        await status_when(status_port, "read_text_file", "open")


async def test_the_era_servers_speak_only_their_era():
    """The servers the pairings use are pinned: the SDK client of the other era is refused."""
    for era, wrong in (("handshake", "2026-07-28"), ("2026-07-28", "legacy")):
        server = StdioServerParameters(command=sys.executable, args=era_server(era)[1:], env=breaker_env())
        try:
            async with connect(server, wrong) as client:
                await client.list_tools()
        except BaseException as exc:  # the SDK's task groups wrap the error answer
            assert isinstance(innermost(exc), MCPError), repr(exc)
        else:
            raise AssertionError(f"a {wrong} client was served by the {era} server")


def innermost(exc: BaseException) -> BaseException:
    inner = getattr(exc, "exceptions", None)  # an exception group (anyio's task groups)
    while inner:
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    return exc
