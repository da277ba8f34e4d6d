"""A roots-capable client's roots reach the server behind the proxy, though the server
was connected before the client arrived.

The npm filesystem server asks its client for roots as it starts and again on
``notifications/roots/list_changed``, and then serves the roots instead of the folder on
its command line: the same server reached directly and through a listening proxy (which
connects it before any client can arrive) must end up allowing the client's folder.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import anyio
import mcp.types as types
import pytest

pytest.importorskip("mcp")

sys.path.append(str(Path(__file__).parents[1] / "mcp"))  # the real servers, shared with the MCP client suite

from mcp.client.client import Client
from proxy_support import breaker_env, stop
from reference_servers import filesystem_command, stdio, text_of

#: A bound on one scenario against real processes; never reached by a healthy run.
PATIENCE = 120.0


pytestmark = pytest.mark.usefixtures("quiet_logs")


async def allowed_after_connect(server, roots: list[Path]) -> str:
    """The folders the filesystem server allows once the client (with ``roots``) is connected."""

    async def list_roots(context) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=root.as_uri(), name=root.name) for root in roots])

    async with Client(server, mode="legacy", list_roots_callback=list_roots) as client:
        with anyio.fail_after(PATIENCE):
            while True:  # the server updates its folders when the roots answer arrives
                allowed = text_of(await client.call_tool("list_allowed_directories", {}))
                if str(roots[0]) in allowed:
                    return allowed
                await anyio.sleep(0.05)


async def test_the_clients_roots_reach_a_server_that_asked_for_them_before_any_client(tmp_path):
    command_line, client_root = tmp_path / "command-line", tmp_path / "client-root"
    command_line.mkdir()
    client_root.mkdir()
    command = filesystem_command(command_line)
    direct = await allowed_after_connect(stdio(command, env=breaker_env()), [client_root])
    assert str(client_root) in direct and str(command_line) not in direct
    # Over HTTP the proxy serves only once its server is connected and initialized: the
    # server has asked for roots before any client could connect.
    errors = tmp_path / "proxy-stderr.txt"
    with open(errors, "w") as stderr:
        proxy = subprocess.Popen(
            [sys.executable, "-m", "otel_breaker", "mcp-proxy", "--listen", "127.0.0.1:0", "--", *command],
            env=breaker_env(),
            stdin=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        url = await announced(errors, proxy)
        proxied = await allowed_after_connect(url, [client_root])
    finally:
        stop(proxy)
    assert proxied == direct


async def announced(errors: Path, proxy: subprocess.Popen) -> str:
    with anyio.fail_after(PATIENCE):
        while True:
            match = re.search(r"serving MCP at (http://\S+)", errors.read_text())
            if match:
                return match.group(1)
            assert proxy.poll() is None, errors.read_text()
            await anyio.sleep(0.05)
