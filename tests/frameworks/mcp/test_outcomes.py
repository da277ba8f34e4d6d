"""Outcomes of real MCP servers through the in-process MCP client adapter, with
otel-breaker on and off: where no tool is broken, every answer is the one the
client gets without us; a broken one still opens the breaker on time.

Servers: the npm filesystem server, the git reference server from PyPI, and the
polling server of this folder (``polling_server.py``).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")
pytest.importorskip("mcp_server_git")

from mcp.client.client import Client
from polling_server import NOT_FOUND_LOOKS, RETRY_AFTER_SECONDS, build
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
    stdio,
)

from otel_breaker.registry import default_registry

UNAVAILABLE = "is temporarily unavailable"
THRESHOLD = 5  # the default failure_threshold
#: A bound on one scenario against real processes; never reached by a healthy run.
PATIENCE = 120.0


pytestmark = pytest.mark.usefixtures("quiet_logs")


@pytest.fixture
def allowed(tmp_path: Path) -> Path:
    return allowed_folder(tmp_path / "allowed")


def breaker_states(tool: str) -> list[str]:
    return [str(b.state.value if hasattr(b.state, "value") else b.state) for b in default_registry().find(tool)]


async def on_and_off(instrument, server_of, calls):
    """The answers without otel-breaker, then with it (a new server process or object each time)."""
    with anyio.fail_after(PATIENCE):
        off = await answers(server_of(), calls)
    instrument("mcp")
    with anyio.fail_after(PATIENCE):
        on = await answers(server_of(), calls)
    return off, on


# -- where no tool is broken, nothing changes ---------------------------------------------------


async def test_missing_paths_then_a_file_that_exists(instrument, allowed):
    exists = ("read_text_file", {"path": str(allowed / "exists.txt")})
    calls = [*missing_reads(allowed), exists]
    off, on = await on_and_off(instrument, lambda: stdio(filesystem_command(allowed)), calls)
    assert on == off
    assert all(is_error and "ENOENT" in text for is_error, text in off[:-1])
    assert off[-1] == (False, "hello\n")
    assert "open" not in breaker_states("read_text_file")


async def test_reads_outside_the_allowed_folder_are_neutral(instrument, allowed):
    exists = ("read_text_file", {"path": str(allowed / "exists.txt")})
    calls = [*outside_reads(), exists]
    off, on = await on_and_off(instrument, lambda: stdio(filesystem_command(allowed)), calls)
    assert on == off
    assert all(is_error and "outside allowed directories" in text for is_error, text in off[:-1])
    assert off[-1] == (False, "hello\n")


async def test_git_server_missing_paths_and_a_repository_outside(instrument, tmp_path):
    repository = git_repository(tmp_path / "repo")
    shows = [("git_show", {"repo_path": str(repository), "revision": f"HEAD:missing-{i}.txt"}) for i in range(6)]
    outside = [("git_status", {"repo_path": str(tmp_path / f"elsewhere-{i}")}) for i in range(6)]
    exists = ("git_show", {"repo_path": str(repository), "revision": "HEAD:exists.txt"})
    calls = [*shows, *outside, exists]
    off, on = await on_and_off(instrument, lambda: stdio(git_command(repository)), calls)
    assert on == off
    assert all("not found" in text for _, text in off[:6])
    assert all("outside the allowed repository" in text for _, text in off[6:12])
    assert off[-1] == (False, "hello from git\n")


async def test_polling_a_job_that_is_not_found_yet_reaches_done(instrument):
    calls = [("job", {"id": "42"})] * (NOT_FOUND_LOOKS + 1)
    off, on = await on_and_off(instrument, build, calls)
    assert on == off
    assert off[:NOT_FOUND_LOOKS] == [(True, "raised -32602: job 42 not found")] * NOT_FOUND_LOOKS
    assert off[-1] == (False, "done")


async def test_a_listed_tool_answering_tool_not_found_is_no_unknown_tool(instrument):
    calls = [("describe", {"tool_name": "nope"})] * 6 + [("describe", {"tool_name": "search"})]
    off, on = await on_and_off(instrument, build, calls)
    assert on == off
    assert off[0] == (True, "Tool not found: nope")
    assert off[-1] == (False, "search: finds documents")


# -- a broken tool still opens on time ------------------------------------------------------------


async def test_a_tool_that_always_fails_the_same_way_opens_within_the_threshold(instrument):
    instrument("mcp")
    calls = [("broken", {"text": f"try {i}"}) for i in range(THRESHOLD + 2)]
    with anyio.fail_after(PATIENCE):
        got = await answers(build(), calls)
    assert all(is_error and text.endswith("the flux capacitor is misaligned") for is_error, text in got[:THRESHOLD])
    assert all(is_error and UNAVAILABLE in text for is_error, text in got[THRESHOLD:])


async def test_a_rate_limit_opens_the_server_for_its_retry_after(instrument, registry_clock):
    """-32023 with ``retryAfter`` in its data: the server said when to come back, so every
    tool behind it (its upstream breaker) waits that long; the next call is not made."""
    instrument("mcp")
    with anyio.fail_after(PATIENCE):
        first, second = await answers(build(), [("limited", {}), ("limited", {})])
    assert first == (True, "raised -32023: rate limited")
    assert second[0] and UNAVAILABLE in second[1] and f"about {RETRY_AFTER_SECONDS}s" in second[1]
    (upstream,) = default_registry().find("upstream:polling-server@1.0.0")
    assert upstream.retry_after == pytest.approx(RETRY_AFTER_SECONDS)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the server's process in /proc (Linux)")
async def test_a_killed_filesystem_server_opens_within_the_threshold(instrument, allowed):
    instrument("mcp")
    exists = ("read_text_file", {"path": str(allowed / "exists.txt")})
    with anyio.fail_after(PATIENCE):
        async with Client(stdio(filesystem_command(allowed)), mode="legacy") as client:
            await client.list_tools()
            assert await answer(client, exists) == (False, "hello\n")
            kill_filesystem_server()
            got = [await answer(client, exists) for _ in range(THRESHOLD + 2)]
    assert all(is_error for is_error, _ in got)
    assert all(UNAVAILABLE in text for _, text in got[THRESHOLD:]), got
