"""MCP tools loaded through langchain-mcp-adapters: a tool is known by its server.

Two real MCP servers both have ``search``. Server A's is down; a LangGraph agent
using it opens A's breaker, while an agent using server B's ``search`` keeps
getting answers. Each call is counted once, with the server as its source.
"""

from __future__ import annotations

import sys
import warnings
from contextlib import AsyncExitStack
from importlib import metadata
from pathlib import Path

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain_mcp_adapters")

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools
from mcp.shared.memory import create_connected_server_and_client_session
from mcp_search_server import search_server

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import ToolNode, create_react_agent

from otel_breaker.config import load_settings, set_settings
from otel_breaker.instrumentation.mcp_identity import bounded_source as _bounded_source
from otel_breaker.registry import default_registry

UNAVAILABLE = "is temporarily unavailable"
SERVER_SCRIPT = Path(__file__).with_name("mcp_search_server.py")


class ScriptedModel(FakeMessagesListChatModel):
    """LangChain's own fake chat model: calls ``search`` n times, then answers."""

    def bind_tools(self, tools, **kwargs):
        return self


def searches(n: int, prefix: str) -> list[AIMessage]:
    calls = [
        AIMessage("", tool_calls=[{"name": "search", "args": {"query": f"q{i}"}, "id": f"{prefix}{i}"}])
        for i in range(n)
    ]
    return [*calls, AIMessage("done")]


async def run_agent(search_tool, n: int, prefix: str) -> list[ToolMessage]:
    """A LangGraph ReAct agent that calls ``search`` n times; the tool messages it got back."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = create_react_agent(
            ScriptedModel(responses=searches(n, prefix)), ToolNode([search_tool], handle_tool_errors=True)
        )
    result = await graph.ainvoke({"messages": [HumanMessage("search the web")]})
    assert result["messages"][-1].content == "done"
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


def outcome(messages: list[ToolMessage]) -> list[tuple[str, str]]:
    """What the model read: (status, text) per tool message."""
    return [(m.status, m.text) for m in messages]


@pytest.fixture
def threshold():
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "3", "OTEL_BREAKER_RECOVERY_TIMEOUT": "600"}))


async def two_servers(stack: AsyncExitStack, *, a_broken: bool) -> tuple:
    """``search`` from server A and from server B, each over its own in-memory session."""
    tools = []
    for name, broken in (("alpha", a_broken), ("beta", False)):
        session = await stack.enter_async_context(
            create_connected_server_and_client_session(search_server(name, broken=broken))
        )
        (tool,) = await load_mcp_tools(session)
        assert tool.name == "search"
        tools.append(tool)
    return tuple(tools)


async def scenario(*, a_broken: bool) -> tuple[list, list]:
    """Agent A searches 5 times on server A, then agent B 3 times on server B."""
    async with AsyncExitStack() as stack:
        search_a, search_b = await two_servers(stack, a_broken=a_broken)
        return outcome(await run_agent(search_a, 5, "a")), outcome(await run_agent(search_b, 3, "b"))


async def test_a_broken_server_opens_its_own_breaker_only(instrument, threshold, registry_clock):
    instrument("langchain")
    a, b = await scenario(a_broken=True)

    # Server A: three failures, then the breaker answers without calling it.
    assert [status for status, _ in a] == ["error"] * 5
    assert all("search backend is down" in text for _, text in a[:3])
    assert all(UNAVAILABLE in text for _, text in a[3:])
    # Server B's search is another tool: 3 answers out of 3.
    assert b == [("success", f"beta: 3 results for 'q{i}'") for i in range(3)]

    mcp_version = metadata.version("mcp")
    everything = default_registry().breakers()
    # Each server also has its upstream breaker: a tool's own errors never open it.
    upstreams = [br for br in everything if br.name.startswith("upstream:")]
    assert {br.name for br in upstreams} == {f"upstream:alpha@{mcp_version}", f"upstream:beta@{mcp_version}"}
    assert all(br.state.value == "closed" for br in upstreams)
    breakers = {(br.name, br.source): br for br in everything if br not in upstreams}
    alpha, beta = breakers[("search", f"alpha@{mcp_version}")], breakers[("search", f"beta@{mcp_version}")]
    assert alpha.state.value == "open" and beta.state.value == "closed"
    assert set(breakers) == {("search", f"alpha@{mcp_version}"), ("search", f"beta@{mcp_version}")}
    # Counted once per call: 3 failures on A, then 2 rejections; 3 successes on B.
    assert alpha.lifetime_counts() == (0, 3, 0, 2, 0)
    assert beta.lifetime_counts() == (3, 0, 0, 0, 0)


async def test_same_outcome_with_and_without_breakers_when_nothing_is_broken(instrument, threshold):
    without = await scenario(a_broken=False)
    instrument("langchain")
    with_breakers = await scenario(a_broken=False)
    assert with_breakers == without
    assert [status for status, _ in with_breakers[0] + with_breakers[1]] == ["success"] * 8


async def test_a_broken_server_without_breakers_fails_every_time(threshold):
    a, b = await scenario(a_broken=True)
    assert [status for status, _ in a] == ["error"] * 5
    assert not any(UNAVAILABLE in text for _, text in a)
    assert [status for status, _ in b] == ["success"] * 3


async def test_multi_server_client_keys_tools_by_their_connection(instrument, threshold, registry_clock):
    """MultiServerMCPClient: stdio subprocess servers, a new session per call."""
    instrument("langchain")
    connections = {
        name: {"transport": "stdio", "command": sys.executable, "args": [str(SERVER_SCRIPT), name, *extra]}
        for name, extra in (("alpha", ["broken"]), ("beta", []))
    }
    client = MultiServerMCPClient(connections)
    (search_a,) = await client.get_tools(server_name="alpha")
    (search_b,) = await client.get_tools(server_name="beta")

    a = outcome(await run_agent(search_a, 4, "a"))
    b = outcome(await run_agent(search_b, 3, "b"))

    assert [UNAVAILABLE in text for _, text in a] == [False, False, False, True]
    assert b == [("success", f"beta: 3 results for 'q{i}'") for i in range(3)]
    sources = {br.source: br for br in default_registry().breakers() if br.name == "search"}
    # keyed by the connection's command line (bounded, but never cut so that two servers meet)
    alpha_source = _bounded_source(f"{sys.executable} {SERVER_SCRIPT} alpha broken")
    beta_source = _bounded_source(f"{sys.executable} {SERVER_SCRIPT} beta")
    assert set(sources) == {alpha_source, beta_source}
    assert sources[alpha_source].state.value == "open"
    assert sources[beta_source].lifetime_counts() == (3, 0, 0, 0, 0)
