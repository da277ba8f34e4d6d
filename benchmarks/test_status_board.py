"""What the status endpoint and the breaker board cost the agent they watch.

The agent is a loop of guarded calls over a registry of 1,000 or 10,000
breakers. Each row runs the same loop while something watches it:

* nothing (the reference);
* a client process polling ``GET /status`` 10 times a second (its first page);
* a client process polling ``GET /board.json`` 10 times a second (what the page polls, 10x its pace);
* the endpoint's former per-request work, 10 times a second: a full snapshot of
  every breaker serialised with ``json.dumps(indent=2)`` (the "before" row);
* real headless Chromium showing the board (when Debian's chromium is installed).

Compare the mean of each row with "nothing" in the same run: the agent should
keep at least 90% of its throughput with 10,000 breakers under 10 polls a
second. ``test_board_document`` is the cost of building the board's JSON from
scratch (a snapshot and the encoding) and its size; the page itself is static.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from otel_breaker.board import page
from otel_breaker.board.model import Board
from otel_breaker.registry import BreakerRegistry
from otel_breaker.status_server import ProcessSource, StatusServer, snapshot

CALLS_PER_ROUND = 200_000  # a round lasts long enough (~0.1-0.3 s) to meet the watcher's work
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def _tool() -> int:
    return 1


def _registry(size: int) -> BreakerRegistry:
    registry = BreakerRegistry(max_breakers=size + 100)
    for index in range(size):
        registry.get(f"tool_{index:05d}").call(_tool)
    return registry


class _Poller:
    """A client that asks 10 times a second, on a schedule (not as fast as it can)."""

    def __init__(self, ask, per_second: float = 10.0) -> None:
        self.ask = ask
        self.period = 1.0 / per_second
        self.done = threading.Event()
        self.answers = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self.done.is_set():
            self.ask()
            self.answers += 1
            next_at += self.period
            self.done.wait(max(0.0, next_at - time.monotonic()))

    def __enter__(self) -> _Poller:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(10)


POLLER = """
import http.client, sys, time
port, path, period = int(sys.argv[1]), sys.argv[2], 1.0 / float(sys.argv[3])
next_at = time.monotonic()
while True:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", path)
    response = connection.getresponse()
    response.read()
    connection.close()
    next_at += period
    time.sleep(max(0.0, next_at - time.monotonic()))
"""


class _ClientProcess:
    """A client in its own process (as curl or a browser is), polling 10 times a second:
    the agent process pays only for answering it."""

    def __init__(self, server: StatusServer, path: str, per_second: float = 10.0) -> None:
        self.command = [sys.executable, "-c", POLLER, server.url.rsplit(":", 1)[1], path, str(per_second)]
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> _ClientProcess:
        self.process = subprocess.Popen(self.command)
        time.sleep(0.3)  # started and polling
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)


def _old_way(registry: BreakerRegistry):
    def ask() -> None:
        (json.dumps({"source": "process", "breakers": snapshot(registry)}, indent=2) + "\n").encode()

    return ask


class _Browser:
    def __init__(self, url: str) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,800"):
            options.add_argument(argument)
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        self.show(url)

    def show(self, url: str) -> None:
        self.driver.get(url)
        if url == "about:blank":
            return
        deadline = time.monotonic() + 10
        while not self.driver.execute_script("return document.body.dataset.ready === '1'"):
            assert time.monotonic() < deadline, "the board did not load"
            time.sleep(0.05)

    def __enter__(self) -> _Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.driver.quit()


WATCHERS = ["nothing", "GET /status 10/s", "GET /board.json 10/s", "before: full snapshot + indent=2, 10/s", "browser"]


@pytest.mark.parametrize("size", [1_000, 10_000], ids=["1k breakers", "10k breakers"])
@pytest.mark.parametrize("watcher", WATCHERS)
def test_agent_throughput_while_watched(benchmark, size, watcher):
    if watcher == "browser" and not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("Debian's chromium and chromium-driver are not installed")
    benchmark.group = f"agent loop of {CALLS_PER_ROUND} guarded calls, {size} breakers"
    registry = _registry(size)
    breakers = registry.breakers()[:100]
    server = StatusServer("127.0.0.1", 0, registry=registry)

    def agent() -> None:
        for index in range(CALLS_PER_ROUND):
            breakers[index % 100].call(_tool)

    watchers = {
        "nothing": None,
        "GET /status 10/s": lambda: _ClientProcess(server, "/status"),
        "GET /board.json 10/s": lambda: _ClientProcess(server, "/board.json"),
        "before: full snapshot + indent=2, 10/s": lambda: _Poller(_old_way(registry)),
        "browser": lambda: _Browser(server.url + "/"),
    }
    make = watchers[watcher]
    try:
        if make is None:
            benchmark.pedantic(agent, rounds=15, warmup_rounds=1)
        else:
            with make():
                time.sleep(0.5)  # the watcher is in its stride
                benchmark.pedantic(agent, rounds=15, warmup_rounds=1)
    finally:
        server.close()
    benchmark.extra_info["calls_per_s"] = round(CALLS_PER_ROUND / benchmark.stats.stats.mean)
    benchmark.extra_info["snapshots"] = server.board.snapshots


@pytest.mark.parametrize("size", [1_000, 10_000], ids=["1k breakers", "10k breakers"])
@pytest.mark.parametrize(
    "watcher", ["GET /status 10/s", "GET /board.json 10/s", "before: full snapshot + indent=2, 10/s", "browser"]
)
def test_throughput_kept_interleaved(benchmark, size, watcher):
    """The agent's calls per second with the watcher on, over with it off, in
    alternating half-second windows, ten pairs, the order flipped in every other
    pair (so the machine's other load hits both alike).
    The figure is ``extra_info["kept"]``; the timing is one window with the watcher."""
    benchmark.group = f"share of throughput kept, {size} breakers"
    registry = _registry(size)
    breakers = registry.breakers()[:100]
    server = StatusServer("127.0.0.1", 0, registry=registry)
    if watcher == "browser":
        if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
            server.close()
            pytest.skip("Debian's chromium and chromium-driver are not installed")
        browser = _Browser(server.url + "/")

        @contextlib.contextmanager
        def watching():  # the board is open in the window only while watched
            browser.show(server.url + "/")
            yield
            browser.show("about:blank")
    else:
        browser = None

        def watching():
            if watcher.startswith("GET"):
                return _ClientProcess(server, watcher.split()[1])
            return _Poller(_old_way(registry))

    def window() -> int:
        calls = 0
        end = time.perf_counter() + 0.5
        while time.perf_counter() < end:
            for index in range(1000):
                breakers[index % 100].call(_tool)
            calls += 1000
        return calls

    alone = watched = 0
    try:
        for pair in range(10):
            if pair % 2:
                alone += window()
            with watching():
                watched += window()
            if not pair % 2:
                alone += window()
        benchmark.pedantic(window, rounds=1, iterations=1)
    finally:
        server.close()
        if browser is not None:
            browser.driver.quit()
    benchmark.extra_info["kept"] = round(watched / alone, 3)
    benchmark.extra_info["calls_per_s_alone"] = alone // 5
    benchmark.extra_info["calls_per_s_watched"] = watched // 5
    print(f"\n{size} breakers, {watcher}: kept {watched / alone:.1%} ({alone // 5} -> {watched // 5} calls/s)")


@pytest.mark.parametrize("size", [1_000, 10_000], ids=["1k breakers", "10k breakers"])
@pytest.mark.parametrize("path", ["/status", "/board.json", "before"])
def test_endpoint_cpu_share(benchmark, size, path):
    """The CPU the endpoint itself spends answering a client process that polls 10
    times a second, as a share of one core (``extra_info["cpu_share"]``): the agent's
    GIL-bound loop can lose at most this, whatever else the machine is doing. "before"
    is the former per-request work (a full snapshot with ``indent=2``), 10 times a second."""
    benchmark.group = f"endpoint CPU while polled 10/s, {size} breakers"
    registry = _registry(size)
    server = StatusServer("127.0.0.1", 0, registry=registry)
    shares = []

    def measure() -> None:
        cpu, wall = time.process_time(), time.monotonic()
        time.sleep(3.0)  # the agent idles: everything this process spends is the endpoint's
        shares.append((time.process_time() - cpu) / (time.monotonic() - wall))

    try:
        with _ClientProcess(server, path) if path != "before" else _Poller(_old_way(registry)):
            time.sleep(0.7)
            benchmark.pedantic(measure, rounds=2, iterations=1)
    finally:
        server.close()
    benchmark.extra_info["cpu_share"] = round(sum(shares) / len(shares), 4)
    print(f"\n{size} breakers, {path} polled 10/s: the endpoint used {sum(shares) / len(shares):.1%} of one core")


@pytest.mark.benchmark(group="board document built from scratch")
@pytest.mark.parametrize("size", [1_000, 10_000], ids=["1k breakers", "10k breakers"])
def test_board_document(benchmark, size):
    registry = _registry(size)
    board = Board(ProcessSource(registry))

    def build() -> bytes:
        board.invalidate()
        return board.board_document({})[0]

    body = benchmark(build)
    benchmark.extra_info["board_json_bytes"] = len(body)
    benchmark.extra_info["page_html_bytes"] = len(page())
    assert json.loads(body)["total"] == size
