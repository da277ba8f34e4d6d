"""Upstream grouping, the transport classifier and the upstream breaker in ``@guard``."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl

import pytest

from otel_breaker import Guard, ToolCall, guard, upstream
from otel_breaker.breaker import CircuitBreakerConfig, State
from otel_breaker.classify import is_transport_error, register_transport_error, unregister_transport_error
from otel_breaker.config import load_settings, parse_upstreams, set_settings
from otel_breaker.registry import default_registry

# -- configuration -----------------------------------------------------------------------------


def test_upstreams_syntax():
    assert parse_upstreams("serp=web_search,news_search;github=gh_*") == {
        "serp": ("web_search", "news_search"),
        "github": ("gh_*",),
    }


def test_bad_upstream_entry_is_one_logged_line_and_valid_parts_apply(caplog):
    with caplog.at_level(logging.WARNING, logger="otel_breaker"):
        settings = load_settings({"OTEL_BREAKER_UPSTREAMS": "serp=web_search;nonsense;x=bad pattern"}, strict=False)
    assert settings.upstreams == {"serp": ("web_search",)}
    lines = [r.getMessage() for r in caplog.records if "OTEL_BREAKER_UPSTREAMS" in r.getMessage()]
    assert len(lines) == 1 and "nonsense" in lines[0]


def test_grouping_by_glob_first_match_wins_else_source():
    settings = load_settings({"OTEL_BREAKER_UPSTREAMS": "serp=web_search,news_*;github=gh_*;all=*_search"})
    assert upstream.upstream_of("news_top", None, settings) == "serp"
    assert upstream.upstream_of("web_search", None, settings) == "serp"
    assert upstream.upstream_of("gh_issues", "gh-mcp@1", settings) == "github"
    assert upstream.upstream_of("image_search", None, settings) == "all"
    assert upstream.upstream_of("calculator", None, settings) is None
    assert upstream.upstream_of("read_file", "files@2.0", settings) == "files@2.0"


# -- the transport-vs-tool classifier -----------------------------------------------------------


class HTTPStatusError(Exception):
    """Shaped like httpx's (status read from ``response.status_code``)."""

    def __init__(self, status: int):
        self.response = type("Response", (), {"status_code": status})()


class ClientResponseError(Exception):
    """Shaped like aiohttp's (status in ``status``)."""

    def __init__(self, status: int):
        self.status = status


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionRefusedError("refused"),
        ConnectionResetError("reset"),
        socket.gaierror(-2, "Name or service not known"),
        ssl.SSLError("bad handshake"),
        TimeoutError("read timed out"),
        HTTPStatusError(502),
        HTTPStatusError(503),
        ClientResponseError(504),
        RuntimeError("wrapped"),  # its cause is read below
    ],
    ids=lambda e: type(e).__name__,
)
def test_transport_failures(exc):
    if type(exc) is RuntimeError:
        exc.__cause__ = ConnectionResetError("reset")
    assert is_transport_error(exc)


@pytest.mark.parametrize(
    "exc",
    [ValueError("bad input"), RuntimeError("tool bug"), HTTPStatusError(404), HTTPStatusError(500), PermissionError()],
    ids=lambda e: type(e).__name__,
)
def test_a_tools_own_errors_are_not_transport(exc):
    assert not is_transport_error(exc)


def test_classifier_is_extensible():
    class GatewayDown(Exception):
        pass

    register_transport_error(GatewayDown)
    veto = register_transport_error(lambda e: False if "ours" in str(e) else None) or None
    try:
        assert is_transport_error(GatewayDown())
        assert not is_transport_error(ConnectionResetError("ours"))
    finally:
        unregister_transport_error(GatewayDown)
        from otel_breaker import classify

        classify._user_rules.clear()
    assert veto is None
    assert not is_transport_error(GatewayDown())


# -- @guard behind an upstream ------------------------------------------------------------------


@pytest.fixture
def serp():
    set_settings(
        load_settings(
            {
                "OTEL_BREAKER_UPSTREAMS": "serp=web_search,news_*",
                "OTEL_BREAKER_FAILURE_THRESHOLD": "3",
                "OTEL_BREAKER_RECOVERY_TIMEOUT": "30",
            }
        )
    )


def test_guarded_functions_share_their_upstream_breaker(serp, registry_clock):
    runs = []

    def tool(name, fail):
        @guard(name)
        def run():
            runs.append(name)
            if fail[0]:
                raise ConnectionRefusedError("refused")
            return name

        return run

    down = [True]
    tools = [tool(n, down) for n in ("web_search", "news_a", "news_b", "news_c")]
    results = []
    for _ in range(3):
        for t in tools:
            try:
                results.append(t())
            except ConnectionRefusedError:
                results.append("raised")
    assert len(runs) == 3, "failure_threshold calls reach the dead upstream, not 4 x threshold"
    assert all(r["upstream"] == "serp" and "upstream 'serp'" in r["error"] for r in results[3:])
    assert all(b.state is State.CLOSED for b in default_registry().breakers() if not b.name.startswith("upstream:"))
    # Half-open: one probe through any tool; it succeeds and every tool is back.
    down[0] = False
    registry_clock.advance(31)
    assert tools[2]() == "news_b"
    assert [t() for t in tools] == ["web_search", "news_a", "news_b", "news_c"]


def test_a_tools_own_exceptions_never_open_the_upstream(serp):
    @guard("web_search")
    def buggy():
        raise ValueError("the tool's own bug")

    for _ in range(3):
        with pytest.raises(ValueError):
            buggy()
    rejected = buggy()
    assert rejected["circuit_open"] and "upstream" not in rejected
    assert upstream.breaker_of(default_registry(), "serp").state is State.CLOSED
    assert default_registry().get("web_search").state is State.OPEN


async def test_one_probe_at_a_time_while_half_open(serp, registry_clock):
    gate = asyncio.Event()
    runs = []

    @guard("news_x", config=CircuitBreakerConfig(failure_threshold=3))
    async def news():
        runs.append(1)
        await gate.wait()
        return "ok"

    breaker = upstream.breaker_of(default_registry(), "serp")
    breaker.force_open(30)
    registry_clock.advance(31)
    first = asyncio.ensure_future(news())
    await asyncio.sleep(0)
    second = await news()  # while the probe is in flight
    assert second["upstream"] == "serp" and len(runs) == 1
    gate.set()
    assert await first == "ok"
    assert await news() == "ok"  # success_threshold (2) probes, one after the other
    assert breaker.state is State.CLOSED


def test_healthy_calls_are_unchanged_with_upstreams_configured(serp):
    @guard("web_search")
    def search(q):
        return {"q": q, "hits": [1, 2]}

    plain = [{"q": i, "hits": [1, 2]} for i in range(10)]
    assert [search(i) for i in range(10)] == plain


def test_guard_uses_the_registry_it_is_given_even_while_empty():
    from otel_breaker.config import Settings
    from otel_breaker.registry import BreakerRegistry

    registry = BreakerRegistry(settings=Settings(upstreams={"serp": ("web_search",)}))
    assert len(registry) == 0

    @guard("web_search", registry=registry)
    def search():
        raise ConnectionRefusedError("refused")

    for _ in range(6):
        try:
            search()
        except ConnectionRefusedError:
            pass
    assert upstream.breaker_of(registry, "serp").state is State.OPEN
    assert not default_registry().breakers()


def test_status_block_names_the_open_upstream(serp):
    from otel_breaker.degrade import tool_status_block

    assert tool_status_block() == ""
    upstream.breaker_of(default_registry(), "serp").force_open(30)
    block = tool_status_block()
    assert "- every tool of upstream 'serp' (open, unreachable): may be retried in about 30s." in block


def test_transport_text_for_frameworks_that_return_an_exception_as_text():
    from otel_breaker.classify import _user_texts, is_transport_text, register_transport_text

    assert is_transport_text("Error: [Errno 111] Connection refused")
    assert is_transport_text("HTTP 503 Service Unavailable from api.example")
    assert is_transport_text("Failed to resolve: Temporary failure in name resolution")
    assert not is_transport_text("ValueError: city 'Atlantis' not found")
    assert not is_transport_text("the model's arguments were invalid")
    register_transport_text(r"quota backend offline")
    try:
        assert is_transport_text("Error: Quota backend OFFLINE, try later")
    finally:
        _user_texts.clear()
    assert not is_transport_text("Error: Quota backend OFFLINE, try later")


def test_upstreams_configured_after_a_guarded_function_ran_apply_to_it():
    """``@guard`` keeps its breaker between calls; replaced settings drop what it kept."""
    runs = []

    @guard("web_search")
    def web_search():
        runs.append(1)
        raise ConnectionRefusedError("refused")

    @guard("news_a")
    def news_a():
        runs.append(2)
        return "news"

    assert news_a() == "news"  # kept with the settings of the time: no upstream
    set_settings(
        load_settings({"OTEL_BREAKER_UPSTREAMS": "serp=web_search,news_*", "OTEL_BREAKER_FAILURE_THRESHOLD": "2"})
    )
    for _ in range(2):
        with pytest.raises(ConnectionRefusedError):
            web_search()
    answer = news_a()
    assert answer["upstream"] == "serp" and runs == [2, 1, 1]


def test_an_open_upstream_rejects_fallback_alternatives_behind_it():
    # serp is dead: web_search's transport failures open it; call_with_fallback's
    # news_search runs behind serp too, so it is rejected without running, and the
    # local backup (behind no upstream) answers.
    from otel_breaker.fallback import call_with_fallback

    set_settings(load_settings({"OTEL_BREAKER_UPSTREAMS": "serp=web_search,news_search"}))
    ran = []

    def web_search(query):
        ran.append("web_search")
        raise ConnectionRefusedError(111, "Connection refused")

    def news_search(query):
        ran.append("news_search")
        return "news"

    def backup(query):
        ran.append("backup")
        return "backup"

    for _ in range(5):
        with pytest.raises(ConnectionRefusedError):
            Guard().call(ToolCall("web_search"), web_search, ("q",))
    assert default_registry().get(upstream.UPSTREAM_PREFIX + "serp").state is State.OPEN
    ran.clear()
    result = call_with_fallback(("news_search", news_search), ("backup", backup), args=("q",))
    assert result == "backup" and ran == ["backup"]


async def test_an_open_upstream_rejects_async_fallback_alternatives_behind_it():
    from otel_breaker.fallback import acall_with_fallback

    set_settings(load_settings({"OTEL_BREAKER_UPSTREAMS": "serp=web_search,news_search"}))
    default_registry().get(upstream.UPSTREAM_PREFIX + "serp").force_open(60)
    ran = []

    async def news_search(query):
        ran.append("news_search")
        return "news"

    async def backup(query):
        ran.append("backup")
        return "backup"

    assert await acall_with_fallback(("news_search", news_search), ("backup", backup), args=("q",)) == "backup"
    assert ran == ["backup"]
    only = await acall_with_fallback(("news_search", news_search), args=("q",))
    assert only["circuit_open"] is True and ran == ["backup"]
