"""Retries below the model through the OpenAI Agents SDK's loop (docs/retries.md).

The backend is a local HTTP server: ``/blip/`` answers 503 once and then the page,
``/down/`` 503 every time, ``/hang/`` never. The model is the SDK's ``ScriptedModel``
(``test_outcomes.run_agent``), with the SDK's default failure text and a detailed one.
Also through the SDK's MCP servers, with a real server subprocess whose tools announce
their side effects (``../mcp_proxy/effects_server.py``).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("agents")
sys.path.insert(0, str(Path(__file__).parent))

import httpx
from agents import Agent, Runner
from agents.mcp import MCPServerStdio
from agents.testing import ScriptedModel, assistant_message, function_call
from outcome_scenarios import (
    OUTCOME_UNKNOWN,
    PAGE,
    THREE_ATTEMPTS,
    Backends,
    page_tool,
    retry_backends,
    send_tool,
)
from status_prompt import breaker_settings
from test_outcomes import run_agent

from otel_breaker.breaker import State
from otel_breaker.registry import default_registry

CALLS = 10
UNAVAILABLE = "is temporarily unavailable"


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Backends]:
    with retry_backends(tmp_path) as found:
        yield found


def fetch() -> object:
    return page_tool(httpx.Timeout(60.0))


def test_a_blip_costs_no_model_turn_with_retries_on(live: Backends, instrument) -> None:
    healthy = run_agent(fetch(), [f"{live.server_url}/docs/pricing"], "detailed")
    instrument("openai_agents")
    breaker_settings(retry="transient", tool_effects="fetch_page=read_only")
    tool = fetch()
    on = run_agent(tool, [live.blip("page")], "detailed")
    assert tool.runs.count == 2, "the first attempt met the 503, the retry the page"
    assert on.results == healthy.results == [PAGE]
    assert len(on.requests) == len(healthy.requests), "no model turn spent on the blip"
    assert on.final == healthy.final


@pytest.mark.parametrize("failure_text", ["default", "detailed"])
def test_with_retries_off_a_blip_reads_the_same_on_as_off(failure_text: str, live: Backends, instrument) -> None:
    breaker_settings(tool_effects="fetch_page=read_only")
    off = run_agent(fetch(), [live.blip("page")], failure_text)
    live.forget_hits()
    instrument("openai_agents")
    on = run_agent(fetch(), [live.blip("page")], failure_text)
    assert off.runs == on.runs == 1
    assert on.results == off.results and on.requests == off.requests and on.final == off.final


@pytest.mark.parametrize("failure_text", ["default", "detailed"])
def test_the_model_reads_the_last_failure_with_the_attempts(failure_text: str, live: Backends, instrument) -> None:
    instrument("openai_agents")
    breaker_settings(retry="transient", tool_effects="fetch_page=read_only", failure_threshold="50")
    tool = fetch()
    run = run_agent(tool, [live.down("attempts")], failure_text)
    assert tool.runs.count == live.hits("/down/attempts") == 3, "the first attempt and two retries"
    [result] = run.results
    assert THREE_ATTEMPTS in result, result
    if failure_text == "detailed":
        assert "503 Service Unavailable" in result


def test_a_dead_backend_gets_no_more_traffic_and_opens_no_later(live: Backends, instrument, capsys) -> None:
    instrument("openai_agents")

    def outage(name: str, **retry: str) -> tuple[int, int]:
        breaker_settings(failure_threshold="3", tool_effects="fetch_page=read_only", **retry)
        run = run_agent(fetch(), [live.down(f"{name}-{i}") for i in range(CALLS)], "detailed")
        assert default_registry().find("fetch_page")[0].state is State.OPEN
        default_registry().clear(keep_counts=False)
        return live.hits(f"/down/{name}-"), next(i for i, r in enumerate(run.results) if UNAVAILABLE in r)

    without, opened_without = outage("plain")
    with_retries, opened_with = outage("retried", retry="transient")
    assert with_retries <= without * 1.2, f"{with_retries} requests with retries, {without} without"
    assert opened_with <= opened_without, "the breaker opens no later (in the model's calls) with retries"
    with capsys.disabled():
        print(
            f"\n[retries] openai_agents dead backend: {with_retries} requests with retries, {without} without; "
            f"the model's call {opened_with + 1} rejected with retries, {opened_without + 1} without"
        )


@pytest.mark.parametrize(
    "options",
    [{}, {"retry": "transient"}, {"retry": "transient", "retry_attempts": "10", "failure_threshold": "50"}],
    ids=["retries-off", "retries-on", "ten-attempts"],
)
def test_a_destructive_tool_that_times_out_runs_once(options: dict[str, str], live: Backends, instrument) -> None:
    instrument("openai_agents")
    breaker_settings(tool_effects="send_message=destructive", **options)
    tool = send_tool(live.hang("send"))
    run = run_agent(tool, ["standup moved to 10:30"], "detailed")
    assert tool.runs.count == 1, "a destructive tool is never run twice by us"
    assert OUTCOME_UNKNOWN in run.results[0], run.results


def test_an_mcp_servers_read_only_annotation_lets_its_tool_ride_out_a_blip(live: Backends, instrument, tmp_path):
    """The SDK lists the server's tools through the MCP session below it, where the
    annotations are read: ``fetch_page`` is read-only by the server's word."""
    runs = tmp_path / "runs.txt"
    script = [str(Path(__file__).parent.parent / "mcp_proxy" / "effects_server.py"), "--runs", str(runs)]
    server = MCPServerStdio({"command": sys.executable, "args": script}, client_session_timeout_seconds=60)
    model = ScriptedModel(
        [[function_call("fetch_page", {"url": live.blip("mcp")}, call_id="c1")], [assistant_message("done")]]
    )

    async def go() -> None:
        async with server:
            await Runner.run(Agent(name="reader", model=model, mcp_servers=[server]), "read")

    instrument("openai_agents", "mcp")
    breaker_settings(retry="transient")
    asyncio.run(go())
    outputs = [
        i["output"] for i in model.calls[-1].input if isinstance(i, dict) and i.get("type") == "function_call_output"
    ]
    assert len(outputs) == 1 and PAGE in str(outputs[0]), outputs
    assert runs.read_text().splitlines().count("fetch_page") == 2, "retried once below the model"
