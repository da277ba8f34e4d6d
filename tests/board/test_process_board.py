"""The live breaker board of one process, in real headless Chromium."""

from __future__ import annotations

import time
import urllib.request

import pytest

from otel_breaker import CircuitBreakerConfig
from otel_breaker.breaker import CircuitOpenError
from otel_breaker.config import load_settings, set_settings
from otel_breaker.registry import BreakerRegistry
from otel_breaker.status_server import StatusServer
from otel_breaker.toolcall import ToolCall
from otel_breaker.upstream import breaker_of

TOKEN = "board-token-of-24-chars!"
INJECTION = "<img src=x onerror=alert(1)>"


def boom():
    raise ConnectionError("upstream refused the connection")


def fail(breaker, times):
    for _ in range(times):
        with pytest.raises((ConnectionError, CircuitOpenError)):
            breaker.call(boom)


@pytest.fixture
def registry(clock):
    return BreakerRegistry(clock=clock)


@pytest.fixture
def serve(registry):
    servers = []

    def start(**options):
        server = StatusServer("127.0.0.1", 0, registry=registry, **options)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def test_the_page_is_one_self_contained_file_with_a_strict_policy(serve):
    server = serve()
    with urllib.request.urlopen(server.url + "/", timeout=10) as response:
        html = response.read()
        policy = response.headers["Content-Security-Policy"]
        assert response.headers["Content-Type"].startswith("text/html")
    assert len(html) < 150_000
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy and "http" not in policy
    assert policy.count("'sha256-") == 2  # the one inline script and the one inline style, by hash
    for outside in (b"<script src", b"<link", b"@import", b"url(", b"innerHTML", b"insertAdjacentHTML", b"eval("):
        assert outside not in html


def test_a_failing_tool_turns_open_without_reload_then_closes_after_cooldown_and_probe(browser, serve, registry, clock):
    search = registry.get("search", CircuitBreakerConfig(failure_threshold=3, recovery_timeout=30, success_threshold=1))
    search.call(lambda: "ok")
    server = serve()
    browser.open(server.url + "/")
    closed = browser.wait(lambda: browser.tile("search"), 5)
    assert closed["state"] == "closed" and "CLOSED" in closed["badge"]
    closed_colour = closed["badgeColour"]

    fail(search, 3)
    opened_at = time.monotonic()
    shown = browser.wait(lambda: (t := browser.tile("search")) and t["state"] == "open" and t, 3)
    delay = time.monotonic() - opened_at
    print(f"\nopen shown in the browser {delay * 1000:.0f} ms after the breaker opened")
    assert "OPEN" in shown["badge"] and "HALF" not in shown["badge"]  # the state as text...
    assert shown["badgeColour"] != closed_colour  # ...and as colour
    assert shown["retry"].startswith("retry in ")
    assert "3 failed in a row" in shown["text"]

    clock.advance(31)  # the fake clock passes the cooldown: no sleeping
    half = browser.wait(lambda: (t := browser.tile("search")) and t["state"] == "half_open" and t, 3)
    assert "HALF-OPEN" in half["badge"]
    assert search.call(lambda: "probe ok") == "probe ok"  # the probe succeeds
    again = browser.wait(lambda: (t := browser.tile("search")) and t["state"] == "closed" and t, 3)
    assert again["badgeColour"] == closed_colour
    assert browser.console_errors() == []


def test_names_render_as_text_and_no_script_runs(browser, serve, registry):
    fail(registry.get(INJECTION, CircuitBreakerConfig(failure_threshold=1)), 1)
    registry.get("</script><script>alert(2)</script>").call(lambda: 1)
    server = serve()
    browser.open(server.url + "/")
    tile = browser.wait(lambda: browser.tile(INJECTION), 5)
    assert tile["name"] == INJECTION and tile["state"] == "open"
    assert browser.tile("</script><script>alert(2)</script>")["name"] == "</script><script>alert(2)</script>"
    driver = browser.driver
    assert driver.execute_script("return document.querySelectorAll('img, script:not(:first-of-type)').length") == 0
    assert driver.execute_script("return document.scripts.length") == 1
    time.sleep(0.3)  # an image error handler would have fired by now
    assert driver.execute_script("return window.__dialogs") == 0
    assert browser.console_errors() == []


def test_no_request_goes_to_another_origin(browser, serve, registry):
    registry.get("search").call(lambda: 1)
    server = serve()
    browser.open(server.url + "/")
    time.sleep(2.5)  # a few live polls
    urls = browser.requested_urls()
    assert any(url.startswith(server.url + "/board.json") for url in urls)
    outside = [url for url in urls if not url.startswith(server.url + "/")]
    assert outside == []


def test_filters_and_open_first(browser, serve, registry):
    set_settings(load_settings({"OTEL_BREAKER_SCOPE": "agent", "OTEL_BREAKER_UPSTREAMS": "serp=web_search"}))
    planner, writer = type("Planner", (), {})(), type("Writer", (), {})()
    for agent, name in ((planner, "planner"), (writer, "writer")):
        for tool in ("web_search", "calc"):
            registry.breaker_for(ToolCall(tool, agent=agent, agent_name=name)).call(lambda: 1)
    fail(registry.breaker_for(ToolCall("web_search", agent=writer, agent_name="writer")), 5)
    server = serve()
    browser.open(server.url + "/")
    driver = browser.driver
    order = driver.execute_script("return [...document.querySelectorAll('#tiles .tile')].map(t => t.dataset.state)")
    assert order[0] == "open" and order.count("open") == 1 and len(order) == 4

    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("id", "f-agent")).select_by_visible_text("planner")
    browser.wait(lambda: len(driver.find_elements("css selector", "#tiles .tile")) == 2, 3)
    Select(driver.find_element("id", "f-agent")).select_by_value("")
    Select(driver.find_element("id", "f-upstream")).select_by_visible_text("serp")
    browser.wait(lambda: len(driver.find_elements("css selector", "#tiles .tile")) == 2, 3)
    Select(driver.find_element("id", "f-state")).select_by_value("open")
    browser.wait(lambda: len(driver.find_elements("css selector", "#tiles .tile")) == 1, 3)
    assert "agent writer" in browser.tile("web_search")["text"]


def test_control_buttons_only_where_control_is_on(browser, serve, registry):
    registry.get("search").call(lambda: 1)
    read_only = serve()
    browser.open(read_only.url + "/")
    assert browser.driver.find_elements("css selector", ".tile button") == []

    controlled = serve(control_token=TOKEN)
    browser.open(controlled.url + "/")
    driver = browser.driver
    driver.find_element("css selector", "button[aria-label='open search']").click()
    prompt = browser.wait(lambda: _alert(driver), 3)
    prompt.send_keys(TOKEN)
    prompt.accept()
    shown = browser.wait(lambda: (t := browser.tile("search")) and t["state"] == "open" and t, 3)
    assert shown["retry"] == "held open until closed by hand"
    assert registry.get("search").state.value == "open"
    driver.find_element("css selector", "button[aria-label='close search']").click()  # the token is remembered
    browser.wait(lambda: (t := browser.tile("search")) and t["state"] == "closed", 3)


def _alert(driver):
    from selenium.common.exceptions import NoAlertPresentException

    try:
        return driver.switch_to.alert
    except NoAlertPresentException:
        return None


def test_a_thousand_breakers(browser, serve, registry):
    for index in range(1000):
        registry.get(f"tool_{index:04d}").call(lambda: 1)
    fail(registry.get("tool_0500", CircuitBreakerConfig(failure_threshold=1)), 1)
    server = serve()
    with urllib.request.urlopen(server.url + "/board.json", timeout=10) as response:
        data = response.read()
    assert len(data) < 150_000
    seconds = browser.open(server.url + "/")
    print(f"\n1,000 breakers: page ready in {seconds * 1000:.0f} ms, board.json {len(data)} bytes")
    tiles = browser.driver.execute_script(
        "return [...document.querySelectorAll('#tiles .tile')].map(t => t.dataset.tool)"
    )
    assert len(tiles) == 1000 and tiles[0] == "tool_0500"


def test_screenshots_of_the_process_board(browser, phone_browser, serve, registry, clock):
    """The picture in docs/dashboards.md: tools of two agents, an upstream, every state, sparklines."""
    set_settings(
        load_settings({"OTEL_BREAKER_SCOPE": "agent", "OTEL_BREAKER_UPSTREAMS": "serp=web_search,news_search"})
    )
    board_clock = [0.0]
    server = serve(board_clock=lambda: board_clock[0])
    agents = {"planner": type("Planner", (), {})(), "writer": type("Writer", (), {})()}
    config = CircuitBreakerConfig(failure_threshold=4, recovery_timeout=45)
    tools = {
        ("planner", "web_search"): (9, 0),
        ("planner", "calculator"): (4, 0),
        ("planner", "news_search"): (6, 1),
        ("writer", "web_search"): (5, 0),
        ("writer", "fetch_page"): (7, 2),
        ("writer", "spell_check"): (3, 0),
    }
    breakers = {
        key: registry.breaker_for(ToolCall(key[1], agent=agents[key[0]], agent_name=key[0]), config) for key in tools
    }
    serp = breaker_of(registry, "serp")
    for step in range(12):  # two minutes of traffic in 10-second buckets, on the board's own clock
        for key, (calls, failures) in tools.items():
            for index in range(calls + (step % 3)):
                if index < failures and step > 8 and key[1] == "fetch_page":
                    fail(breakers[key], 1)
                else:
                    breakers[key].call(lambda: 1)
            serp.call(lambda: 1)
        board_clock[0] += 10
        server.board.board_document({})
    fail(breakers[("planner", "news_search")], 4)
    clock.advance(30)
    fail(breakers[("writer", "fetch_page")], 4)
    clock.advance(16)  # news_search's cooldown is over: half-open, waiting for a probe; fetch_page retries in 29 s
    board_clock[0] += 1
    browser.open(server.url + "/")
    browser.wait(lambda: (t := browser.tile("news_search")) and t["state"] == "half_open", 3)
    assert browser.tile("fetch_page")["state"] == "open"
    print("\nscreenshot:", browser.screenshot("board-process.png"))
    phone_browser.open(server.url + "/")
    driver = phone_browser.driver
    assert driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    print("screenshot:", phone_browser.screenshot("board-phone.png"))
