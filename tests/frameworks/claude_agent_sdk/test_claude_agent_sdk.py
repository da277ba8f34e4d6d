"""The Claude Agent SDK with its bundled Claude Code CLI, offline: the real agent loop,
control protocol, hook callbacks and in-process MCP tools, against a local Messages API."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("claude_agent_sdk")
sys.path.insert(0, str(Path(__file__).parent))

from driver import UNAVAILABLE, Tool, ask, call, options, server
from fake_messages_api import FakeMessagesAPI
from mcp_search_server import stdio_command
from status_prompt import breaker_settings

from otel_breaker import State
from otel_breaker.instrumentation.base import DidNotEnable
from otel_breaker.instrumentation.claude_agent_sdk import PROXY_SWITCH, ClaudeAgentSDKAdapter, proxied
from otel_breaker.registry import default_registry

#: Requests in the per-request scenario, each with a new client, and dead-tool calls per request.
REQUESTS = 3
CALLS_PER_REQUEST = 3


@pytest.fixture(scope="module")
def api():
    fake = FakeMessagesAPI().start()
    yield fake
    fake.stop()


def _dead_tool_over_requests(api: FakeMessagesAPI) -> tuple[Tool, list[list[str]], list[list[bool]]]:
    """Three requests, each a new client and server, calling a dead tool three times."""
    tool = Tool.failing("weather")
    read, flagged = [], []
    for request in range(REQUESTS):
        steps = [call("weather", x=request * CALLS_PER_REQUEST + i) for i in range(CALLS_PER_REQUEST)]
        script = api.play([*steps, "done"])
        assert ask(options(api.url, {"tools": server([tool])})) == "done"
        read.append(script.requests[-1].tool_results)
        flagged.append(script.requests[-1].errors)
    return tool, read, flagged


def test_a_dead_tool_runs_every_time_without_otel_breaker(api):
    tool, read, flagged = _dead_tool_over_requests(api)
    assert tool.runs == REQUESTS * CALLS_PER_REQUEST == 9
    assert all(r == "service down" for results in read for r in results)
    assert all(all(f) for f in flagged)


def test_a_dead_tool_runs_twice_over_three_requests_each_a_new_client(api, instrument):
    breaker_settings(failure_threshold="2")
    instrument("claude_agent_sdk")
    tool, read, flagged = _dead_tool_over_requests(api)
    assert tool.runs == 2
    assert read[0][:2] == ["service down", "service down"]
    assert UNAVAILABLE in read[0][2] and "Tool 'weather'" in read[0][2]
    assert all(UNAVAILABLE in r for results in read[1:] for r in results)
    assert all(all(f) for f in flagged)  # each rejection reached Claude as an error result
    [breaker] = default_registry().find("weather")  # one breaker for every request's client
    assert breaker.state is State.OPEN
    assert breaker.source == "tools@1.0.0"
    assert (breaker.stats.failure_count, breaker.stats.rejected_requests) == (2, 7)


def _healthy_run(api: FakeMessagesAPI, *, client: bool) -> tuple[str, list[str], list[bool], int, list[str]]:
    tool = Tool.healthy("echo")
    seen: list[str] = []

    async def user_hook(hook_input, tool_use_id, context):
        seen.append(hook_input["tool_name"])
        return {}

    from claude_agent_sdk import HookMatcher

    script = api.play([call("echo", x=1), call("echo", x=2), "done"])
    hooks = {"PreToolUse": [HookMatcher(hooks=[user_hook])]}
    final = ask(options(api.url, {"tools": server([tool])}, hooks=hooks), client=client)
    last = script.requests[-1]
    return final, last.tool_results, last.errors, tool.runs, seen


@pytest.mark.parametrize("client", [True, False], ids=["client", "query"])
def test_a_healthy_tool_is_the_same_with_and_without(api, instrument, client):
    baseline = _healthy_run(api, client=client)
    assert baseline == ("done", ["echo ok 1", "echo ok 2"], [False, False], 2, ["mcp__tools__echo"] * 2)
    instrument("claude_agent_sdk")
    assert _healthy_run(api, client=client) == baseline  # the user's own hook still runs, once per call


def _wrong_paths(api: FakeMessagesAPI, good: Path) -> tuple[list[str], int]:
    def read_file(args):
        return Path(args["path"]).read_text()

    tool = Tool("read_file", read_file, {"path": str})
    steps = [call("read_file", path=f"/nonexistent/{i}.txt") for i in range(6)]
    script = api.play([*steps, call("read_file", path=str(good)), "done"])
    assert ask(options(api.url, {"tools": server([tool])})) == "done"
    return script.requests[-1].tool_results, tool.runs


def test_a_models_wrong_paths_stay_neutral(api, instrument, tmp_path):
    good = tmp_path / "notes.txt"
    good.write_text("the notes")
    breaker_settings(failure_threshold="2")
    baseline = _wrong_paths(api, good)
    assert baseline[1] == 7 and baseline[0][-1] == "the notes"
    assert all("No such file or directory" in r for r in baseline[0][:6])
    instrument("claude_agent_sdk")
    assert _wrong_paths(api, good) == baseline
    [breaker] = default_registry().find("read_file")
    assert breaker.state is State.CLOSED
    assert (breaker.stats.failure_count, breaker.stats.success_count) == (0, 1)


def _external(api: FakeMessagesAPI, **more) -> list[str]:
    """Four calls to the ``search`` tool of an external stdio MCP server that is down."""
    command, args = stdio_command("catalogue", "down")
    servers = {"search": {"type": "stdio", "command": command, "args": args}}
    script = api.play([("mcp__search__search", {"query": f"q{i}"}) for i in range(4)] + ["done"])
    assert ask(options(api.url, servers, **more)) == "done"
    return script.requests[-1].tool_results


def test_an_external_mcp_tool_is_judged_through_the_hooks(api, instrument):
    breaker_settings(failure_threshold="2")
    baseline = _external(api)
    assert len(baseline) == 4 and all(r == "Error executing tool search" for r in baseline)
    instrument("claude_agent_sdk")
    results = _external(api)
    assert [UNAVAILABLE in r for r in results] == [False, False, True, True]
    assert results[1] == "Error executing tool search"
    [breaker] = default_registry().find("search")  # keyed by the server's command
    assert breaker.state is State.OPEN and "mcp_search_server.py catalogue down" in breaker.source
    assert (breaker.stats.failure_count, breaker.stats.rejected_requests) == (2, 2)


def test_the_switch_fronts_a_stdio_server_with_the_proxy(api, instrument, monkeypatch):
    monkeypatch.setenv(PROXY_SWITCH, "true")
    monkeypatch.setenv("OTEL_BREAKER_FAILURE_THRESHOLD", "2")  # the proxy's settings, from this process
    instrument("claude_agent_sdk")
    results = _external(api)
    assert [UNAVAILABLE in r for r in results] == [False, False, True, True]  # the proxy's rejections
    assert default_registry().find("search") == []  # the proxy guards it: the hooks leave it alone


def test_the_proxy_rewrite_of_a_stdio_entry():
    entry = {"type": "stdio", "command": "npx", "args": ["-y", "server", "/tmp"], "env": {"TOKEN": "t"}}
    rewritten = proxied(entry, "/usr/bin/python3", {"OTEL_BREAKER_FAILURE_THRESHOLD": "2", "TOKEN": "x", "HOME": "/"})
    assert rewritten == {
        "type": "stdio",
        "command": "/usr/bin/python3",
        "args": ["-m", "otel_breaker", "mcp-proxy", "--", "npx", "-y", "server", "/tmp"],
        "env": {"OTEL_BREAKER_FAILURE_THRESHOLD": "2", "TOKEN": "t"},  # the entry's own env wins
    }
    assert proxied(rewritten) is rewritten  # never twice
    remote = {"type": "http", "url": "https://example.invalid/mcp"}
    assert proxied(remote) is remote
    sdk = {"type": "sdk", "name": "tools", "instance": object()}
    assert proxied(sdk) is sdk


def test_a_version_outside_the_tested_range_is_left_unpatched(monkeypatch):
    adapter = ClaudeAgentSDKAdapter()
    monkeypatch.setattr(adapter, "installed_version", lambda: "0.1.0")
    with pytest.raises(DidNotEnable, match="outside the tested range"):
        adapter.check_version()
    assert list(adapter.patched()) == []


def test_uninstrument_restores_exactly(instrument):
    from contract import tool_targets

    before = tool_targets("claude_agent_sdk")
    instrumentor = instrument("claude_agent_sdk")
    during = tool_targets("claude_agent_sdk")
    assert all(during[k] is not before[k] for k in before)
    instrumentor.uninstrument()
    after = tool_targets("claude_agent_sdk")
    assert all(after[k] is before[k] for k in before)


def test_the_status_reports_the_framework_active(instrument):
    status = instrument("claude_agent_sdk").status()
    assert status["claude_agent_sdk"].startswith("active (claude-agent-sdk "), status


def test_one_execute_tool_span_per_in_process_call_with_our_attributes(api, instrument, otel):
    instrument("claude_agent_sdk")
    tool = Tool.healthy("echo")
    api.play([call("echo", x=1), call("echo", x=2), "done"])
    assert ask(options(api.url, {"tools": server([tool])})) == "done"
    spans = otel.tool_spans("echo")
    assert [span.name for span in spans] == ["execute_tool echo"] * 2
    for span in spans:
        attributes = span.attributes
        assert attributes["gen_ai.operation.name"] == "execute_tool"
        assert attributes["otel_breaker.state"] == "closed" and attributes["otel_breaker.rejected"] is False
        assert attributes["otel_breaker.framework"] == "claude_agent_sdk"
        assert attributes.get("gen_ai.tool.call.id")  # the model's tool use id, from the CLI's request


#: What Claude reads once a run spent its waste budget on a tool.
SPENT = "unavailable for the rest of this run"


def _open_weather(api: FakeMessagesAPI, **settings: str) -> Tool:
    """``weather`` fails once in an earlier request: its breaker opens (threshold 1, a long cooldown)."""
    breaker_settings(failure_threshold="1", recovery_timeout="600", **settings)
    tool = Tool.failing("weather")
    api.play([call("weather", x=0), "done"])
    assert ask(options(api.url, {"tools": server([tool])})) == "done"
    assert tool.runs == 1
    return tool


@pytest.mark.parametrize("client", [True, False], ids=["client", "query"])
def test_a_run_that_keeps_calling_an_open_tool_is_answered_by_its_budget(api, instrument, client):
    """One request (a client's ``query()`` turn, or a ``query()`` call) is a run: its 4th call
    of the open tool reads that the run spent its budget; the next request starts whole."""
    instrument("claude_agent_sdk")
    tool = _open_weather(api)
    for _ in range(2):
        script = api.play([*(call("weather", x=i) for i in range(1, 7)), "done"])
        assert ask(options(api.url, {"tools": server([tool])}), client=client) == "done"
        read = script.requests[-1].tool_results
        assert tool.runs == 1
        assert len(read) == 6
        assert all(UNAVAILABLE in r for r in read[:3]), read
        assert all(SPENT in r for r in read[3:]), read
        assert all(script.requests[-1].errors)


def test_each_query_of_a_client_is_a_run_of_its_own(api, instrument):
    """Two ``client.query()`` turns on one connected client: each starts with its budget whole."""
    import asyncio

    from claude_agent_sdk import ClaudeSDKClient
    from driver import REQUEST_TIMEOUT

    instrument("claude_agent_sdk")
    tool = _open_weather(api)
    steps = [call("weather", x=i) for i in range(1, 5)]
    script = api.play([*steps, "first", *steps, "second"])

    async def two_turns() -> None:
        async with ClaudeSDKClient(options=options(api.url, {"tools": server([tool])})) as client:
            for _ in range(2):
                await client.query("go")
                async for _ in client.receive_response():
                    pass

    asyncio.run(asyncio.wait_for(two_turns(), REQUEST_TIMEOUT))
    read = script.requests[-1].tool_results  # the whole conversation: both turns' results
    assert tool.runs == 1
    assert len(read) == 8
    for turn in (read[:4], read[4:]):
        assert all(UNAVAILABLE in r for r in turn[:3]), read
        assert SPENT in turn[3], read


def test_a_budget_stop_cannot_end_the_clis_run_so_claude_reads_why(api, instrument):
    """``OTEL_BREAKER_RUN_ACTION=stop``: the CLI's run cannot be ended from here, so from the
    4th call on the in-process tool's error result says the run spent its budget on it."""
    instrument("claude_agent_sdk")
    tool = _open_weather(api, run_action="stop")
    script = api.play([*(call("weather", x=i) for i in range(1, 7)), "done"])
    assert ask(options(api.url, {"tools": server([tool])})) == "done"
    read = script.requests[-1].tool_results
    assert tool.runs == 1
    assert all(UNAVAILABLE in r for r in read[:3]), read
    assert all(SPENT in r for r in read[3:]) and len(read) == 6, read
