"""The fleet board: ``otel-breaker status --serve`` over a real Redis, shown in headless Chromium."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import pytest
from otel_support import free_port

WORKER = """
import sys
from otel_breaker import CircuitBreakerConfig, get_circuit_breaker
from otel_breaker.breaker import CircuitOpenError

def boom():
    raise ConnectionError("connection refused")

config = CircuitBreakerConfig(failure_threshold=3, recovery_timeout=300)
for spec in sys.argv[1:]:
    tool, healthy, failing = spec.split(":")
    breaker = get_circuit_breaker(tool, config)
    rejected = 0
    for _ in range(int(healthy)):
        try:
            breaker.call(lambda: "ok")
        except CircuitOpenError:
            rejected += 1
    for _ in range(int(failing)):
        try:
            breaker.call(boom)
        except Exception:
            pass
    print(tool, breaker.state.value, f"rejected={rejected}")
"""


def run_worker(redis_url: str, prefix: str, *specs: str) -> str:
    """Another worker process sharing the store: guarded calls, then it exits."""
    env = {**os.environ, "OTEL_BREAKER_STORE": redis_url, "OTEL_BREAKER_REDIS_PREFIX": prefix}
    env["OTEL_SDK_DISABLED"] = "true"
    done = subprocess.run(
        [sys.executable, "-c", WORKER, *specs], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout


TOKEN = "fleet-token-of-24-chars!"


@pytest.fixture(params=[False], ids=["read-only"])
def fleet(request, redis_url):
    """``otel-breaker status --serve 127.0.0.1:PORT`` as a user runs it."""
    prefix = f"board-{uuid.uuid4().hex[:8]}"
    port = free_port()
    env = {**os.environ, "OTEL_BREAKER_UPSTREAMS": "inventory_api=inventory,stock"}
    if request.param:
        env.update(OTEL_BREAKER_STATUS_CONTROL="true", OTEL_BREAKER_STATUS_TOKEN=TOKEN)
    command = [sys.executable, "-m", "otel_breaker", "status", "--serve", f"127.0.0.1:{port}"]
    command += ["--store", redis_url, "--prefix", prefix]
    process = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    first = process.stdout.readline()
    if "fleet breaker board at" not in first:
        process.kill()
        pytest.fail(f"status --serve did not start: {first}{process.stdout.read()}")
    yield f"http://127.0.0.1:{port}", prefix
    process.terminate()
    process.wait(10)


def test_the_fleet_board_shows_a_breaker_another_worker_opened(browser, fleet, redis_url):
    url, prefix = fleet
    assert "search closed" in run_worker(redis_url, prefix, "search:6:0", "inventory:4:0", "stock:3:1")
    browser.open(url + "/")
    browser.wait(lambda: browser.tile("inventory"), 5)
    before = browser.tile("inventory")
    assert before["state"] == "closed"
    # The worker reported its four calls (each well under 10 ms) as it exited: the fleet's latency is
    # estimated from the duration buckets as Grafana's is (the first bucket is 0-10 ms).
    assert "p50 5.0 ms" in before["text"] and "p99 9.9 ms" in before["text"], before["text"]
    assert "fleet" in browser.driver.find_element("id", "source").text

    assert "inventory open" in run_worker(redis_url, prefix, "inventory:0:3")  # a second worker process
    opened_at = time.monotonic()
    shown = browser.wait(lambda: (t := browser.tile("inventory")) and t["state"] == "open" and t, 3)
    print(f"\nfleet: open shown {1000 * (time.monotonic() - opened_at):.0f} ms after the worker exited")
    assert "OPEN" in shown["badge"] and shown["badgeColour"] != before["badgeColour"]
    assert shown["retry"].startswith("retry in ")
    assert "upstream inventory_api" in shown["text"]
    outside = [u for u in browser.requested_urls() if not u.startswith(url + "/")]
    assert outside == []
    assert browser.console_errors() == []
    run_worker(redis_url, prefix, "fetch_page:5:3", "search:4:0")
    browser.wait(lambda: (t := browser.tile("fetch_page")) and t["state"] == "open", 3)
    print("screenshot:", browser.screenshot("board-fleet.png"))


def test_the_fleet_board_checks_the_host_header(fleet):
    url, _ = fleet
    request = urllib.request.Request(url + "/status", headers={"Host": "rebind.example"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 403
    with urllib.request.urlopen(url + "/status", timeout=10) as response:
        assert response.status == 200


def test_serve_refuses_a_non_loopback_address(redis_url, capsys):
    from otel_breaker.cli import main

    assert main(["status", "--serve", "0.0.0.0:9", "--store", redis_url]) != 0
    assert "not a loopback address" in capsys.readouterr().err


@pytest.mark.parametrize("fleet", [True], ids=["control"], indirect=True)
def test_fleet_control_acts_on_the_store(fleet, redis_url):
    url, prefix = fleet
    run_worker(redis_url, prefix, "search:2:0")

    def post(body: dict, token: str | None) -> int:
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(url + "/control", data=json.dumps(body).encode(), headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code

    assert post({"op": "open", "tool": "search"}, None) == 401
    assert post({"op": "open", "tool": "nothing-here"}, TOKEN) == 404
    assert post({"op": "open", "tool": "search"}, TOKEN) == 200
    with urllib.request.urlopen(url + "/status?tool=search", timeout=10) as response:
        row = json.loads(response.read())["breakers"][0]
    assert row["state"] == "open" and row["forced_open"]
    assert "search open" in run_worker(redis_url, prefix, "search:1:0")  # a worker follows the store


def test_a_read_only_fleet_board_refuses_control(fleet):
    url, _ = fleet
    request = urllib.request.Request(url + "/control", data=b'{"op": "reset", "all": true}', method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 403
