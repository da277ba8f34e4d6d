"""Retries below the model through LangGraph's ReAct loop (docs/retries.md).

The backend is a local HTTP server: ``/blip/`` answers 503 once and then the page,
``/down/`` 503 every time, ``/hang/`` never. The model is LangChain's fake chat model
with scripted tool calls (``test_outcomes.run_agent``).

* a blip of a read-only tool with retries on: the model reads the page, in the same
  requests as for a healthy tool; with retries off the run is the same with
  otel-breaker on as off;
* a backend that stays down with retries on: the model reads the last failure, with
  the number of attempts;
* a dead backend with retries on: the requests reaching it stay within the budget and
  the breaker opens no later than without retries;
* a destructive tool whose call times out runs once, whatever is configured, and the
  model reads "outcome unknown".
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("langgraph")
sys.path.insert(0, str(Path(__file__).parent))

import httpx
from langchain_mcp_adapters.tools import load_mcp_tools
from mcp.server.fastmcp import FastMCP
from mcp.shared.memory import create_connected_server_and_client_session
from mcp.types import ToolAnnotations
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
    healthy = run_agent(fetch(), [f"{live.server_url}/docs/pricing"])
    instrument("langchain")
    breaker_settings(retry="transient", tool_effects="fetch_page=read_only")
    tool = fetch()
    on = run_agent(tool, [live.blip("on")])
    assert tool.runs.count == 2, "the first attempt met the 503, the retry the page"
    assert [r.text for r in on.results] == [PAGE]
    assert [r.status for r in on.results] == [r.status for r in healthy.results] == ["success"]
    assert len(on.requests) == len(healthy.requests), "no model turn spent on the blip"
    assert on.final == healthy.final


def test_with_retries_off_a_blip_reads_the_same_on_as_off(live: Backends, instrument) -> None:
    breaker_settings(tool_effects="fetch_page=read_only")
    off = run_agent(fetch(), [live.blip("page")])
    live.forget_hits()
    instrument("langchain")
    on = run_agent(fetch(), [live.blip("page")])
    assert off.runs == on.runs == 1
    assert on.results == off.results and "503" in on.results[0].text
    assert on.requests == off.requests


def test_the_model_reads_the_last_failure_with_the_attempts(live: Backends, instrument) -> None:
    instrument("langchain")
    breaker_settings(retry="transient", tool_effects="fetch_page=read_only", failure_threshold="50")
    tool = fetch()
    run = run_agent(tool, [live.down("attempts")])
    assert tool.runs.count == live.hits("/down/attempts") == 3, "the first attempt and two retries"
    [result] = run.results
    assert result.status == "error" and "503 Service Unavailable" in result.text
    assert THREE_ATTEMPTS in result.text, result.text


def test_a_dead_backend_gets_no_more_traffic_and_opens_no_later(live: Backends, instrument, capsys) -> None:
    instrument("langchain")

    def outage(name: str, **retry: str) -> tuple[int, int]:
        breaker_settings(failure_threshold="3", tool_effects="fetch_page=read_only", **retry)
        run = run_agent(fetch(), [live.down(f"{name}-{i}") for i in range(CALLS)])
        breaker = default_registry().find("fetch_page")[0]
        assert breaker.state is State.OPEN
        reached = live.hits(f"/down/{name}-")
        default_registry().clear(keep_counts=False)
        return reached, next(i for i, r in enumerate(run.results) if UNAVAILABLE in r.text)

    without, opened_without = outage("plain")
    with_retries, opened_with = outage("retried", retry="transient")
    assert with_retries <= without * 1.2, f"{with_retries} requests with retries, {without} without"
    assert opened_with <= opened_without, "the breaker opens no later (in the model's calls) with retries"
    with capsys.disabled():
        print(
            f"\n[retries] langchain dead backend: {with_retries} requests with retries, {without} without; "
            f"the model's call {opened_with + 1} rejected with retries, {opened_without + 1} without"
        )


@pytest.mark.parametrize(
    "options",
    [{}, {"retry": "transient"}, {"retry": "transient", "retry_attempts": "10", "failure_threshold": "50"}],
    ids=["retries-off", "retries-on", "ten-attempts"],
)
def test_a_destructive_tool_that_times_out_runs_once(options: dict[str, str], live: Backends, instrument) -> None:
    instrument("langchain")
    breaker_settings(tool_effects="send_message=destructive", **options)
    tool = send_tool(live.hang("send"))
    run = run_agent(tool, ["standup moved to 10:30"])
    assert tool.runs.count == 1, "a destructive tool is never run twice by us"
    assert run.results[0].status == "error"
    assert OUTCOME_UNKNOWN in run.results[0].text, run.results


async def test_an_mcp_servers_read_only_annotation_lets_its_tool_ride_out_a_blip(live: Backends, instrument) -> None:
    """langchain-mcp-adapters copies each MCP tool's annotations into the LangChain tool's
    ``metadata``, where they are read: ``lookup`` is read-only by the server's word,
    ``archive`` destructive. (Real MCP server, in-memory transport.)"""
    server = FastMCP("records")
    runs = {"lookup": 0, "archive": 0}

    def blip(tool: str) -> None:
        runs[tool] += 1
        if runs[tool] == 1:
            raise ValueError("HTTP Error 503: Service Unavailable")

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

    instrument("langchain")
    breaker_settings(retry="transient")
    async with create_connected_server_and_client_session(server._mcp_server) as session:
        tools = {tool.name: tool for tool in await load_mcp_tools(session)}
        read = await tools["lookup"].ainvoke({"key": "42"})
        archived = await tools["archive"].ainvoke({"key": "42"})  # the adapters answer its error as text
    assert [block["text"] for block in read] == ["record 42"], read
    assert "HTTP Error 503" in archived[0]["text"], archived
    assert runs == {"lookup": 2, "archive": 1}, "read-only: retried below the model; destructive: never"
