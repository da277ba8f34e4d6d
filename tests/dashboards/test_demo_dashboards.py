"""The "see it locally" path: ``otel-breaker demo --serve-metrics``, scraped by a real Prometheus,
fills every panel of the dashboard with data (cost, upstreams and agents included)."""

from __future__ import annotations

import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time

import pytest
from obs_helpers import dashboard_queries
from test_prometheus_e2e import Prometheus, substitute

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None, reason="`prometheus` binary not found on PATH")

#: Wall-clock time the demo's run with breakers is paced over, then how long it keeps serving.
PACED = "20s"
HOLD = "60"
SERVING = re.compile(r"Serving Prometheus metrics at http://(?P<host>[\d.]+):(?P<port>\d+)/metrics")


class Demo:
    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "otel_breaker",
                "demo",
                "--serve-metrics",
                "0",
                "--duration",
                PACED,
                "--hold",
                HOLD,
                "--no-progress",
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        for stream in (self.proc.stdout, self.proc.stderr):
            threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream) -> None:
        for line in stream:
            self.lines.put(line)

    def address(self) -> tuple[str, int]:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                if self.proc.poll() is not None:
                    pytest.fail(f"the demo exited with {self.proc.returncode}")
                continue
            found = SERVING.search(line)
            if found:
                return found["host"], int(found["port"])
        pytest.fail("the demo never said where it serves its metrics")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def demo_in_prometheus(tmp_path_factory):
    demo = Demo()
    prometheus = None
    try:
        host, port = demo.address()
        assert host == "127.0.0.1"
        prometheus = Prometheus(tmp_path_factory.mktemp("prometheus-demo"), port)
        start = time.time() - 5
        job = 'job="otel-breaker-e2e"'
        calls = f"sum(otel_breaker_calls_total{{{job}}})"
        prometheus.wait_until(lambda: prometheus.value(calls), "the demo's first scrape")
        first = prometheus.value(calls)
        prometheus.wait_until(lambda: prometheus.value(calls) > first, "the paced run to be scraped growing")
        # Let the paced run finish, then two more scrapes, so rate() and increase() see it all.
        samples = f"max(count_over_time(otel_breaker_calls_total{{{job}}}[10m]))"
        prometheus.wait_until(lambda: "with_breakers" in _stdout_json(demo), "the run to end", timeout=90)
        seen = prometheus.value(samples)
        prometheus.wait_until(lambda: prometheus.value(samples) >= seen + 2, "two more scrapes")
        yield prometheus, start
    finally:
        demo.stop()
        if prometheus is not None:
            prometheus.stop()


_SEEN: list[str] = []


def _stdout_json(demo: Demo) -> str:
    while True:
        try:
            _SEEN.append(demo.lines.get_nowait())
        except queue.Empty:
            return "".join(_SEEN)


VARIABLES = {
    "all": {"service": ".*", "agent": ".*", "tool": ".*", "datasource": "prometheus"},
    "concrete": {"service": "otel-breaker-e2e", "agent": "research_agent", "tool": "web_search", "datasource": "p"},
}


@pytest.mark.parametrize("variables", sorted(VARIABLES))
def test_every_dashboard_panel_has_data_from_the_demo(demo_in_prometheus, dashboard, variables):
    prometheus, start = demo_in_prometheus
    values = VARIABLES[variables]
    empty = []
    queries = dashboard_queries(dashboard)
    for where, raw, target in queries:
        expr = substitute(raw, values)
        result = (
            prometheus.query(expr) if target.get("instant", False) else prometheus.query_range(expr, start, time.time())
        )
        if not result:
            empty.append(f"{where}: {expr}")
    print(f"dashboard queries without data from the demo: {len(empty)} of {len(queries)}")
    assert not empty, "queries without data:\n" + "\n".join(empty)


def test_the_demo_names_its_agent_prices_its_calls_and_has_an_upstream(demo_in_prometheus):
    prometheus, _start = demo_in_prometheus
    assert prometheus.api("label/gen_ai_agent_name/values") == ["research_agent"]
    assert prometheus.value('sum(otel_breaker_cost_saved_total{gen_ai_request_model="demo-model"})') > 0
    opened = 'sum(otel_breaker_transitions_total{gen_ai_tool_name="upstream:pages_host", otel_breaker_to_state="open"})'
    assert prometheus.value(opened) >= 1
