"""Open tools leave the menu only when asked, and come back at half-open."""

from __future__ import annotations

from otel_breaker import menu
from otel_breaker.breaker import FAILURE, CircuitBreakerConfig
from otel_breaker.config import load_settings, set_settings
from otel_breaker.registry import default_registry


def _open(name: str) -> None:
    breaker = default_registry().get(name, CircuitBreakerConfig(failure_threshold=1, recovery_timeout=30))
    breaker.on_outcome(breaker.try_acquire(), FAILURE)


def test_off_by_default_returns_the_same_object(registry_clock, monkeypatch):
    monkeypatch.delenv("OTEL_BREAKER_HIDE_OPEN_TOOLS", raising=False)
    _open("search")
    tools = ["search", "lookup"]
    assert menu.visible_tools(tools, str) is tools
    assert not menu.is_hidden("search")
    assert menu.hidden_names(tools) == frozenset()


def test_open_tool_hidden_until_half_open(registry_clock, monkeypatch):
    monkeypatch.setenv("OTEL_BREAKER_HIDE_OPEN_TOOLS", "true")
    set_settings(None)
    tools = ["search", "lookup"]
    assert menu.visible_tools(tools, str) is tools  # nothing open: the same object
    _open("search")
    assert menu.visible_tools(tools, str) == ["lookup"]
    assert menu.is_hidden("search") and not menu.is_hidden("lookup")
    assert menu.hidden_names(tools) == {"search"}
    registry_clock.advance(31)  # past the cooldown: half-open, back for its probe
    assert menu.visible_tools(tools, str) is tools


def test_source_keeps_same_named_tools_apart(registry_clock, monkeypatch):
    monkeypatch.setenv("OTEL_BREAKER_HIDE_OPEN_TOOLS", "1")
    set_settings(None)
    from otel_breaker.toolcall import ToolCall

    config = CircuitBreakerConfig(failure_threshold=1, recovery_timeout=30)
    breaker = default_registry().breaker_for(ToolCall(tool="search", source="a"), config)
    breaker.on_outcome(breaker.try_acquire(), FAILURE)
    assert menu.is_hidden("search", "a") and not menu.is_hidden("search", "b") and not menu.is_hidden("search")


def test_unavailable_description_marks_once():
    once = menu.unavailable_description("Search the web.")
    assert once.startswith("Search the web.") and menu.UNAVAILABLE_NOTE in once
    assert menu.unavailable_description(once) == once


def test_every_tool_behind_an_open_upstream_leaves_the_menu():
    """An open upstream hides all its tools, including ones never called yet."""
    from otel_breaker import upstream
    from otel_breaker.menu import hidden_names, is_hidden, open_tools, visible_tools

    set_settings(load_settings({"OTEL_BREAKER_HIDE_OPEN_TOOLS": "true", "OTEL_BREAKER_UPSTREAMS": "serp=web_*"}))
    assert not open_tools()
    upstream.breaker_of(default_registry(), "serp").force_open(60)
    tools = ["web_search", "web_news", "calculator"]
    assert visible_tools(tools, str) == ["calculator"]
    assert hidden_names(tools) == {"web_search", "web_news"}
    assert is_hidden("web_search") and not is_hidden("calculator")
    # An MCP server's tools (grouped by their source) leave with it.
    upstream.breaker_of(default_registry(), "files@1.0").force_open(60)
    assert hidden_names(["read", "write"], source="files@1.0") == {"read", "write"}
    assert not hidden_names(["read"], source="other@1.0")
