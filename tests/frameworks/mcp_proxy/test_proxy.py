"""``otel-breaker mcp-proxy`` with real processes and the SDK's real client.

The sessions compared with a direct one are handshake sessions on both sides
(``mode="legacy"``); the 2026-07-28 era, on either side, is test_proxy_eras.py's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid

import anyio
import mcp.types as types
import pytest
from proxy_scenarios import (
    PATIENCE,
    UNAVAILABLE,
    ListChanges,
    assert_breaker_stopped_it,
    connect,
    healthy_session,
    hidden_tool_leaves_and_returns,
    six_failing_calls,
    text,
    tool_names,
)
from proxy_support import THRESHOLD, breaker_env, direct, free_port, proxied, proxy_with, server_command
from proxy_wire import HELLO, status_rows, stdio_proxy, wire

HIDING = {"OTEL_BREAKER_HIDE_OPEN_TOOLS": "true", "OTEL_BREAKER_RECOVERY_TIMEOUT": "2"}
FAST_WATCH = ("--watch-interval", "0.05")


pytestmark = pytest.mark.usefixtures("quiet_logs")


# -- over stdio --------------------------------------------------------------------------------------


async def test_a_healthy_session_is_the_direct_one():
    async with connect(proxied(), mode="legacy") as client:
        through_proxy = await healthy_session(client)
    async with connect(direct(), mode="legacy") as client:
        without = await healthy_session(client)
    assert through_proxy == without
    assert through_proxy["server_info"]["name"] == "proxy-test-server"
    assert through_proxy["echo"]["content"][0]["text"] == "echo: hello"


async def test_a_client_that_probes_the_new_protocol_era_is_served_in_it():
    async with connect(proxied()) as client:  # mode="auto": server/discover first
        assert client.session.discover_result is not None and client.protocol_version == "2026-07-28"
        assert (await client.call_tool("echo", {"text": "hi"})).content[0].text == "echo: hi"


async def test_the_failing_tool_runs_at_most_failure_threshold_times(runs):
    async with connect(proxied("--runs", str(runs.path))) as client:
        results = await six_failing_calls(client)
        echo = await client.call_tool("echo", {"text": "still here"})
    assert_breaker_stopped_it(results, runs.count())
    assert runs.count() == THRESHOLD
    assert not echo.is_error  # one tool's breaker, not the server's


async def test_unknown_tools_and_bad_arguments_are_neutral():
    async with connect(proxied()) as client:
        for _ in range(2 * THRESHOLD):
            unknown = await client.call_tool("no_such_tool", {})
            assert unknown.is_error and "Unknown tool" in text(unknown)
            bad = await client.call_tool("echo", {"wrong": 1})
            assert bad.is_error and UNAVAILABLE not in text(bad)
        echo = await client.call_tool("echo", {"text": "fine"})
    assert text(echo) == "echo: fine"


async def test_hidden_tools_leave_the_list_and_come_back():
    changes = ListChanges()
    server = proxied(proxy_args=FAST_WATCH, env=breaker_env(**HIDING))
    async with connect(server, mode="legacy", message_handler=changes) as client:
        assert client.session.server_capabilities.tools.list_changed
        await hidden_tool_leaves_and_returns(client, changes)


async def test_progress_logging_sampling_elicitation_and_roots_pass_through():
    async def both(server):
        logs: list[str] = []
        progress: list[tuple[float, float | None, str | None]] = []

        async def on_log(params: types.LoggingMessageNotificationParams) -> None:
            logs.append(str(params.data))

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, total, message))

        async def sampling(context, params: types.CreateMessageRequestParams):
            asked = params.messages[0].content.text
            return types.CreateMessageResult(
                role="assistant", content=types.TextContent(type="text", text=f"yes to {asked}"), model="test-model"
            )

        async def elicitation(context, params):
            return types.ElicitResult(action="accept", content={"ok": True})

        async def list_roots(context):
            return types.ListRootsResult(roots=[types.Root(uri="file:///work/project", name="project")])

        async with connect(
            server,
            mode="legacy",
            logging_callback=on_log,
            sampling_callback=sampling,
            elicitation_callback=elicitation,
            list_roots_callback=list_roots,
        ) as client:
            slow = await client.session.call_tool("slow", {"steps": 3}, progress_callback=on_progress)
            asked = await client.call_tool("ask", {"question": "tea?"})
            confirmed = await client.call_tool("confirm", {})
            roots = await client.call_tool("roots", {})
        return text(slow), progress, logs, text(asked), text(confirmed), text(roots)

    through_proxy = await both(proxied())
    without = await both(direct())
    assert through_proxy == without
    assert through_proxy[1] == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
    assert through_proxy[3] == "model said: yes to tea?"
    assert through_proxy[4] == "accept: True"
    assert through_proxy[5] == "file:///work/project"


async def test_switched_off_the_proxy_is_a_transparent_pass_through(runs):
    off = breaker_env(OTEL_BREAKER_ENABLED="false", **HIDING)
    async with connect(proxied("--runs", str(runs.path), env=off), mode="legacy") as client:
        healthy_off = await healthy_session(client)
        failing = await six_failing_calls(client)
        listed = [t.name for t in (await client.session.list_tools()).tools]
    async with connect(proxied(), mode="legacy") as client:
        healthy_on = await healthy_session(client)
    assert healthy_off == healthy_on
    assert runs.count() == 6  # nothing guarded
    assert all(text(r) == text(failing[0]) and UNAVAILABLE not in text(r) for r in failing)
    assert "broken" in listed  # nothing hidden


# -- over HTTP ---------------------------------------------------------------------------------------


async def test_listen_serves_streamable_http(listening_proxy, runs):
    url = listening_proxy("--runs", str(runs.path))
    async with connect(url, mode="legacy") as client:
        through_proxy = await healthy_session(client)
        results = await six_failing_calls(client)
    async with connect(direct(), mode="legacy") as client:
        without = await healthy_session(client)
    assert through_proxy == without
    assert_breaker_stopped_it(results, runs.count())


async def test_listen_hides_and_brings_back_tools(listening_proxy):
    url = listening_proxy(env=breaker_env(**HIDING), proxy_args=FAST_WATCH)
    changes = ListChanges()
    async with connect(url, mode="legacy", message_handler=changes) as client:
        await hidden_tool_leaves_and_returns(client, changes)


async def test_upstream_proxies_a_streamable_http_server(http_server, runs):
    url = http_server("--runs", str(runs.path))
    async with connect(proxy_with("--upstream", url, "--header", "X-Test: yes"), mode="legacy") as client:
        through_proxy = await healthy_session(client)
        results = await six_failing_calls(client)
    async with connect(url, mode="legacy") as client:
        without = await healthy_session(client)
    assert through_proxy == without
    assert_breaker_stopped_it(results, runs.count())


async def test_upstream_hides_and_brings_back_tools(http_server):
    url = http_server()
    changes = ListChanges()
    server = proxy_with("--upstream", url, *FAST_WATCH, env=breaker_env(**HIDING))
    async with connect(server, mode="legacy", message_handler=changes) as client:
        await hidden_tool_leaves_and_returns(client, changes)


# -- a server that dies ----------------------------------------------------------------------------


async def test_a_killed_server_is_restarted_and_its_upstream_opens_and_recovers(tmp_path):
    down = tmp_path / "down"
    status_port = free_port()
    env = breaker_env(
        OTEL_BREAKER_FAILURE_THRESHOLD="2",
        OTEL_BREAKER_RECOVERY_TIMEOUT="0.2",
        OTEL_BREAKER_STATUS_ADDR=f"127.0.0.1:{status_port}",
    )
    server = proxied("--down", str(down), proxy_args=("--restart-delay", "0.05", "--max-restart-delay", "0.2"), env=env)
    async with connect(server) as client:
        first_pid = int(text(await client.call_tool("pid", {})))
        down.write_text("the server cannot start while this file exists")
        os.kill(first_pid, signal.SIGKILL)
        # The server is gone and cannot start: transport failures, then the upstream opens.
        answers = []
        with anyio.fail_after(PATIENCE):
            while not answers or "upstream" not in answers[-1]:
                answers.append(text(await client.call_tool("echo", {"text": "anyone?"})))
        assert any("unreachable" in a for a in answers)
        assert UNAVAILABLE in answers[-1] and "proxy-test-server@3.1.4" in answers[-1]
        assert "echo" in await tool_names(client)  # while it is down, the client keeps its tool list
        # The server can start again: restarted, the upstream's probe succeeds, it closes.
        down.unlink()
        with anyio.fail_after(PATIENCE):
            while True:
                answer = await client.call_tool("echo", {"text": "back?"})
                if not answer.is_error:
                    break
                await anyio.sleep(0.05)
        assert text(answer) == "echo: back?"
        second_pid = int(text(await client.call_tool("pid", {})))
        # The proxy's status endpoint answers from the board's snapshot, read once a second.
        with anyio.fail_after(PATIENCE):
            while True:
                rows = {row["tool"]: row for row in status_rows(status_port)}
                if rows["upstream:proxy-test-server@3.1.4"]["state"] == "closed":
                    break
                await anyio.sleep(0.2)
    assert second_pid != first_pid
    upstream = rows["upstream:proxy-test-server@3.1.4"]
    assert upstream["opened"] >= 1 and upstream["state"] == "closed"
    assert rows["echo"]["state"] == "closed"  # a dead server leaves its tools no failure streak


def test_closing_stdin_ends_the_proxy_and_the_server_within_5_seconds():
    proxy = stdio_proxy()
    try:
        send, receive = wire(proxy)

        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": HELLO})
        assert receive()["result"]["serverInfo"]["name"] == "proxy-test-server"
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "pid", "arguments": {}}})
        server_pid = int(receive()["result"]["content"][0]["text"])
        proxy.stdin.close()
        assert proxy.wait(timeout=5) == 0
        assert not _alive(server_pid)
    finally:
        if proxy.poll() is None:
            proxy.kill()


def test_sigterm_ends_the_proxy_and_the_server():
    proxy = stdio_proxy()
    try:
        server_pid = _server_pid_through(proxy)
        proxy.send_signal(signal.SIGTERM)
        proxy.wait(timeout=10)
        assert not _alive(server_pid)
    finally:
        if proxy.poll() is None:
            proxy.kill()


def _server_pid_through(proxy: subprocess.Popen) -> int:
    """Initialize over the proxy's stdio and ask the server for its process id."""
    assert proxy.stdin is not None and proxy.stdout is not None
    for message in (
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": HELLO},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "pid", "arguments": {}}},
    ):
        proxy.stdin.write(json.dumps(message) + "\n")
        proxy.stdin.flush()
    proxy.stdout.readline()
    return int(json.loads(proxy.stdout.readline())["result"]["content"][0]["text"])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its dead parent) is not running.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


# -- sharing and several servers ---------------------------------------------------------------------


async def test_two_proxies_share_breakers_through_redis(tmp_path):
    redis = pytest.importorskip("redis")
    try:
        redis.Redis(host="127.0.0.1", port=6379, socket_timeout=2).ping()
    except Exception:
        pytest.skip("no Redis at 127.0.0.1:6379")
    env = breaker_env(
        OTEL_BREAKER_STORE="redis://127.0.0.1:6379/0", OTEL_BREAKER_REDIS_PREFIX=f"test-proxy-{uuid.uuid4().hex}"
    )
    first_runs, second_runs = tmp_path / "first.txt", tmp_path / "second.txt"
    async with connect(proxied("--runs", str(first_runs), env=env)) as first:
        for i in range(THRESHOLD):
            await first.call_tool("broken", {"text": str(i)})
        async with connect(proxied("--runs", str(second_runs), env=env)) as second:
            rejected = await second.call_tool("broken", {"text": "from the other proxy"})
            echo = await second.call_tool("echo", {"text": "hi"})
    assert len(first_runs.read_text().splitlines()) == THRESHOLD
    assert not second_runs.exists()  # the second proxy's server never ran it
    assert rejected.is_error and UNAVAILABLE in text(rejected)
    assert text(echo) == "echo: hi"


async def test_config_fronts_several_servers_each_its_own_upstream(tmp_path, runs):
    config = tmp_path / "servers.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "alpha": {"command": sys.executable, "args": [*server_command()[1:], "--name", "alpha"]},
                    "beta": {
                        "command": sys.executable,
                        "args": [*server_command()[1:], "--name", "beta", "--runs", str(runs.path)],
                    },
                }
            }
        )
    )
    async with connect(proxy_with("--config", str(config)), mode="legacy") as client:
        info = client.session.server_info
        names = [t.name for t in (await client.session.list_tools()).tools]
        beta_failures = [await client.call_tool("beta.broken", {"text": str(i)}) for i in range(6)]
        alpha_broken = await client.call_tool("broken", {"text": "alpha's own"})
        beta_echo = await client.call_tool("beta.echo", {"text": "b"})
        read = await client.session.read_resource("notes://today")
    assert info.name == "otel-breaker-mcp-proxy"
    assert {"echo", "broken", "beta.echo", "beta.broken"} <= set(names)
    assert_breaker_stopped_it(beta_failures, runs.count())
    assert alpha_broken.is_error and UNAVAILABLE not in text(alpha_broken)  # another server's tool
    assert text(beta_echo) == "echo: b"
    assert read.contents[0].text == "buy milk"


# -- the command line --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--listen", "10.1.2.3:80", "--", "x"],
        ["--upstream", "ftp://x", "--", "x"],
        ["--header", "Bad", "--upstream", "http://127.0.0.1:1/mcp"],
        ["--config", "/no/such/file.json"],
        ["--restart-delay", "-1", "--", "x"],
    ],
)
def test_bad_options_are_one_line_and_a_non_zero_exit(args):
    done = subprocess.run(
        [sys.executable, "-m", "otel_breaker", "mcp-proxy", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("otel-breaker")


def test_a_server_that_does_not_start_is_one_line_and_exit_1():
    done = subprocess.run(
        [sys.executable, "-m", "otel_breaker", "mcp-proxy", "--", sys.executable, "-c", "pass"],
        capture_output=True,
        text=True,
        timeout=60,
        env=breaker_env(),
    )
    assert done.returncode == 1
    assert "could not start MCP server" in done.stderr and "Traceback" not in done.stderr


def test_without_the_mcp_sdk_it_says_what_to_install():
    code = "import sys; sys.modules['mcp'] = None; from otel_breaker.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, "mcp-proxy", "--", "server"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert 'pip install "mcp>=2.3,<3"' in done.stderr and 'pip install -e ".[mcp]"' in done.stderr


# -- cancellation and memory -------------------------------------------------------------------------


async def test_a_cancelled_call_is_cancelled_on_the_server_and_counts_nothing(runs):
    async with connect(proxied("--runs", str(runs.path))) as client:
        for _ in range(THRESHOLD):
            async with anyio.create_task_group() as group:

                async def call() -> None:
                    await client.call_tool("hang", {})

                group.start_soon(call)
                with anyio.fail_after(PATIENCE):
                    while _count(runs, "started") <= _count(runs, "cancelled"):
                        await anyio.sleep(0.02)
                group.cancel_scope.cancel()  # the client cancels: notifications/cancelled
            with anyio.fail_after(PATIENCE):
                while _count(runs, "cancelled") < _count(runs, "started"):
                    await anyio.sleep(0.02)
        # Cancellations are neither failures nor successes: the tool is not open.
        started = _count(runs, "started")
        async with anyio.create_task_group() as group:
            group.start_soon(client.call_tool, "hang", {})
            with anyio.fail_after(PATIENCE):
                while _count(runs, "started") == started:
                    await anyio.sleep(0.02)
            group.cancel_scope.cancel()
    assert _count(runs, "cancelled") >= THRESHOLD


def _count(runs, word: str) -> int:
    return runs.path.read_text().splitlines().count(word) if runs.path.exists() else 0


async def test_memory_stays_bounded_with_big_results():
    size, calls = 2 * 1024 * 1024, 30
    async with connect(proxied()) as client:
        proxy_pid = _parent_of(int(text(await client.call_tool("pid", {}))))
        for _ in range(5):  # the allocator's high-water mark of a few copies in flight
            assert len(text(await client.call_tool("big", {"size": size}))) == size
        warm = _rss_mb(proxy_pid)
        for _ in range(calls):
            await client.call_tool("big", {"size": size})
        grown = _rss_mb(proxy_pid) - warm
    # Kept results would grow it by calls x 2 MB = 60 MB.
    assert grown < 8 * size / 2**20, f"the proxy grew by {grown:.0f} MB over {calls} results of 2 MB"


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def test_an_http_upstream_that_goes_away_opens_and_recovers():
    port = free_port()
    env = breaker_env(OTEL_BREAKER_FAILURE_THRESHOLD="2", OTEL_BREAKER_RECOVERY_TIMEOUT="0.2")
    url = f"http://127.0.0.1:{port}/mcp"
    server = _start_http_server(port)
    proxy = proxy_with("--upstream", url, "--restart-delay", "0.05", "--max-restart-delay", "0.2", env=env)
    try:
        async with connect(proxy) as client:
            assert text(await client.call_tool("echo", {"text": "1"})) == "echo: 1"
            server.kill()
            server.wait()
            answers = []
            with anyio.fail_after(PATIENCE):
                while not answers or "upstream" not in answers[-1]:
                    answers.append(text(await client.call_tool("echo", {"text": "anyone?"})))
            assert any("unreachable" in a for a in answers[:-1])
            server = _start_http_server(port)
            with anyio.fail_after(PATIENCE):
                while (answer := await client.call_tool("echo", {"text": "back?"})).is_error:
                    await anyio.sleep(0.05)
            assert text(answer) == "echo: back?"
    finally:
        server.kill()
        server.wait()


def _start_http_server(port: int) -> subprocess.Popen:
    from proxy_support import wait_for_port

    proc = subprocess.Popen(server_command("--http", str(port)), stderr=subprocess.DEVNULL)
    wait_for_port(port, proc)
    return proc


def test_telemetry_goes_where_otel_variables_say_and_stdout_stays_the_protocol(runs):
    env = breaker_env(OTEL_TRACES_EXPORTER="console", OTEL_LOGS_EXPORTER="console", OTEL_SERVICE_NAME="proxy-test")
    proxy = subprocess.Popen(
        [sys.executable, "-m", "otel_breaker", "mcp-proxy", "--", *server_command("--runs", str(runs.path))],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proxy.stdin is not None and proxy.stdout is not None
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        *(
            {
                "jsonrpc": "2.0",
                "id": i,
                "method": "tools/call",
                "params": {"name": "broken", "arguments": {"text": "x"}},
            }
            for i in range(1, 5)
        ),
    ]
    replies = []
    for message in messages:
        proxy.stdin.write(json.dumps(message) + "\n")
        proxy.stdin.flush()
        if "id" in message:
            replies.append(json.loads(proxy.stdout.readline()))  # every stdout line is a JSON-RPC message
    stdout, stderr = proxy.communicate(timeout=30)
    assert stdout == ""  # nothing but the protocol, even the telemetry's last export at exit
    assert [r["id"] for r in replies] == [0, 1, 2, 3, 4]
    assert UNAVAILABLE in replies[-1]["result"]["content"][0]["text"]
    # The console span exporter, on stderr: one tool span per call, the MCP SDK's own server span
    # of the call (annotated) where it emits one, else ours.
    assert '"gen_ai.tool.name": "broken"' in stderr and '"otel_breaker.guarded": true' in stderr
    assert "otel_breaker.rejected" in stderr  # the log-based rejection event
    assert "proxy-test" in stderr
