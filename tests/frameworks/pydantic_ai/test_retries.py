"""Retries below the model through PydanticAI's agent loop (docs/retries.md).

The backend is a local HTTP server: ``/blip/`` answers 503 once and then the page,
``/down/`` 503 every time, ``/hang/`` never. The model is PydanticAI's
``FunctionModel`` (``test_outcomes.run_agent``), in both ways a PydanticAI tool meets
an error: ``raised`` (the exception ends the run) and ``tool_failed`` (``ToolFailed``,
the run goes on). Also through PydanticAI's MCP toolset, with a real server subprocess
whose tools announce their side effects (``../mcp_proxy/effects_server.py``).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai")
sys.path.insert(0, str(Path(__file__).parent))

import httpx
from fastmcp.client.transports import StdioTransport
from outcome_scenarios import (
    OUTCOME_UNKNOWN,
    PAGE,
    THREE_ATTEMPTS,
    Backends,
    page_tool,
    retry_backends,
    send_tool,
)
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from status_prompt import breaker_settings
from test_outcomes import STYLES, run_agent

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


@pytest.mark.parametrize("style", STYLES)
def test_a_blip_costs_no_model_turn_with_retries_on(style: str, live: Backends, instrument) -> None:
    healthy = run_agent(fetch(), [f"{live.server_url}/docs/pricing"], style)
    instrument("pydantic_ai")
    breaker_settings(retry="transient", tool_effects="fetch_page=read_only")
    tool = fetch()
    on = run_agent(tool, [live.blip("page")], style)
    assert tool.runs.count == 2, "the first attempt met the 503, the retry the page"
    assert on.results == healthy.results == [PAGE]
    assert len(on.requests) == len(healthy.requests), "no model turn spent on the blip"
    assert on.ends == healthy.ends == [("output", "done")]


@pytest.mark.parametrize("style", STYLES)
def test_with_retries_off_a_blip_reads_the_same_on_as_off(style: str, live: Backends, instrument) -> None:
    breaker_settings(tool_effects="fetch_page=read_only")
    off = run_agent(fetch(), [live.blip("page")], style)
    live.forget_hits()
    instrument("pydantic_ai")
    on = run_agent(fetch(), [live.blip("page")], style)
    assert off.runs == on.runs == 1
    assert on.results == off.results and on.ends == off.ends and on.requests == off.requests
    assert "503" in str(on.ends if style == "raised" else on.results)


@pytest.mark.parametrize("style", STYLES)
def test_the_model_reads_the_last_failure_with_the_attempts(style: str, live: Backends, instrument) -> None:
    """``tool_failed``: the "tool failed" part the model reads; ``raised``: the exception
    that ends the run (the program's own error handling shows it)."""
    instrument("pydantic_ai")
    breaker_settings(retry="transient", tool_effects="fetch_page=read_only", failure_threshold="50")
    tool = fetch()
    run = run_agent(tool, [live.down("attempts")], style)
    assert tool.runs.count == live.hits("/down/attempts") == 3, "the first attempt and two retries"
    read = run.results[0] if style == "tool_failed" else run.ends[0][1]
    assert "503 Service Unavailable" in read and THREE_ATTEMPTS in read, read
    if style == "tool_failed":
        assert run.ends == [("output", "done")]
    else:
        assert run.ends[0][0] == "HTTPStatusError", "the tool's own exception ends the run, as without us"


def test_a_dead_backend_gets_no_more_traffic_and_opens_no_later(live: Backends, instrument, capsys) -> None:
    instrument("pydantic_ai")

    def outage(name: str, **retry: str) -> tuple[int, int]:
        breaker_settings(failure_threshold="3", tool_effects="fetch_page=read_only", **retry)
        run = run_agent(fetch(), [live.down(f"{name}-{i}") for i in range(CALLS)], "tool_failed")
        assert default_registry().find("fetch_page")[0].state is State.OPEN
        default_registry().clear(keep_counts=False)
        return live.hits(f"/down/{name}-"), next(i for i, r in enumerate(run.results) if UNAVAILABLE in r)

    without, opened_without = outage("plain")
    with_retries, opened_with = outage("retried", retry="transient")
    assert with_retries <= without * 1.2, f"{with_retries} requests with retries, {without} without"
    assert opened_with <= opened_without, "the breaker opens no later (in the model's calls) with retries"
    with capsys.disabled():
        print(
            f"\n[retries] pydantic_ai dead backend: {with_retries} requests with retries, {without} without; "
            f"the model's call {opened_with + 1} rejected with retries, {opened_without + 1} without"
        )


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize(
    "options",
    [{}, {"retry": "transient"}, {"retry": "transient", "retry_attempts": "10", "failure_threshold": "50"}],
    ids=["retries-off", "retries-on", "ten-attempts"],
)
def test_a_destructive_tool_that_times_out_runs_once(
    options: dict[str, str], style: str, live: Backends, instrument
) -> None:
    instrument("pydantic_ai")
    breaker_settings(tool_effects="send_message=destructive", **options)
    tool = send_tool(live.hang("send"))
    run = run_agent(tool, ["standup moved to 10:30"], style)
    assert tool.runs.count == 1, "a destructive tool is never run twice by us"
    if style == "tool_failed":
        assert OUTCOME_UNKNOWN in run.results[0], run.results  # the run's own "tool failed", read by the model
        assert run.ends == [("output", "done")]
    else:
        assert OUTCOME_UNKNOWN in run.ends[0][1], run.ends  # the exception that ends the run says it


def test_an_mcp_servers_read_only_annotation_lets_its_tool_ride_out_a_blip(live: Backends, instrument, tmp_path):
    """PydanticAI's MCP toolset lists the server's tools through the MCP client below it,
    where the annotations are read: ``fetch_page`` is read-only by the server's word."""
    server = Path(__file__).parent.parent / "mcp_proxy" / "effects_server.py"
    runs = tmp_path / "runs.txt"

    def respond(messages, info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if p.part_kind != "user-prompt"]
        if not returns:
            return ModelResponse(parts=[ToolCallPart("fetch_page", {"url": live.blip("mcp")}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart(str(returns[-1].content))])

    async def go() -> str:
        toolset = MCPToolset(
            StdioTransport(sys.executable, [str(server), "--runs", str(runs)]), init_timeout=120, read_timeout=120
        )
        async with toolset:
            return (await Agent(name="reader").run("read", toolsets=[toolset], model=FunctionModel(respond))).output

    instrument("pydantic_ai", "mcp")
    breaker_settings(retry="transient")
    answer = asyncio.run(go())
    assert answer == PAGE, answer
    assert runs.read_text().splitlines().count("fetch_page") == 2, "retried once below the model"
