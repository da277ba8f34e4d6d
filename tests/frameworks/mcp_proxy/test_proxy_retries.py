"""Retries and side effects through ``otel-breaker mcp-proxy`` (docs/retries.md).

The server behind the proxy (``effects_server.py``) announces its tools' side effects
in MCP tool annotations: ``fetch_page`` is read-only, ``send_message`` and
``post_message`` destructive. Its page fetches go to a local HTTP backend
(:class:`Backend`): ``/blip/`` answers 503 once and then the page, ``/down/`` 503
every time.

* a blip with retries on: the client reads the page, one call; with retries off it
  reads what it reads without the proxy;
* a backend that stays down with retries on: the client reads the server's last answer,
  with the number of attempts;
* a dead backend with retries on: the requests reaching it stay within the budget and
  the breaker opens no later;
* a destructive tool that runs past the call's timeout runs once, whatever is
  configured, and the client reads "outcome unknown"; so does one whose server answers
  a gateway timeout;
* a half-open server is probed with ``ping`` before a destructive tool's call reaches it.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")

from effects_backend import EFFECTS_SERVER, OUTCOME_UNKNOWN, PAGE, THREE_ATTEMPTS, Backend, Runs, serving_backend
from mcp.client.stdio import StdioServerParameters
from proxy_scenarios import connect, text
from proxy_support import breaker_env, free_port
from proxy_wire import status_rows

#: A bound on one scenario against real processes; never reached by a healthy run.
PATIENCE = 180.0
CALLS = 10
#: How long the status board may take to show a state (it reads the breakers once a second).
SETTLE = 30.0


@pytest.fixture
def live() -> Iterator[Backend]:
    with serving_backend() as backend:
        yield backend


@pytest.fixture
def runs(tmp_path: Path) -> Runs:
    return Runs(tmp_path / "runs.txt")


def server_args(runs: Runs, *extra: str) -> list[str]:
    return [sys.executable, str(EFFECTS_SERVER), "--runs", str(runs.path), *extra]


def direct(runs: Runs) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=server_args(runs)[1:], env=breaker_env())


def proxied(runs: Runs, *extra: str, proxy_args: tuple[str, ...] = (), **env: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "otel_breaker", "mcp-proxy", *proxy_args, "--", *server_args(runs, *extra)],
        env=breaker_env(**env),
    )


async def test_a_blip_costs_the_client_nothing_with_retries_on(live: Backend, runs: Runs) -> None:
    async with connect(proxied(runs, OTEL_BREAKER_RETRY="transient")) as client:
        answer = await client.call_tool("fetch_page", {"url": live.blip("page")})
    assert not answer.is_error and text(answer) == PAGE
    assert runs.of("fetch_page") == 2, "the proxy retried the read-only tool once, below the client"


async def test_with_retries_off_a_blip_reads_as_without_the_proxy(live: Backend, runs: Runs) -> None:
    async with connect(direct(runs)) as client:
        alone = await client.call_tool("fetch_page", {"url": live.blip("page")})
    live.forget_hits()
    async with connect(proxied(runs)) as client:
        through = await client.call_tool("fetch_page", {"url": live.blip("page")})
    assert alone.is_error and through.is_error and "503" in text(through)
    assert text(through) == text(alone)
    assert runs.of("fetch_page") == 2, "one run each"


async def test_a_backend_that_stays_down_reads_its_last_answer_with_the_attempts(live: Backend, runs: Runs) -> None:
    server = proxied(runs, OTEL_BREAKER_RETRY="transient", OTEL_BREAKER_FAILURE_THRESHOLD="50")
    async with connect(server) as client:
        answer = await client.call_tool("fetch_page", {"url": live.down("attempts")})
    assert answer.is_error and "HTTP Error 503" in text(answer) and text(answer).endswith(THREE_ATTEMPTS)
    assert runs.of("fetch_page") == live.hits_under("/down/attempts") == 3


async def test_a_destructive_tools_gateway_timeout_answer_reads_outcome_unknown(live: Backend, runs: Runs) -> None:
    """The user's word makes the fetch destructive (it wins over the server's annotation)."""
    server = proxied(runs, OTEL_BREAKER_RETRY="transient", OTEL_BREAKER_TOOL_EFFECTS="fetch_page=destructive")
    async with connect(server) as client:
        answer = await client.call_tool("fetch_page", {"url": f"{live.url}/gateway/pay"})
    assert answer.is_error and OUTCOME_UNKNOWN in text(answer) and "HTTP Error 504" in text(answer), text(answer)
    assert runs.of("fetch_page") == 1


async def test_a_dead_backend_gets_no_more_traffic_and_opens_no_later(live: Backend, runs: Runs, capsys) -> None:
    async def outage(name: str, **env: str) -> tuple[int, int]:
        answers = []
        async with connect(proxied(runs, **env)) as client:
            for i in range(CALLS):
                answers.append(text(await client.call_tool("fetch_page", {"url": live.down(f"{name}-{i}")})))
        reached = live.hits_under(f"/down/{name}-")
        opened_at = next(i for i, a in enumerate(answers) if "temporarily unavailable" in a)
        return reached, opened_at

    without, opened_without = await outage("plain")
    with_retries, opened_with = await outage("retried", OTEL_BREAKER_RETRY="transient")
    assert with_retries <= without * 1.2, f"{with_retries} requests with retries, {without} without"
    assert opened_with <= opened_without
    with capsys.disabled():
        print(
            f"\n[retries] mcp proxy dead backend: {with_retries} requests with retries, {without} without; "
            f"the client's call {opened_with + 1} rejected with retries, {opened_without + 1} without"
        )


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"OTEL_BREAKER_RETRY": "transient"},
        {
            "OTEL_BREAKER_RETRY": "transient",
            "OTEL_BREAKER_RETRY_ATTEMPTS": "10",
            "OTEL_BREAKER_FAILURE_THRESHOLD": "50",
        },
    ],
    ids=["retries-off", "retries-on", "ten-attempts"],
)
async def test_a_destructive_tool_that_times_out_runs_once(env: dict[str, str], runs: Runs) -> None:
    async with connect(proxied(runs, OTEL_BREAKER_TIMEOUT="1", **env)) as client:
        answer = await client.call_tool("post_message", {"text": "standup moved to 10:30"})
    assert answer.is_error and OUTCOME_UNKNOWN in text(answer), text(answer)
    assert runs.of("post_message") == 1, "a destructive tool is never run twice by us"


async def test_a_half_open_server_is_probed_with_ping_before_a_destructive_call(tmp_path: Path, runs: Runs) -> None:
    down = tmp_path / "down"
    status_port = free_port()
    server = proxied(
        runs,
        "--down",
        str(down),
        proxy_args=("--restart-delay", "0.05", "--max-restart-delay", "0.2"),
        OTEL_BREAKER_FAILURE_THRESHOLD="2",
        OTEL_BREAKER_SUCCESS_THRESHOLD="2",
        OTEL_BREAKER_RECOVERY_TIMEOUT="0.2",
        OTEL_BREAKER_STATUS_ADDR=f"127.0.0.1:{status_port}",
    )
    async with connect(server) as client:
        first_pid = int(text(await client.call_tool("pid", {})))
        down.write_text("the server cannot start while this file exists")
        os.kill(first_pid, signal.SIGKILL)
        answers: list[str] = []
        with anyio.fail_after(PATIENCE):  # transport failures, then the upstream opens
            while not answers or "upstream" not in answers[-1]:
                answers.append(text(await client.call_tool("pid", {})))
        down.unlink()
        with anyio.fail_after(PATIENCE):  # restarted: wait until the cooldown left it half-open
            while _upstream(status_port).get("state") != "half_open":
                await anyio.sleep(0.05)
        with anyio.fail_after(PATIENCE):
            while True:
                # A ping that finds the server still restarting opens the upstream again and
                # the send is rejected without reaching it; once a ping is answered, it goes.
                sent = await client.call_tool("send_message", {"text": "ship it"})
                if not sent.is_error:
                    break
                # Rejected, by the upstream or, after three in this client's run, by its waste budget
                # (until the upstream is no longer open): either way the send never reached the server.
                rejected = text(sent)
                assert "temporarily unavailable" in rejected or "unavailable for the rest of this run" in rejected
                assert runs.of("send_message") == 0
                await anyio.sleep(0.05)
        # The status board reads the breakers once a second: a state a moment old first (half-open,
        # or open from a ping that found the server still restarting before the one that closed it).
        with anyio.move_on_after(SETTLE):
            while _upstream(status_port).get("state") != "closed":
                await anyio.sleep(0.1)
        upstream = _upstream(status_port)
    assert not sent.is_error and text(sent) == "sent"
    assert runs.of("send_message") == 1
    # Two probes close the upstream (success_threshold=2): pings did, before the one send;
    # had the send been the probe, the upstream would still be half-open after it.
    assert upstream["state"] == "closed", upstream


def _upstream(port: int) -> dict:
    found = [row for row in status_rows(port) if row["tool"] == "upstream:effects-server@1.0.0"]
    return found[0] if found else {}  # none yet: the board has not read the breakers since the start
