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
    dialog = browser.wait(lambda: _dialog(driver), 3)
    assert "tool search" in dialog["list"] and "no agent" in dialog["list"]
    driver.find_element("id", "confirm-token").send_keys(TOKEN)
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("id", "confirm-duration")).select_by_value("")  # until closed by hand
    driver.find_element("id", "confirm-go").click()
    shown = browser.wait(lambda: (t := browser.tile("search")) and t["state"] == "open" and t, 3)
    assert shown["retry"] == "held open until closed by hand"
    assert registry.get("search").state.value == "open"
    driver.find_element("css selector", "button[aria-label='close search']").click()
    browser.wait(lambda: _dialog(driver), 3)
    assert not driver.find_element("id", "confirm-token").is_displayed()  # the token is remembered
    driver.find_element("id", "confirm-go").click()
    browser.wait(lambda: (t := browser.tile("search")) and t["state"] == "closed", 3)


def _dialog(driver):
    return driver.execute_script(
        "const d = document.getElementById('confirm'); return d.open && "
        "{title: d.querySelector('h2').textContent, list: document.getElementById('confirm-list').innerText};"
    )


def _focused(driver):
    return driver.execute_script(
        "const a = document.activeElement; return a && (a.getAttribute('aria-label') || a.id || a.tagName);"
    )


def test_open_from_the_keyboard_names_one_breaker_keeps_focus_and_opens_for_a_while(browser, serve, registry, clock):
    """Two agents share a tool name: the board opens the one confirmed, for the time
    chosen, from the keyboard alone, and the focused button survives many polls."""
    from selenium.webdriver.common.keys import Keys

    set_settings(load_settings({"OTEL_BREAKER_SCOPE": "agent"}))
    agents = {name: type(name.title(), (), {})() for name in ("planner", "writer")}
    breakers = {
        name: registry.breaker_for(ToolCall("web_search", agent=agent, agent_name=name))
        for name, agent in agents.items()
    }
    for breaker in breakers.values():
        breaker.call(lambda: 1)
    server = serve(control_token=TOKEN)
    browser.open(server.url + "/")
    driver = browser.driver
    label = "open web_search of agent writer"
    driver.find_element("css selector", f"button[aria-label='{label}']").send_keys(Keys.NULL)  # focus it
    assert _focused(driver) == label
    polls = int(driver.execute_script("return document.body.dataset.polls"))
    for _ in range(4):  # every second's poll changes the row (calls/min) while the button is focused
        breakers["writer"].call(lambda: 1)
        polls += 1
        browser.wait(lambda p=polls: int(driver.execute_script("return document.body.dataset.polls")) > p, 5)
    assert _focused(driver) == label

    driver.switch_to.active_element.send_keys(Keys.ENTER)
    dialog = browser.wait(lambda: _dialog(driver), 3)
    assert dialog["title"] == "Open 1 breaker?"
    assert "tool web_search · agent writer · no source" in dialog["list"] and "planner" not in dialog["list"]
    token = driver.switch_to.active_element
    assert token.get_attribute("id") == "confirm-token"
    token.send_keys(TOKEN)
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("id", "confirm-duration")).select_by_value("60")
    token.send_keys(Keys.ENTER)
    browser.wait(lambda: breakers["writer"].state.value == "open", 3)
    assert breakers["planner"].state.value == "closed"  # the other agent's breaker of the same tool
    assert breakers["writer"].retry_after == pytest.approx(60)
    assert "agent writer" in driver.find_element("id", "message").text
    browser.wait(lambda: _focused(driver) == label, 3)  # back on the button that asked


def test_half_open_after_good_probes_shows_no_failure_streak_as_status_does(browser, serve, registry, clock):
    import json

    probing = registry.get(
        "probing", CircuitBreakerConfig(failure_threshold=5, recovery_timeout=10, success_threshold=60)
    )
    fail(probing, 5)
    clock.advance(11)
    for _ in range(59):
        assert probing.call(lambda: "probe ok") == "probe ok"
    server = serve()
    with urllib.request.urlopen(server.url + "/status?tool=probing", timeout=10) as response:
        row = json.loads(response.read())["breakers"][0]
    assert (row["state"], row["consecutive_failures"], row["successes"]) == ("half_open", 0, 59)
    browser.open(server.url + "/?view=table")
    shown = browser.wait(
        lambda: browser.driver.execute_script(
            "const r = document.querySelector('#rows tr[data-tool=probing]');"
            "return r && [...r.cells].map(c => c.textContent);"
        ),
        5,
    )
    assert shown[7] == "0" and shown[8] == "5" and shown[9] == "59"  # in a row, failures, successes: as /status
    browser.driver.get(server.url + "/")
    browser.wait(lambda: browser.tile("probing"), 5)
    assert "in a row" not in browser.tile("probing")["text"]


def test_a_minute_unwatched_then_the_first_view_shows_the_true_rate(browser, serve, registry):
    """The board's clock is driven: 65 simulated seconds of a steady 48 calls a minute
    (4 every 5 s, one failing in 4), sampled each second as the server's sampler does,
    with no page open; then the first view."""
    ticks = [0.0]
    server = serve(board_clock=lambda: ticks[0], sampling=False)
    steady = registry.get("steady", CircuitBreakerConfig(failure_threshold=100))
    for second in range(65):
        if second % 5 == 0:
            for index in range(4):
                if index == 0:
                    fail(steady, 1)
                else:
                    steady.call(lambda: 1)
        ticks[0] += 1
        server.board.sample()
    browser.open(server.url + "/?view=table")
    cells = browser.wait(
        lambda: browser.driver.execute_script(
            "const r = document.querySelector('#rows tr[data-tool=steady]');"
            "return r && [...r.cells].map(c => c.textContent);"
        ),
        5,
    )
    shown = int(cells[4])
    print(f"\nfirst view after 65 s unwatched: {shown} calls/min (true rate 48)")
    assert abs(shown - 48) <= 48 * 0.1
    assert cells[5] == "25%" and cells[6] == "0"
    points = browser.driver.execute_script(
        "return document.querySelector('#rows tr[data-tool=steady] polyline').getAttribute('points')"
    )
    heights = [float(point.split(",")[1]) for point in points.split()]
    assert len(set(heights[-6:])) == 1  # six even buckets of the last minute, no spike


def test_latency_p50_and_p99_in_the_table_and_on_tiles_sorted_by_p99(browser, serve, registry, clock):
    """Each call moves the breakers' fake clock by its duration, so every latency is exact
    without sleeping: search takes 1 to 100 ms, fetch 200 ms and once 1.5 s, calc 2.5 ms;
    idle has no call in the last minute."""
    server = serve()  # the endpoint runs: guarded calls are timed from now on
    for milliseconds in range(1, 101):
        registry.get("search").call(clock.advance, milliseconds / 1000)
    for milliseconds in [200] * 20 + [1500]:
        registry.get("fetch").call(clock.advance, milliseconds / 1000)
    for _ in range(3):
        registry.get("calc").call(clock.advance, 0.0025)
    registry.get("idle")
    browser.open(server.url + "/?view=table")
    driver = browser.driver

    def latencies():
        return driver.execute_script(
            """
            const heads = [...document.querySelectorAll('#table-head th')].map(th => th.dataset.sort);
            const p50 = heads.indexOf('latency_p50_ms'), p99 = heads.indexOf('latency_p99_ms');
            return [...document.querySelectorAll('#rows tr')].map(
                r => [r.dataset.tool, r.cells[p50].textContent, r.cells[p99].textContent]);
            """
        )

    shown = browser.wait(lambda: len(latencies()) == 4 and latencies(), 10)
    print(f"\nlatency shown (tool, p50, p99): {sorted(shown)}")
    assert sorted(shown) == [
        ["calc", "2.5 ms", "2.5 ms"],
        ["fetch", "200 ms", "1500 ms"],
        ["idle", "\u2013", "\u2013"],
        ["search", "50 ms", "99 ms"],
    ]

    driver.find_element("css selector", "th[data-sort=latency_p99_ms] button").click()
    browser.wait(lambda: [row[0] for row in latencies()] == ["fetch", "search", "calc", "idle"], 10)
    assert "sort=latency_p99_ms" in driver.current_url
    assert driver.find_element("css selector", "th[data-sort=latency_p99_ms]").get_attribute("aria-sort") == (
        "descending"
    )
    driver.find_element("css selector", "th[data-sort=latency_p99_ms] button").click()  # reversed: idle stays last
    browser.wait(lambda: [row[0] for row in latencies()] == ["calc", "search", "fetch", "idle"], 10)

    browser.open(server.url + "/")
    tile = browser.wait(lambda: browser.tile("search"), 10)
    assert "p50 50 ms" in tile["text"] and "p99 99 ms" in tile["text"]
    assert "p99 \u2013" in browser.tile("idle")["text"]
    assert browser.console_errors() == []


def test_a_thousand_breakers_in_the_table_sorted_filtered_and_kept_in_the_url(browser, serve, registry):
    from selenium.webdriver.support.ui import Select

    for index in range(1000):
        registry.get(f"tool_{index:04d}").call(lambda: 1)
    fail(registry.get("tool_0500", CircuitBreakerConfig(failure_threshold=1)), 1)
    server = serve()
    with urllib.request.urlopen(server.url + "/board.json", timeout=10) as response:
        data = response.read()
    assert len(data) < 200_000
    seconds = browser.open(server.url + "/")
    print(f"\n1,000 breakers: page ready in {seconds * 1000:.0f} ms, board.json {len(data)} bytes")
    driver = browser.driver
    tiles = driver.execute_script("return [...document.querySelectorAll('#tiles .tile')].map(t => t.dataset.tool)")
    assert len(tiles) == 1000 and tiles[0] == "tool_0500"
    for index in range(7):
        for _ in range(index + 1):
            registry.get(f"tool_09{index}0").call(lambda: 1)

    driver.find_element("id", "view-table").click()
    browser.wait(lambda: len(driver.find_elements("css selector", "#rows tr")) == 1000, 10)
    driver.find_element("css selector", "th[data-sort=calls_per_min] button").click()

    def first_rows():
        return driver.execute_script(
            "return [...document.querySelectorAll('#rows tr')].slice(0, 3).map(r => r.dataset.tool)"
        )

    browser.wait(lambda: first_rows() == ["tool_0960", "tool_0950", "tool_0940"], 5)
    assert "sort=calls_per_min" in driver.current_url and "view=table" in driver.current_url
    Select(driver.find_element("id", "f-state")).select_by_value("closed")
    browser.wait(lambda: len(driver.find_elements("css selector", "#rows tr")) == 999, 5)
    driver.find_element("id", "f-q").send_keys("tool_09")
    browser.wait(lambda: len(driver.find_elements("css selector", "#rows tr")) == 100, 5)
    url = driver.current_url
    assert "state=closed" in url and "q=tool_09" in url
    browser.open(url)  # a reload (or a shared link) keeps view, filters and sort
    browser.wait(lambda: len(driver.find_elements("css selector", "#rows tr")) == 100, 5)
    assert first_rows()[0] == "tool_0960"
    assert driver.find_element("id", "f-q").get_attribute("value") == "tool_09"
    assert driver.find_element("id", "view-table").get_attribute("aria-pressed") == "true"
    height = driver.execute_script("return document.documentElement.scrollHeight")
    print(f"table of 100 filtered rows: {height} px tall")


def test_screenshots_at_a_thousand_breakers(browser, serve, registry, clock):
    """The pictures in docs/dashboards.md: 1,000 breakers of four agents, as a table sorted by
    calls a minute and as tiles; the traffic is simulated on the board's own clock."""
    set_settings(load_settings({"OTEL_BREAKER_SCOPE": "agent", "OTEL_BREAKER_UPSTREAMS": "serp=web_search"}))
    ticks = [0.0]
    server = serve(board_clock=lambda: ticks[0], sampling=False, control_token=TOKEN)
    agents = {name: type(name.title(), (), {})() for name in ("planner", "writer", "researcher", "coder")}
    config = CircuitBreakerConfig(failure_threshold=4, recovery_timeout=45)
    breakers = []
    for index in range(250):
        for name, agent in agents.items():
            tool = "web_search" if index == 0 else f"tool_{index:03d}"
            breakers.append(registry.breaker_for(ToolCall(tool, agent=agent, agent_name=name), config))
    for second in range(120):
        for number, breaker in enumerate(breakers[:60]):
            if (second + number) % (number % 7 + 2) == 0:
                if number % 9 == 4 and second % 4 == 0:
                    fail(breaker, 1)
                else:  # each call takes its tool's time on the breakers' clock: latency to show
                    breaker.call(clock.advance, (number % 9 + 1 + second % 3) * 0.011)
        ticks[0] += 1
        server.board.sample()
    fail(breakers[5], 4)
    fail(breakers[13], 4)
    clock.advance(30)
    fail(breakers[22], 4)
    for _ in range(6):  # rejected: each shows in rejected/min
        try:
            breakers[22].call(lambda: 1)
        except CircuitOpenError:
            pass
    clock.advance(16)  # breakers[5] and [13] are half-open now
    ticks[0] += 1
    server.board.sample()
    browser.open(server.url + "/?view=table&sort=calls_per_min")
    browser.wait(lambda: len(browser.driver.find_elements("css selector", "#rows tr")) == 1000, 10)
    print("\nscreenshot:", browser.screenshot("board-table-1000.png"))
    browser.open(server.url + "/")
    browser.wait(lambda: len(browser.driver.find_elements("css selector", "#tiles .tile")) == 1000, 10)
    print("screenshot:", browser.screenshot("board-tiles-1000.png"))


def test_screenshots_of_the_process_board(browser, phone_browser, serve, registry, clock):
    """The picture in docs/dashboards.md: tools of two agents, an upstream, every state, sparklines."""
    set_settings(
        load_settings({"OTEL_BREAKER_SCOPE": "agent", "OTEL_BREAKER_UPSTREAMS": "serp=web_search,news_search"})
    )
    board_clock = [0.0]
    server = serve(board_clock=lambda: board_clock[0], sampling=False)
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
                else:  # each call takes its tool's time on the breakers' clock: latency to show
                    breakers[key].call(clock.advance, (len(key[1]) * 0.017) * (1 + index % 4) ** 2)
            serp.call(lambda: 1)
        for _ in range(10):  # ten seconds, each sampled as the server's sampler does
            board_clock[0] += 1
            server.board.sample()
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
