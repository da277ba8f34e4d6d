"""End to end: otel-breaker metrics -> real Prometheus -> every dashboard and alert query.

A workload (``workload.py``) trips a tool's breaker repeatedly with a fake clock and exports
through the OpenTelemetry SDK ``PrometheusMetricReader``; a real ``prometheus`` binary scrapes
it every second and loads ``dashboards/prometheus/alerts.yaml``. Every panel query, annotation
query and template-variable query of the dashboard, and every alert expression, then runs
through Prometheus' HTTP API.
"""

from __future__ import annotations

import json
import queue
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from obs_helpers import (
    ALERTS,
    alert_rules,
    dashboard_queries,
    metric_names,
    parse_label_values,
    variable_queries,
)

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus") is None,
    reason="`prometheus` binary not found on PATH (install Prometheus, e.g. "
    "`apt-get install prometheus`, to run this test)",
)

WORKLOAD = Path(__file__).resolve().parent / "workload.py"
JOB = "otel-breaker-e2e"
TIMEOUT = 60.0
# Metrics the workload cannot produce: the in-memory store has no shared-store errors. A query
# on them must still parse; it must return data whenever Prometheus has the metric.
MAY_BE_ABSENT = {"otel_breaker_store_errors_total"}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Workload:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKLOAD), "--port", "0", "--service-name", "e2e-agent"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)

    def read(self) -> dict:
        try:
            line = self.lines.get(timeout=TIMEOUT)
        except queue.Empty:
            self.proc.kill()
            pytest.fail(f"workload printed nothing within {TIMEOUT}s:\n{self.proc.stderr.read()}")
        return json.loads(line)

    def send(self, command: str) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        reply = self.read()
        assert reply.get("command") == command, reply
        return reply

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


class Prometheus:
    def __init__(self, tmp: Path, target_port: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(ALERTS)],
            "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}]}],
        }
        config_file = tmp / "prometheus.yml"
        config_file.write_text(json.dumps(config), encoding="utf-8")  # JSON is valid YAML
        self.log = tmp / "prometheus.log"
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={config_file}",
                    f"--storage.tsdb.path={tmp / 'data'}",
                    "--storage.tsdb.retention.time=1h",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.wait_until(self._ready, "Prometheus to become ready")

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            pytest.fail(f"prometheus exited with {self.proc.returncode}:\n{self.log.read_text()}")
        try:
            return requests.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except requests.ConnectionError:
            return False

    def wait_until(self, predicate, what: str, timeout: float = TIMEOUT):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = predicate()
            if result:
                return result
            time.sleep(0.2)  # polling Prometheus for the next scrape, bounded by the deadline
        pytest.fail(f"timed out after {timeout}s waiting for {what}\n--- prometheus log ---\n{self.log.read_text()}")

    def api(self, path: str, **params) -> dict:
        response = requests.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        body = response.json()
        assert response.status_code == 200 and body["status"] == "success", (
            f"{path} {params} -> HTTP {response.status_code}: {body}"
        )
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def query_range(self, expr: str, start: float, end: float) -> list[dict]:
        return self.api("query_range", query=expr, start=start, end=end, step="1s")["result"]

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


def substitute(expr: str, variables: dict[str, str]) -> str:
    """Expand Grafana variables the way Grafana would before sending the query."""
    builtins = {"__rate_interval": "1m", "__interval": "1m", "__range": "10m"}

    def expand(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        return {**builtins, **variables}[name]

    expanded = re.sub(r"\$\{(\w+)\}|\$(\w+)", expand, expr)
    assert "$" not in expanded, expanded
    return expanded


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """The workload after 5 openings of the flaky tool (3 while scraped) in a real Prometheus."""
    tmp = tmp_path_factory.mktemp("prometheus")
    workload = Workload()
    prometheus = None
    try:
        hello = workload.read()
        assert hello["openings"] == 2 and hello["state"] == "open", hello
        prometheus = Prometheus(tmp, hello["port"])
        start = time.time() - 5
        flaky, healthy, agent, once = hello["flaky"], hello["healthy"], hello["agent"], hello["tripped_once"]
        openings = (
            f'sum(otel_breaker_transitions_total{{job="{JOB}", gen_ai_tool_name="{flaky}", '
            f'otel_breaker_to_state="open"}})'
        )

        def scraped(n):
            return lambda: prometheus.value(openings) == n

        # A counter series appears with its first value and increase() only counts what comes
        # after, so the flaky tool opens 3 more times, each one seen by a scrape of its own.
        prometheus.wait_until(scraped(2), "the first scrape of the workload")
        # The once-tripped tool is scraped closed first, then opens.
        once_state = f'otel_breaker_state{{job="{JOB}", gen_ai_tool_name="{once}", otel_breaker_state="%s"}}'
        prometheus.wait_until(lambda: prometheus.value(once_state % "closed") == 1, f"{once} closed")
        assert workload.send("trip")["tripped_once_state"] == "open"
        prometheus.wait_until(lambda: prometheus.value(once_state % "open") == 1, f"{once} open")
        once_open_seen = time.time()
        for n in (3, 4, 5):
            reply = workload.send("reopen")
            assert reply["openings"] == n and reply["state"] == "open", reply
            workload.send("healthy")
            prometheus.wait_until(scraped(n), f"opening #{n} to be scraped")
        # Two more scrapes after the last change, so rate() and increase() see it settle.
        samples = f'count_over_time(otel_breaker_state{{job="{JOB}", otel_breaker_state="open"}}[10m])'
        seen = prometheus.value(f"max({samples})")
        prometheus.wait_until(lambda: prometheus.value(f"max({samples})") >= seen + 2, "two more scrapes")
        yield {
            "prometheus": prometheus,
            "start": start,
            "flaky": flaky,
            "healthy": healthy,
            "agent": agent,
            "tripped_once": once,
            "upstream": hello["upstream"],
            "upstream_breaker": "upstream:" + hello["upstream"],
            "behind_upstream": hello["behind_upstream"],
            "once_open_seen": once_open_seen,
        }
    finally:
        workload.stop()
        if prometheus is not None:
            prometheus.stop()


def _variable_sets(stack):
    return {
        "all": {"service": ".*", "agent": ".*", "tool": ".*", "datasource": "prometheus"},
        "concrete": {"service": JOB, "agent": stack["agent"], "tool": stack["flaky"], "datasource": "prometheus"},
    }


@pytest.mark.parametrize("variables", ["all", "concrete"])
def test_every_dashboard_query_returns_data(stack, dashboard, variables):
    prometheus = stack["prometheus"]
    values = _variable_sets(stack)[variables]
    present = set(prometheus.api("label/__name__/values"))
    end = time.time()
    empty = []
    queries = dashboard_queries(dashboard)
    assert len(queries) >= 15
    for where, raw, target in queries:
        expr = substitute(raw, values)
        instant = target.get("instant", False)
        result = prometheus.query(expr) if instant else prometheus.query_range(expr, stack["start"], end)
        absent_allowed = metric_names(raw) & MAY_BE_ABSENT and not metric_names(raw) <= present
        if not result and not absent_allowed:
            empty.append(f"{where}: {expr}")
    assert not empty, "queries without data:\n" + "\n".join(empty)


@pytest.mark.parametrize("variables", ["all", "concrete"])
def test_tool_variable_filters_every_query(stack, dashboard, variables):
    """With all tools selected every workload tool may show up; with one, only that one."""
    prometheus = stack["prometheus"]
    values = _variable_sets(stack)[variables]
    everything = {
        stack["flaky"],
        stack["healthy"],
        stack["tripped_once"],
        stack["upstream_breaker"],
        stack["behind_upstream"],
    }
    tools = everything if variables == "all" else {stack["flaky"]}
    for where, raw, _target in dashboard_queries(dashboard):
        for series in prometheus.query_range(substitute(raw, values), stack["start"], time.time()):
            tool = series["metric"].get("gen_ai_tool_name")
            if tool is not None:
                assert tool in tools, f"{where}: unexpected tool {tool}"


def test_state_timeline_shows_open_and_closed(stack, dashboard):
    prometheus = stack["prometheus"]
    (raw,) = [t["expr"] for p in dashboard["panels"] if p["type"] == "state-timeline" for t in p["targets"]]
    result = {
        r["metric"]["gen_ai_tool_name"]: float(r["value"][1])
        for r in prometheus.query(substitute(raw, _variable_sets(stack)["all"]))
    }
    assert result == {
        stack["flaky"]: 2.0,
        stack["healthy"]: 0.0,
        stack["tripped_once"]: 2.0,
        stack["upstream_breaker"]: 2.0,  # the dead upstream: open
        stack["behind_upstream"]: 0.0,  # its tool: transport failures are the upstream's, not its own
    }


def test_variable_queries_return_values(stack, dashboard):
    prometheus = stack["prometheus"]
    expected = {"service": JOB, "agent": stack["agent"], "tool": stack["flaky"]}
    for name, query in variable_queries(dashboard):
        selector, label = parse_label_values(substitute(query, _variable_sets(stack)["all"]))
        values = prometheus.api(f"label/{label}/values", **{"match[]": selector})
        assert expected[name] in values, f"variable {name}: {query} -> {values}"


def test_alert_expressions_parse(stack):
    prometheus = stack["prometheus"]
    for rule in alert_rules():
        prometheus.query(rule["expr"])  # asserts status success


def test_frequent_openings_fires_for_tripped_tool_only(stack):
    prometheus = stack["prometheus"]
    (rule,) = [r for r in alert_rules() if r["alert"] == "OtelBreakerFrequentOpenings"]
    result = {r["metric"]["gen_ai_tool_name"]: float(r["value"][1]) for r in prometheus.query(rule["expr"])}
    assert stack["flaky"] in result, result
    assert result[stack["flaky"]] >= 3
    assert stack["healthy"] not in result
    assert stack["tripped_once"] not in result  # opened once: below the threshold
    healthy_only = rule["expr"].replace(
        'otel_breaker_to_state="open"', f'otel_breaker_to_state="open", gen_ai_tool_name="{stack["healthy"]}"'
    )
    assert prometheus.query(healthy_only) == []


def test_high_rejection_rate_expression(stack):
    prometheus = stack["prometheus"]
    (rule,) = [r for r in alert_rules() if r["alert"] == "OtelBreakerHighRejectionRate"]
    result = {r["metric"]["gen_ai_tool_name"]: float(r["value"][1]) for r in prometheus.query(rule["expr"])}
    assert set(result) == {stack["flaky"]}, result
    assert 0.2 < result[stack["flaky"]] <= 1.0


def test_stuck_open_expression(stack):
    """The stuck-open logic on the real data, and with its 10m window shrunk to seconds."""
    prometheus = stack["prometheus"]
    (rule,) = [r for r in alert_rules() if r["alert"] == "OtelBreakerStuckOpen"]
    assert "[10m]" in rule["expr"] and "offset 10m" in rule["expr"]
    # Nothing has been reported for 10 minutes yet.
    assert prometheus.query(rule["expr"]) == []
    # Shrunk to a window that starts after the once-tripped tool was last seen closed: both
    # open breakers are "stuck"; the healthy one is not.
    window = max(1, int(time.time() - stack["once_open_seen"]))
    short = rule["expr"].replace("[10m]", f"[{window}s]").replace("offset 10m", f"offset {window}s")
    result = prometheus.query(short)
    expected = {stack["flaky"], stack["tripped_once"], stack["upstream_breaker"]}
    assert {r["metric"]["gen_ai_tool_name"] for r in result} == expected, result
    # A window that reaches back to when the once-tripped tool was closed excludes it; the flaky
    # tool and the dead upstream were never seen closed (they opened before the first scrape).
    window = int(time.time() - stack["start"]) + 5
    wide = rule["expr"].replace("[10m]", f"[{window}s]").replace("offset 10m", "offset 1s")
    result = prometheus.query(wide)
    assert {r["metric"]["gen_ai_tool_name"] for r in result} == {stack["flaky"], stack["upstream_breaker"]}, result


def test_rules_load_and_frequent_openings_alert_fires(stack):
    prometheus = stack["prometheus"]
    groups = prometheus.api("rules")["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert {r["name"] for r in rules} == {r["alert"] for r in alert_rules()}

    def evaluated_ok():
        current = [r for g in prometheus.api("rules")["groups"] for r in g["rules"]]
        return all(r["health"] == "ok" for r in current) and current

    prometheus.wait_until(evaluated_ok, "all alert rules to be evaluated without errors")

    def firing():
        return [
            a
            for a in prometheus.api("alerts")["alerts"]
            if a["labels"]["alertname"] == "OtelBreakerFrequentOpenings" and a["state"] == "firing"
        ]

    alerts = prometheus.wait_until(firing, "OtelBreakerFrequentOpenings to fire")
    assert {a["labels"]["gen_ai_tool_name"] for a in alerts} == {stack["flaky"]}
    alert = alerts[0]
    assert alert["labels"]["job"] == JOB
    assert alert["annotations"]["runbook_url"].endswith("#runbook-otelbreakerfrequentopenings")
    assert stack["flaky"] in alert["annotations"]["summary"]
