"""Outcomes of real MCP servers through ``otel-breaker mcp-proxy``, compared with the
same server reached directly: where no tool is broken, every answer is the one the
client gets without the proxy; a broken one still opens the breaker on time.

Servers: the npm filesystem server, the git reference server from PyPI, and the
polling server of the MCP client suite (``tests/frameworks/mcp/polling_server.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")
pytest.importorskip("mcp_server_git")

sys.path.append(str(Path(__file__).parents[1] / "mcp"))  # the real servers, shared with the MCP client suite

from mcp.client.client import Client
from proxy_support import THRESHOLD, breaker_env
from reference_servers import (
    allowed_folder,
    answer,
    answers,
    filesystem_command,
    git_command,
    git_repository,
    kill_filesystem_server,
    missing_reads,
    outside_reads,
    polling_command,
    stdio,
)

UNAVAILABLE = "is temporarily unavailable"
#: A bound on one scenario against real processes; never reached by a healthy run.
PATIENCE = 180.0


pytestmark = pytest.mark.usefixtures("quiet_logs")


@pytest.fixture
def allowed(tmp_path: Path) -> Path:
    return allowed_folder(tmp_path / "allowed")


def through_proxy(command: list[str], *proxy_args: str, env: dict[str, str] | None = None):
    """``command`` behind ``otel-breaker mcp-proxy`` over stdio."""
    return stdio(
        [sys.executable, "-m", "otel_breaker", "mcp-proxy", *proxy_args, "--", *command],
        env=env if env is not None else breaker_env(),
    )


async def direct_and_proxied(command: list[str], calls):
    """The answers of the server reached directly, then through the proxy (a new server process each)."""
    with anyio.fail_after(PATIENCE):
        direct = await answers(stdio(command, env=breaker_env()), calls)
    with anyio.fail_after(PATIENCE):
        proxied = await answers(through_proxy(command), calls)
    return direct, proxied


# -- where no tool is broken, nothing changes ---------------------------------------------------


async def test_missing_paths_then_a_file_that_exists(allowed):
    calls = [*missing_reads(allowed), ("read_text_file", {"path": str(allowed / "exists.txt")})]
    direct, proxied = await direct_and_proxied(filesystem_command(allowed), calls)
    assert proxied == direct
    assert all(is_error and "ENOENT" in text for is_error, text in direct[:-1])
    assert direct[-1] == (False, "hello\n")


async def test_reads_outside_the_allowed_folder_are_neutral(allowed):
    calls = [*outside_reads(), ("read_text_file", {"path": str(allowed / "exists.txt")})]
    direct, proxied = await direct_and_proxied(filesystem_command(allowed), calls)
    assert proxied == direct
    assert all("outside allowed directories" in text for _, text in direct[:-1])
    assert direct[-1] == (False, "hello\n")


async def test_git_server_missing_paths_and_a_repository_outside(tmp_path):
    repository = git_repository(tmp_path / "repo")
    shows = [("git_show", {"repo_path": str(repository), "revision": f"HEAD:missing-{i}.txt"}) for i in range(6)]
    outside = [("git_status", {"repo_path": str(tmp_path / f"elsewhere-{i}")}) for i in range(6)]
    exists = ("git_show", {"repo_path": str(repository), "revision": "HEAD:exists.txt"})
    direct, proxied = await direct_and_proxied(git_command(repository), [*shows, *outside, exists])
    assert proxied == direct
    assert direct[-1] == (False, "hello from git\n")


async def test_polling_a_job_that_is_not_found_yet_reaches_done():
    calls = [("job", {"id": "42"})] * 6
    direct, proxied = await direct_and_proxied(polling_command(), calls)
    assert proxied == direct
    assert direct[0] == (True, "raised -32602: job 42 not found")
    assert direct[-1] == (False, "done")


async def test_a_listed_tool_answering_tool_not_found_is_no_unknown_tool():
    calls = [("describe", {"tool_name": "nope"})] * 6 + [("describe", {"tool_name": "search"})]
    direct, proxied = await direct_and_proxied(polling_command(), calls)
    assert proxied == direct
    assert direct[0] == (True, "Tool not found: nope")
    assert direct[-1] == (False, "search: finds documents")


# -- a broken tool or server still opens on time --------------------------------------------------


async def test_a_tool_that_always_fails_the_same_way_opens_within_the_threshold():
    calls = [("broken", {"text": f"try {i}"}) for i in range(THRESHOLD + 2)]
    with anyio.fail_after(PATIENCE):
        got = await answers(through_proxy(polling_command()), calls)
    assert all(text.endswith("the flux capacitor is misaligned") for _, text in got[:THRESHOLD])
    assert all(is_error and UNAVAILABLE in text for is_error, text in got[THRESHOLD:])


async def test_a_rate_limit_opens_the_server_for_its_retry_after():
    with anyio.fail_after(PATIENCE):
        first, second = await answers(through_proxy(polling_command()), [("limited", {}), ("limited", {})])
    assert first == (True, "raised -32023: rate limited")
    assert second[0] and UNAVAILABLE in second[1] and "about 30s" in second[1]


async def test_an_override_counts_what_the_rules_call_a_mistake(allowed):
    """``OTEL_BREAKER_FAILURE_ERRORS`` with ``@server``: this server's ENOENT counts."""
    env = breaker_env(OTEL_BREAKER_FAILURE_ERRORS="@secure-filesystem-server*=ENOENT")
    calls = missing_reads(allowed, THRESHOLD + 1)
    with anyio.fail_after(PATIENCE):
        got = await answers(through_proxy(filesystem_command(allowed), env=env), calls)
    assert all("ENOENT" in text for _, text in got[:THRESHOLD])
    assert UNAVAILABLE in got[THRESHOLD][1]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the server's process in /proc (Linux)")
async def test_a_killed_filesystem_server_opens_within_the_threshold(allowed):
    exists = ("read_text_file", {"path": str(allowed / "exists.txt")})
    # Restarted only after a minute: the server stays down while the test calls.
    server = through_proxy(filesystem_command(allowed), "--restart-delay", "60", "--max-restart-delay", "60")
    with anyio.fail_after(PATIENCE):
        async with Client(server, mode="legacy") as client:
            await client.list_tools()
            assert await answer(client, exists) == (False, "hello\n")
            kill_filesystem_server()
            got = [await answer(client, exists) for _ in range(THRESHOLD + 2)]
    assert all(is_error for is_error, _ in got)
    assert all(UNAVAILABLE in text for _, text in got[THRESHOLD:]), got


def test_an_override_pattern_that_does_not_compile_stops_the_start():
    env = breaker_env(OTEL_BREAKER_NEUTRAL_ERRORS="@secure-filesystem-server*=ENOENT(")
    done = subprocess.run(
        [sys.executable, "-m", "otel_breaker", "mcp-proxy", "--", *polling_command()],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "OTEL_BREAKER_NEUTRAL_ERRORS" in line and "ENOENT(" in line and "does not compile" in line


async def test_a_config_entry_counts_what_the_rules_call_a_mistake(allowed, tmp_path):
    """``"failureErrors"`` in a ``--config`` entry: that server's ENOENT counts, as
    ``OTEL_BREAKER_FAILURE_ERRORS`` with ``@server`` does."""
    command = filesystem_command(allowed)
    config = tmp_path / "servers.json"
    entry = {"command": command[0], "args": command[1:], "failureErrors": "ENOENT"}
    config.write_text(json.dumps({"mcpServers": {"files": entry}}))
    proxy = stdio([sys.executable, "-m", "otel_breaker", "mcp-proxy", "--config", str(config)], env=breaker_env())
    calls = missing_reads(allowed, THRESHOLD + 1)
    with anyio.fail_after(PATIENCE):
        got = await answers(proxy, calls)
    assert all("ENOENT" in text for _, text in got[:THRESHOLD])
    assert UNAVAILABLE in got[THRESHOLD][1]
