"""The in-process status endpoint and ``otel-breaker ... --url``, over real HTTP."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from otel_support import free_port

from otel_breaker import CircuitBreakerConfig, get_circuit_breaker, status_server
from otel_breaker.cli import main
from otel_breaker.config import load_settings
from otel_breaker.registry import default_registry
from otel_breaker.status_server import StatusAddressError, StatusServer, parse_address

TOKEN = "s3cret-token-of-24-chars"


def boom():
    raise ConnectionError("down")


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def post(url: str, body: dict, token: str | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def server():
    running = StatusServer("127.0.0.1", 0)
    yield running
    running.close()


@pytest.fixture
def control_server():
    running = StatusServer("127.0.0.1", 0, control_token=TOKEN)
    yield running
    running.close()


@pytest.fixture
def breakers(registry_clock):
    search = get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=2, recovery_timeout=30))
    for _ in range(2):
        with pytest.raises(ConnectionError):
            search.call(boom)
    get_circuit_breaker("calc").call(lambda: 1)
    return search


def test_status_lists_the_process_breakers_with_the_shared_store_fields(server, breakers):
    code, document = get(server.url + "/status")
    assert code == 200
    assert document["source"] == "process" and isinstance(document["pid"], int)
    rows = {row["tool"]: row for row in document["breakers"]}
    assert list(rows) == ["calc", "search"]
    search = rows["search"]
    assert search["state"] == "open"
    assert search["consecutive_failures"] == 2 and search["failures"] == 2 and search["opened"] == 1
    assert search["retry_after_s"] == 30 and search["forced_open"] is False
    assert search["last_change_age_s"] == 0 and isinstance(search["last_change_ms"], int)
    assert rows["calc"]["state"] == "closed" and rows["calc"]["successes"] == 1
    pytest.importorskip("redis")
    from otel_breaker.store.redis_admin import row as _row

    assert set(search) == set(_row("k", {"st": "0"}, 0)), "fields differ from the shared store's status"


def test_status_shows_each_tools_latency_over_the_last_minute(server, registry_clock):
    """Each call of ``slow`` moves the breakers' fake clock by its duration: exact, no sleeping."""
    slow = get_circuit_breaker("slow")
    for milliseconds in (80, 20, 60, 400, 40):
        slow.call(registry_clock.advance, milliseconds / 1000)
    get_circuit_breaker("idle")  # no call since the endpoint started
    code, document = get(server.url + "/status")
    assert code == 200
    rows = {row["tool"]: row for row in document["breakers"]}
    assert (rows["slow"]["latency_p50_ms"], rows["slow"]["latency_p99_ms"]) == (60.0, 400.0)
    assert (rows["idle"]["latency_p50_ms"], rows["idle"]["latency_p99_ms"]) == (None, None)


def test_the_endpoint_is_read_only_unless_control_is_switched_on(server, breakers):
    code, answer = post(server.url + "/control", {"op": "close", "tool": "search"}, TOKEN)
    assert code == 403 and "OTEL_BREAKER_STATUS_CONTROL" in answer["error"]
    assert breakers.state.value == "open"


def test_control_needs_the_token(control_server, breakers):
    assert post(control_server.url + "/control", {"op": "close", "tool": "search"})[0] == 401
    assert post(control_server.url + "/control", {"op": "close", "tool": "search"}, "wrong-token-xxxxxxxxx")[0] == 401
    assert breakers.state.value == "open"
    code, answer = post(control_server.url + "/control", {"op": "close", "tool": "search"}, TOKEN)
    assert (code, answer["count"]) == (200, 1)
    assert breakers.state.value == "closed"


def test_control_rejects_bad_requests_and_unknown_tools(control_server, breakers):
    url = control_server.url + "/control"
    assert post(url, {"op": "explode", "tool": "search"}, TOKEN)[0] == 400
    assert post(url, {"op": "open"}, TOKEN)[0] == 400
    assert post(url, {"op": "open", "tool": "search", "duration_s": -1}, TOKEN)[0] == 400
    for op in ("reset", "open", "close"):
        code, answer = post(url, {"op": op, "tool": "nosuch_tool"}, TOKEN)
        assert code == 404 and answer["error"] == "no breaker for tool 'nosuch_tool' in this process"
    assert sorted(b.name for b in default_registry().breakers()) == ["calc", "search"]


@pytest.mark.parametrize(
    ("addr", "expected"),
    [("127.0.0.1:9464", ("127.0.0.1", 9464)), ("localhost:0", ("localhost", 0)), ("[::1]:80", ("::1", 80))],
)
def test_loopback_addresses(addr, expected):
    assert parse_address(addr) == expected


@pytest.mark.parametrize("addr", ["0.0.0.0:9464", "10.1.2.3:80", "example.com:80", "[::]:80"])
def test_other_addresses_need_the_explicit_opt_in(addr):
    with pytest.raises(StatusAddressError, match="not a loopback address"):
        parse_address(addr)
    assert parse_address(addr, allow_remote=True)[1] in (9464, 80)


@pytest.mark.parametrize("addr", ["9464", "127.0.0.1", "127.0.0.1:port", "127.0.0.1:70000"])
def test_malformed_addresses(addr):
    with pytest.raises(StatusAddressError, match="OTEL_BREAKER_STATUS_ADDR"):
        parse_address(addr)


def test_a_bad_address_is_one_logged_line_and_the_program_goes_on(monkeypatch, caplog):
    monkeypatch.setattr(status_server, "_tried", False)
    settings = load_settings({"OTEL_BREAKER_STATUS_ADDR": "0.0.0.0:0"})
    with caplog.at_level(logging.ERROR, logger="otel_breaker"):
        assert status_server.start_from_settings(settings) is None
    (record,) = caplog.records
    assert "not a loopback address" in record.getMessage() and record.exc_info is None


def test_control_without_a_long_token_stays_read_only(monkeypatch, caplog):
    monkeypatch.setattr(status_server, "_tried", False)
    settings = load_settings(
        {
            "OTEL_BREAKER_STATUS_ADDR": "127.0.0.1:0",
            "OTEL_BREAKER_STATUS_CONTROL": "true",
            "OTEL_BREAKER_STATUS_TOKEN": "x",
        }
    )
    with caplog.at_level(logging.ERROR, logger="otel_breaker"):
        running = status_server.start_from_settings(settings)
    try:
        assert "stays read-only" in caplog.text
        assert post(running.url + "/control", {"op": "reset", "all": True}, "x")[0] == 403
    finally:
        running.close()
        monkeypatch.setattr(status_server, "_running", None)


def test_the_first_guarded_function_starts_the_endpoint_from_the_environment():
    port = free_port()
    script = (
        "import json, urllib.request\n"
        "from otel_breaker import guard\n"
        "@guard('lookup')\n"
        "def lookup(x): return x\n"
        "lookup(1)\n"
        f"body = urllib.request.urlopen('http://127.0.0.1:{port}/status', timeout=10).read()\n"
        "print(json.dumps([(r['tool'], r['state'], r['successes']) for r in json.loads(body)['breakers']]))\n"
    )
    env = {"OTEL_BREAKER_STATUS_ADDR": f"127.0.0.1:{port}", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [["lookup", "closed", 1]]


# -- the command line --------------------------------------------------------------------------


def test_cli_status_url_table_and_json(server, breakers, capsys):
    assert main(["status", "--url", server.url]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["TOOL", "SCOPE", "STATE", "FAILURES", "RETRY-AFTER", "LAST", "CHANGE"]
    assert "search" in out and "open" in out and "30.0s" in out
    assert main(["status", "--url", server.url, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["breakers"]
    assert [row["tool"] for row in rows] == ["calc", "search"]


def test_cli_control_over_url(control_server, breakers, capsys, monkeypatch):
    monkeypatch.setenv("OTEL_BREAKER_STATUS_TOKEN", TOKEN)
    assert main(["close", "search", "--url", control_server.url]) == 0
    assert "closed 1 breaker of tool 'search'" in capsys.readouterr().out
    assert breakers.state.value == "closed"
    assert main(["open", "search", "--for", "5", "--url", control_server.url]) == 0
    assert breakers.state.value == "open" and breakers.retry_after == pytest.approx(5)
    for verb in ("reset", "open", "close"):
        assert main([verb, "nosuch_tool", "--url", control_server.url]) == 2
        assert "no breaker for tool 'nosuch_tool'" in capsys.readouterr().err
    monkeypatch.delenv("OTEL_BREAKER_STATUS_TOKEN")
    assert main(["reset", "--all", "--url", control_server.url]) == 2
    assert "OTEL_BREAKER_STATUS_TOKEN" in capsys.readouterr().err


def test_cli_errors_are_one_line(capsys):
    port = free_port()  # nothing listens there
    assert main(["status", "--url", f"http://127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert "cannot read breaker status" in err and "Traceback" not in err
    assert main(["status", "--url", "ftp://x"]) == 2
    assert "expected http://HOST:PORT" in capsys.readouterr().err


def test_a_port_clash_with_the_prometheus_exporter_is_named(monkeypatch, caplog):
    import socket

    monkeypatch.setattr(status_server, "_tried", False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", str(port))
        settings = load_settings({"OTEL_BREAKER_STATUS_ADDR": f"127.0.0.1:{port}"})
        with caplog.at_level(logging.ERROR, logger="otel_breaker"):
            assert status_server.start_from_settings(settings) is None
    (record,) = [r for r in caplog.records if "status endpoint not started" in r.getMessage()]
    assert "the Prometheus exporter's" in record.getMessage()
    assert "OTEL_EXPORTER_PROMETHEUS_PORT" in record.getMessage()


@pytest.mark.parametrize(
    ("url", "linked"),
    [("http://127.0.0.1:9471/", True), ("javascript:alert(1)", False), ("http://x/\x1b[2J", False)],
)
def test_the_process_board_links_to_the_fleet_board_from_the_environment(monkeypatch, caplog, url, linked):
    settings = load_settings({"OTEL_BREAKER_STATUS_ADDR": "127.0.0.1:0", "OTEL_BREAKER_STATUS_FLEET_URL": url})
    monkeypatch.setattr(status_server, "_running", None)
    monkeypatch.setattr(status_server, "_tried", False)
    with caplog.at_level(logging.WARNING, logger="otel_breaker"):
        running = status_server.start_from_settings(settings)
    try:
        code, document = get(running.url + "/board.json")
        assert code == 200
        assert document["fleet"] == (url if linked else None)
        assert ("not an http(s) URL" in caplog.text) is not linked
        assert "\x1b" not in caplog.text
    finally:
        running.close()
        monkeypatch.setattr(status_server, "_running", None)
