"""Real MCP servers for the outcome tests, started as a user starts them: the npm
filesystem server (``@modelcontextprotocol/server-filesystem``), the git reference
server from PyPI (``mcp-server-git``) and the polling server of this folder.

The npm package is installed once into a cache folder (``OTEL_BREAKER_TEST_NPM_CACHE``,
else ``~/.cache/otel-breaker-tests/npm``) and run from there, so a test does not wait
for ``npx`` to ask the registry each time.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import TextContent

FILESYSTEM_PACKAGE = "@modelcontextprotocol/server-filesystem@2026.8.31"
POLLING_SERVER = Path(__file__).with_name("polling_server.py")
#: Generous: a busy two-core machine starts node and Python servers slowly.
NPM_INSTALL_SECONDS = 600

Call = tuple[str, dict[str, Any]]
Answer = tuple[bool, str]


def npm_cache() -> Path:
    configured = os.environ.get("OTEL_BREAKER_TEST_NPM_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "otel-breaker-tests" / "npm"


def filesystem_server_executable() -> Path:
    """The filesystem server's executable, installed into the cache folder on first use
    (under a lock: parallel test processes install it once)."""
    if shutil.which("npx") is None or shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip("the npm filesystem server needs Node.js: install Debian's nodejs and npm packages")
    prefix = npm_cache()
    executable = prefix / "node_modules" / ".bin" / "mcp-server-filesystem"
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not executable.exists():
            done = subprocess.run(
                ["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", FILESYSTEM_PACKAGE],
                capture_output=True,
                text=True,
                timeout=NPM_INSTALL_SECONDS,
            )
            if done.returncode != 0 or not executable.exists():
                pytest.fail(f"npm could not install {FILESYSTEM_PACKAGE}: {done.stderr[-2000:]}")
    return executable


def filesystem_command(allowed: Path) -> list[str]:
    """The command that starts the filesystem server confined to ``allowed``."""
    return [str(filesystem_server_executable()), str(allowed)]


def git_command(repository: Path) -> list[str]:
    """The command that starts the git server confined to ``repository``."""
    return [sys.executable, "-m", "mcp_server_git", "--repository", str(repository)]


def polling_command() -> list[str]:
    return [sys.executable, str(POLLING_SERVER)]


def stdio(command: Sequence[str], env: dict[str, str] | None = None) -> StdioServerParameters:
    return StdioServerParameters(command=command[0], args=list(command[1:]), env=env)


def git_repository(folder: Path) -> Path:
    """A git repository with one commit holding ``exists.txt``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "exists.txt").write_text("hello from git\n")
    identity = ["-c", "user.name=Test", "-c", "user.email=test@example.com"]
    for args in (["init", "-q"], ["add", "exists.txt"], [*identity, "commit", "-q", "-m", "first"]):
        subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True, timeout=60)
    return folder


def allowed_folder(folder: Path) -> Path:
    """The filesystem server's one allowed folder, holding ``exists.txt``."""
    folder.mkdir(parents=True)
    (folder / "exists.txt").write_text("hello\n")
    return folder


def text_of(result: Any) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


async def answer(client: Client, call: Call) -> Answer:
    """What the client gets for one call: (``isError``, text), or the JSON-RPC error it raised."""
    name, arguments = call
    try:
        result = await client.call_tool(name, arguments)
    except Exception as exc:
        error = getattr(exc, "error", None)
        return True, f"raised {getattr(error, 'code', type(exc).__name__)}: {getattr(error, 'message', exc)}"
    return bool(result.is_error), text_of(result)


async def answers(server: Any, calls: Sequence[Call]) -> list[Answer]:
    """The answers to ``calls``, in one session (listing the tools first, as hosts do)."""
    async with Client(server, mode="legacy") as client:
        await client.list_tools()
        return [await answer(client, call) for call in calls]


def missing_reads(allowed: Path, count: int = 6) -> list[Call]:
    """Reads of paths that do not exist, a different one each time."""
    return [("read_text_file", {"path": str(allowed / f"missing-{i}.txt")}) for i in range(count)]


def outside_reads(count: int = 6) -> list[Call]:
    """Reads of paths outside the allowed folder, a different one each time."""
    return [("read_text_file", {"path": f"/etc/otel-breaker-outside-{i}.txt"}) for i in range(count)]


def _descendants(pid: int) -> list[int]:
    """The processes started by ``pid`` and by them, read from ``/proc`` (Linux)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, pending = [], [pid]
    while pending:
        parent = pending.pop()
        children = [child for child, of in parents.items() if of == parent]
        found.extend(children)
        pending.extend(children)
    return found


def kill_filesystem_server() -> None:
    """Kill the npm filesystem server this process started (directly or through a proxy)."""
    for pid in _descendants(os.getpid()):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        program, _, rest = command.partition(b"\0")
        if os.path.basename(program) == b"node" and b"mcp-server-filesystem" in rest:  # not the proxy naming it
            os.kill(pid, signal.SIGKILL)
            return
    raise AssertionError("the filesystem server process was not found")
