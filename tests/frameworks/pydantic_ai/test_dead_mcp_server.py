"""A dead MCP server never sinks a PydanticAI run: two ``MCPToolset``s, one whose server
exits at once. Without otel-breaker the run aborts before the model is asked anything;
with it the run goes on with the live server's tools, the dead server's upstream breaker
counts the failure (and, open, keeps the run from starting it again), the status block
names it, and once its cooldown ends and it is back, its tools are back."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai.mcp")

from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from status_prompt import breaker_settings

from otel_breaker.breaker import State
from otel_breaker.registry import default_registry
from otel_breaker.upstream import upstream_name

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from mcp_dead_server import bring_up, dead_command, starts
from mcp_search_server import stdio_command

COOLDOWN = 60.0


class Model:
    """Calls ``search`` once, then answers with what it read; notes each request's menu
    and instructions."""

    def __init__(self) -> None:
        self.menus: list[list[str]] = []
        self.instructions: list[str] = []

    def respond(self, messages: list, info: AgentInfo) -> ModelResponse:
        self.menus.append(sorted(t.name for t in info.function_tools))
        self.instructions.append(info.instructions or "")
        results = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
        if not results:
            return ModelResponse(parts=[ToolCallPart("search", {"query": "lamps"}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart(str(results[-1].content))])


def toolsets(state: Path) -> list[MCPToolset]:
    live_command, live_args = stdio_command("live", "up")
    dead, dead_args = dead_command(state)
    # Generous timeouts: a busy machine starts a Python server slowly.
    return [
        MCPToolset(StdioTransport(live_command, live_args), init_timeout=60, read_timeout=60),
        MCPToolset(StdioTransport(dead, dead_args), init_timeout=60, read_timeout=60),
    ]


def run(agent: Agent) -> tuple[str, Model]:
    model = Model()
    return agent.run_sync("find lamps", model=FunctionModel(model.respond)).output, model


def upstreams() -> dict[str, State]:
    found = {}
    for breaker in default_registry().breakers():
        name = upstream_name(breaker)
        if name is not None:
            found[name] = breaker.state
    return found


def test_without_otel_breaker_a_dead_server_aborts_the_run(tmp_path: Path) -> None:
    agent = Agent(toolsets=toolsets(tmp_path))
    with pytest.raises(Exception) as raised:
        run(agent)
    assert "Connection closed" in str(raised.value)
    assert starts(tmp_path) == 1


def test_a_dead_server_is_counted_skipped_named_and_back_when_it_is(tmp_path: Path, instrument, registry_clock):
    breaker_settings(
        failure_threshold="1", success_threshold="1", recovery_timeout=str(COOLDOWN), status_in_prompt="true"
    )
    instrument("pydantic_ai")
    agent = Agent(toolsets=toolsets(tmp_path))

    output, model = run(agent)
    assert output == "live: 3 results for 'lamps'"
    assert model.menus == [["search"], ["search"]]  # the live server's tools only
    assert starts(tmp_path) == 1
    # The one upstream open: the dead server's, named by its command line (it never said its name).
    (dead_upstream,) = [name for name, state in upstreams().items() if state is State.OPEN]
    # Its command line, bounded from the middle: the end stays (the server's folder argument),
    # whatever the length of the interpreter's and the script's paths before it.
    assert tmp_path.name in dead_upstream

    # Open: the server is not started again; the run goes on at once and reads it is down.
    output, model = run(agent)
    assert output == "live: 3 results for 'lamps'" and starts(tmp_path) == 1
    assert "every tool of upstream" in model.instructions[0]

    # Past the cooldown, with the server back: the run's connection is the probe, its tools are back.
    bring_up(tmp_path)
    registry_clock.advance(COOLDOWN * 2)
    output, model = run(agent)
    assert output == "live: 3 results for 'lamps'" and starts(tmp_path) == 2
    assert model.menus[0] == ["lookup", "search"]
    assert upstreams()[dead_upstream] is State.CLOSED
    assert "every tool of upstream" not in model.instructions[0]


def test_a_port_nobody_listens_on_is_a_dead_server_too(instrument) -> None:
    """A streamable-HTTP server nobody serves: the run aborts without otel-breaker
    ("Client failed to connect"); with it the run answers from the live server."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    live_command, live_args = stdio_command("live", "up")

    def agent() -> Agent:
        live = MCPToolset(StdioTransport(live_command, live_args), init_timeout=60, read_timeout=60)
        return Agent(toolsets=[live, MCPToolset(f"http://127.0.0.1:{port}/mcp")])

    with pytest.raises(Exception, match="failed to connect"):
        run(agent())
    instrument("pydantic_ai")
    output, model = run(agent())
    assert output == "live: 3 results for 'lamps'" and model.menus[0] == ["search"]
    assert f"http://127.0.0.1:{port}/mcp" in upstreams()
