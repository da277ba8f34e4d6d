"""The run of a client of the proxy: its session, or the run its requests name in ``_meta``.

A listening proxy with two HTTP clients (the SDK's ``Client``, real server subprocess):
the loop guard and the waste budget count per client session, and a breaker is shared."""

from __future__ import annotations

import pytest
from proxy_scenarios import connect, text
from proxy_support import THRESHOLD

UNAVAILABLE = "is temporarily unavailable"
SPENT = "unavailable for the rest of this run"
NO_TOOL = "no tool of that name exists"


pytestmark = pytest.mark.usefixtures("quiet_logs")


async def names(client) -> set[str]:
    return {tool.name for tool in (await client.list_tools()).tools}


async def test_a_session_that_keeps_calling_an_open_tool_loses_it_and_another_session_keeps_it(listening_proxy):
    url = listening_proxy()
    async with connect(url, mode="legacy") as first, connect(url, mode="legacy") as second:
        assert "broken" in await names(first)
        answers = [text(await first.call_tool("broken", {"text": "x"})) for _ in range(THRESHOLD + 5)]
        # The breaker opens after THRESHOLD failures; three rejections, then the run's budget is spent.
        rejected = answers[THRESHOLD:]
        assert all(UNAVAILABLE in a for a in rejected[:3]), rejected
        assert all(SPENT in a for a in rejected[3:]), rejected
        assert "broken" not in await names(first) and "echo" in await names(first)
        # The other client's run keeps its menu; the breaker, shared, still rejects for it.
        assert "broken" in await names(second)
        assert UNAVAILABLE in text(await second.call_tool("broken", {"text": "x"}))


async def test_separate_sessions_start_clean_and_a_session_repeating_a_mistake_meets_the_loop_guard(listening_proxy):
    url = listening_proxy()
    for _ in range(5):  # five clients, each calling a name the server has not, once
        async with connect(url, mode="legacy") as client:
            assert NO_TOOL not in text(await client.call_tool("lookup_order", {}))
    async with connect(url, mode="legacy") as client:
        answers = [text(await client.call_tool("echo", {"wrong": 1})) for _ in range(5)]
    assert not any("this exact call" in a for a in answers[:3])
    assert all("this exact call" in a for a in answers[3:])


async def test_sessions_naming_one_run_in_meta_share_its_budget(listening_proxy):
    url = listening_proxy()
    answers = []
    for _ in range(THRESHOLD + 5):  # a host that opens a session per call, one conversation
        async with connect(url, mode="legacy") as client:
            result = await client.call_tool("broken", {"text": "x"}, meta={"otel-breaker/run": "conversation-3"})
            answers.append(text(result))
    rejected = answers[THRESHOLD:]
    assert all(UNAVAILABLE in a for a in rejected[:3]) and all(SPENT in a for a in rejected[3:]), rejected
