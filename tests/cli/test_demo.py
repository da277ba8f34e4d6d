"""``otel-breaker demo``: the run without breakers and the run with them, compared."""

from __future__ import annotations

import http.server
import json
import os
import pty
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from typing import ClassVar

import pytest
from cli_helpers import assert_one_line_error, clean_env, run_cli


def row(output: str, label: str) -> tuple[str, str]:
    match = re.search(rf"^{re.escape(label)}\s+(\S+(?: \S+)?)\s{{2,}}(\S+(?: \S+)?)$", output, re.MULTILINE)
    assert match, f"no row {label!r} in:\n{output}"
    return match.group(1), match.group(2)


def number(text: str) -> int:
    return int(text.replace(",", ""))


def test_demo_compares_the_runs_and_shows_the_timeline():
    started = time.monotonic()
    result = run_cli("demo")
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 20
    out = result.stdout
    assert result.stderr == ""  # not a terminal: no progress bar

    without, with_ = row(out, "tool calls attempted")
    assert number(with_) < number(without)
    failed_without, failed_with = (number(v) for v in row(out, "  failed"))
    assert failed_with * 4 < failed_without
    assert row(out, "  rejected by a breaker (not run)")[0] == "0"
    assert number(row(out, "  rejected by a breaker (not run)")[1]) > 0
    counted_without, counted_with = row(out, "  rejected calls (otel_breaker.tokens.saved) (*)")
    assert counted_without == "-" and number(counted_with) > 10_000
    spent_without, spent_with = (number(v) for v in row(out, "est. tokens spent on tool round-trips"))
    assert spent_with < spent_without
    # the table is consistent: "tokens saved" is the difference between the "spent" columns ...
    assert row(out, "est. tokens saved (difference in tokens spent)") == ("-", f"{spent_without - spent_with:,}")
    # ... and one figure: the metric's count and the rest add up to it
    rest = number(row(out, "  the rest: retries not made (*)")[1])
    assert number(counted_with) + rest == spent_without - spent_with and rest > 0
    rejected = number(row(out, "  rejected by a breaker (not run)")[1])
    note = " ".join(out.split("\n(*) ")[1].split("\n\n")[0].split())
    assert f"per rejected call ({rejected})" in note
    assert f"~{number(counted_with) / rejected:,.0f} tokens" in note
    assert "below the measured saving" in note
    wait_without, wait_with = row(out, "time waiting on a dead tool")
    assert wait_without == "45m 00s"  # 30 dead questions x 3 attempts x 30 s
    assert re.fullmatch(r"\d+m \d\ds", wait_with)

    timeline = out.split("Timeline of breaker state changes")[1]
    assert re.search(r"^\s+\d\d:\d\d\s+web_search\s+closed -> open\s+consecutive_failures=3$", timeline, re.M)
    assert "half-open -> open" in timeline and "probe_failed" in timeline
    assert re.search(r"web_search\s+half-open -> closed\s+probe_succeeded", timeline)
    # openings as `tune` counts them (closed -> open), re-openings by failed probes apart
    summary = " ".join(timeline.split())
    assert "'web_search' opened once, re-opened " in summary
    reopened = int(re.search(r"re-opened (\d+) times by failed probes", summary).group(1))
    assert reopened >= 2
    # it ends with a pointer to the reader's own agent
    assert out.rstrip().splitlines()[-2].strip() == "OTEL_BREAKER_ENABLED=true python my_agent.py"

    assert "Use an alternative instead: 'backup_search'" in out
    assert "Tool status (circuit breakers):" in out


def test_demo_is_deterministic():
    first, second = run_cli("demo", "--steps", "30"), run_cli("demo", "--steps", "30")
    assert first.returncode == second.returncode == 0
    assert first.stdout == second.stdout


def test_demo_json_matches_the_table():
    result = run_cli("demo", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    without, with_ = data["without_breakers"], data["with_breakers"]
    assert without["failed"] == 90 and without["rejected"] == 0 and without["tokens_saved"] == 0
    assert with_["rejected"] > 0 and with_["failed"] < without["failed"]
    assert with_["tokens_saved"] > 0
    assert data["openings"]["web_search"] == 1 and data["reopenings"]["web_search"] >= 2
    assert data["timeline"][0]["to"] == "open"
    assert data["timeline"][-1] == {**data["timeline"][-1], "from": "half_open", "to": "closed"}
    text = run_cli("demo").stdout
    assert row(text, "  rejected by a breaker (not run)")[1] == str(with_["rejected"])
    assert row(text, "  rejected calls (otel_breaker.tokens.saved) (*)")[1] == f"{with_['tokens_saved']:,}"
    assert data["tokens_saved_measured"] == without["tokens_spent"] - with_["tokens_spent"]
    assert row(text, "est. tokens saved (difference in tokens spent)")[1] == f"{data['tokens_saved_measured']:,}"


def test_demo_shows_what_hiding_open_tools_saves():
    result = run_cli("demo", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    cases = {case["case"]: case for case in data["menu_cases"]}
    assert list(cases) == ["no_breaker", "breaker", "status", "hidden"]
    tokens = [cases[key]["est_tokens"] for key in ("hidden", "status", "breaker", "no_breaker")]
    assert tokens[0] <= tokens[1] <= tokens[2] < tokens[3]
    # the first two cases are the two runs of the table above: a turn per tool call and per answer
    assert cases["no_breaker"]["tool_calls"] == data["without_breakers"]["attempted"]
    assert cases["breaker"]["model_turns"] == data["with_breakers"]["attempted"] + data["steps"]
    # the cases run before telemetry exists: what is exported is the run with breakers alone
    to_open = [m["from"] for m in data["timeline"] if m["to"] == "open"]
    assert data["openings"]["web_search"] == to_open.count("closed")
    assert data["reopenings"]["web_search"] == to_open.count("half_open")

    section = run_cli("demo").stdout.split("What hiding open tools saves")[1]
    for case in cases.values():
        cells = rf"{case['model_turns']:,}\s+{case['est_tokens']:,}\s+\S+\s+{case['rejected']:,}"
        assert re.search(rf"^  {re.escape(case['label'])}\s+{cells}$", section, re.M), section
    assert "Figures from a scripted model" in section
    assert "OTEL_BREAKER_HIDE_OPEN_TOOLS=true" in section


def _run_on_a_terminal(*args: str) -> tuple[int, str]:
    """Run the demo with stderr on a pseudo-terminal; returns (exit code, what the terminal showed)."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_breaker", "demo", *args],
        stdout=subprocess.DEVNULL,
        stderr=terminal,
        env=clean_env(),
    )
    os.close(terminal)
    shown = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    os.close(controller)
    return process.wait(timeout=60), shown.decode(errors="replace")


def test_demo_draws_a_progress_bar_on_a_terminal():
    code, shown = _run_on_a_terminal()
    assert code == 0
    assert "\r[" in shown and "100%" in shown
    assert "without breakers" in shown and "with breakers" in shown


def test_no_progress_switches_the_bar_off():
    code, shown = _run_on_a_terminal("--no-progress")
    assert code == 0
    assert "%" not in shown


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_demo_serves_metrics_for_prometheus():
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_breaker", "demo", "--serve-metrics", "0", "--hold", "30", "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    try:
        port = None
        for line in process.stdout:
            match = re.search(r"Serving Prometheus metrics at http://127\.0\.0\.1:(\d+)/metrics for 30s", line)
            if match:
                port = int(match.group(1))
                break
        assert port, process.stderr.read()
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        process.terminate()
        process.wait(timeout=10)
    openings = sum(
        float(m.group(1))
        for m in re.finditer(
            r'^otel_breaker_transitions_total\{[^}]*gen_ai_tool_name="web_search"[^}]*'
            r'otel_breaker_to_state="open"[^}]*\} (\S+)$',
            body,
            re.M,
        )
    )
    assert openings >= 3  # enough for the OtelBreakerFrequentOpenings alert
    assert re.search(r'^otel_breaker_tokens_saved_total\{[^}]*gen_ai_tool_name="web_search"[^}]*\} [1-9]', body, re.M)
    assert re.search(r'^otel_breaker_calls_rejected_total\{[^}]*gen_ai_tool_name="web_search"[^}]*\} [1-9]', body, re.M)
    assert (
        'otel_breaker_state{gen_ai_agent_name="research_agent",gen_ai_tool_name="web_search",'
        'otel_breaker_state="closed"' in body
    )
    cost = r'^otel_breaker_cost_saved_total\{[^}]*gen_ai_tool_name="web_search"[^}]*\} [0-9.e-]*[1-9]'
    assert re.search(cost, body, re.M)
    assert re.search(r'^otel_breaker_transitions_total\{[^}]*gen_ai_tool_name="upstream:pages_host"', body, re.M)


def test_hold_ends_serving_by_itself():
    started = time.monotonic()
    result = run_cli("demo", "--serve-metrics", "0", "--hold", "1", "--steps", "10")
    assert result.returncode == 0, result.stderr
    assert "for 1s" in result.stdout
    assert time.monotonic() - started < 20


def test_a_busy_port_is_one_line_error():
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = run_cli("demo", "--serve-metrics", str(port))
    assert_one_line_error(result, "otel-breaker demo:", f"cannot listen on 127.0.0.1 port {port}")


class _Collector(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str, bytes]]] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.received.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_demo_exports_over_otlp():
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    _Collector.received = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = clean_env(
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{server.server_port}",
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_EXPORTER_OTLP_TIMEOUT="10",  # seconds, as the Python exporters read it: busy is not dead
            OTEL_SERVICE_NAME="demo-under-test",
        )
        result = run_cli("demo", "--otlp", "--steps", "20", env=env)
    finally:
        server.shutdown()
    assert result.returncode == 0, result.stderr
    assert f"127.0.0.1:{server.server_port} (http/protobuf)" in result.stderr
    spans, metrics = set(), set()
    for path, body in _Collector.received:
        if path == "/v1/traces":
            for rs in ExportTraceServiceRequest.FromString(body).resource_spans:
                assert any(a.value.string_value == "demo-under-test" for a in rs.resource.attributes)
                spans.update(s.name for ss in rs.scope_spans for s in ss.spans)
        elif path == "/v1/metrics":
            for rm in ExportMetricsServiceRequest.FromString(body).resource_metrics:
                metrics.update(m.name for sm in rm.scope_metrics for m in sm.metrics)
    assert {"execute_tool web_search", "execute_tool backup_search", "execute_tool fetch_page"} <= spans
    assert {"otel_breaker.transitions", "otel_breaker.calls.rejected", "otel_breaker.tokens.saved"} <= metrics


def test_recorded_outcomes_can_be_tuned(tmp_path):
    record = tmp_path / "calls.jsonl"
    result = run_cli("demo", "--record", str(record), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert f"try: otel-breaker tune {record}" in result.stdout
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert {line["tool"] for line in lines} == {"web_search", "backup_search", "fetch_page"}
    assert sum(not line["ok"] for line in lines) == 90
    tuned = run_cli("tune", str(record))
    assert tuned.returncode == 0, tuned.stderr
    assert re.search(r"OTEL_BREAKER_TOOLS='web_search=failure_threshold=\d+,recovery_timeout=\d+'", tuned.stdout)
    # with the demo's settings, tune's current row counts the openings the demo reports
    demo = run_cli("demo", "--json")
    opened = json.loads(demo.stdout)["openings"]["web_search"]
    env = clean_env(OTEL_BREAKER_FAILURE_THRESHOLD="3", OTEL_BREAKER_RECOVERY_TIMEOUT="30")
    current = run_cli("tune", str(record), "--json", env=env)
    assert current.returncode == 0, current.stderr
    candidates = json.loads(current.stdout)["tools"]["web_search"]["candidates"]
    (row_now,) = [r for r in candidates if r["current"]]
    assert row_now["openings"] == opened == 1


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--steps", "3"], "--steps: expected a whole number 10 to 10000, got 3"),
        (["--steps", "many"], "--steps: expected a whole number"),
        (["--serve-metrics", "99999"], "--serve-metrics: expected a port number 0 to 65535, got 99999"),
        (["--hold", "5"], "--hold only applies with --serve-metrics"),
        (["--record", "/nonexistent/dir/calls.jsonl"], "--record: cannot write"),
        (["--duration", "soon"], "--duration: expected a time such as 90s, 5m or 1h, got 'soon'"),
        (["--duration", "0s"], "--duration: expected a time from 1s to 24h, got '0s'"),
    ],
)
def test_bad_arguments_are_one_line_errors(args, fragment):
    assert_one_line_error(run_cli("demo", *args), fragment)


def test_unknown_options_exit_with_code_2():
    # Reported by the top-level parser (cli/__init__.py), which prints its usage line too.
    result = run_cli("demo", "--bogus")
    assert result.returncode == 2
    assert "unrecognized arguments: --bogus" in result.stderr


def test_demo_with_a_dead_collector_is_quick_and_one_line():
    env = clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{_free_port()}")  # nothing listens there
    started = time.monotonic()
    result = run_cli("demo", "--otlp", "--steps", "20", env=env)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 15  # generous: the demo's short exit budget plus start-up
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("otel-breaker: OpenTelemetry export (OTLP grpc to"), lines


def test_a_paced_run_spreads_the_run_with_breakers_over_the_duration(monkeypatch, capsys):
    from otel_breaker.cli import demo, main
    from otel_breaker.registry import default_registry

    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(demo, "SLEEP", sleep)
    monkeypatch.setattr(demo, "CLOCK", lambda: now[0])
    registry = default_registry()
    store = registry.store  # the demo runs its breakers on a simulated clock: give later tests the real one back
    try:
        assert main(["demo", "--duration", "5m", "--steps", "10", "--no-progress"]) == 0
    finally:
        registry.use_store(store)
    assert len(slept) == 10 and abs(sum(slept) - 300) < 1e-6  # one step every 30 s
    assert all(abs(s - 30) < 1e-6 for s in slept)
    captured = capsys.readouterr()
    assert "Pacing the run with breakers over 5m 00s" in captured.err
    assert "tool calls attempted" in captured.out


def test_otlp_metrics_are_exported_during_a_paced_run():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    _Collector.received = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = clean_env(
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{server.server_port}",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_METRIC_EXPORT_INTERVAL="300",
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_breaker", "demo", "--otlp", "--steps", "10", "--duration", "6s"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        while process.poll() is None and not any(path == "/v1/metrics" for path, _ in _Collector.received):
            time.sleep(0.05)
        exported_while_running = process.poll() is None
        assert process.wait(timeout=60) == 0, process.stderr.read()
    finally:
        server.shutdown()
    assert exported_while_running, "no metrics reached the collector before the run ended"


def _listening_addresses(port: int) -> set[str]:
    """The local addresses a socket of this machine listens on ``port`` at (Linux's /proc/net/tcp)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as sockets:
                rows = sockets.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads Linux's socket table")
def test_demo_serves_metrics_on_loopback_and_says_where():
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_breaker", "demo", "--serve-metrics", "0", "--hold", "30", "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    try:
        line = process.stderr.readline()  # said before the run starts: scrapeable during it
        match = re.search(r"Serving Prometheus metrics at http://127\.0\.0\.1:(\d+)/metrics during the run", line)
        assert match, line + process.stderr.read()
        port = int(match.group(1))
        assert _listening_addresses(port) == {"0100007F"}  # 127.0.0.1 only, not 0.0.0.0
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_metrics_host_needs_serve_metrics():
    assert_one_line_error(run_cli("demo", "--metrics-host", "0.0.0.0"), "--metrics-host only applies")
