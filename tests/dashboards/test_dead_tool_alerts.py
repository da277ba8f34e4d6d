"""Every alert, fed what a real dead tool produces: ``promtool test rules`` on scraped series.

``dead_tool.py`` runs a dead tool and a healthy one through real breakers and the real
Prometheus exporter, scraping every 15 s of simulated time. Its state gauge alternates between
``open`` and ``half_open`` samples (a cooldown ended, the probe has not run yet), as in
production. The rules are the shipped ones, their annotations left out (the texts are checked in
``alerts.test.yaml``); the test names which alerts must fire, for which series, and when.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from obs_helpers import ALERTS

pytestmark = pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="`promtool` binary not found on PATH (install Prometheus, e.g. `apt-get install prometheus`)",
)

DEAD_TOOL = Path(__file__).with_name("dead_tool.py")
#: What the rule for a breaker stuck open said before it counted half-open as not recovered.
OPEN_ONLY_EXPR = """max without (otel_breaker_state) (otel_breaker_state{otel_breaker_state="open"} == 1)
unless
max without (otel_breaker_state) (max_over_time(otel_breaker_state{otel_breaker_state="closed"}[10m]) == 1)
and
max without (otel_breaker_state) (otel_breaker_state{otel_breaker_state="open"} offset 10m)
"""


@pytest.fixture(scope="module")
def scraped() -> dict:
    """The dead tool's run: the scrape interval and every series with its values."""
    proc = subprocess.run(
        [sys.executable, str(DEAD_TOOL)], capture_output=True, text=True, timeout=120, cwd=DEAD_TOOL.parent
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _values(values: list[float | None]) -> str:
    return " ".join("_" if value is None else f"{value:g}" for value in values)


def _labels(series: str) -> dict[str, str]:
    """The labels of one series in promtool notation (values as written by dead_tool.py)."""
    inner = series[series.index("{") + 1 : -1]
    labels = {}
    for pair in inner.split('",'):
        key, _, value = pair.partition('="')
        labels[key] = value.rstrip('"')
    return labels


def _state_series(scraped: dict, tool: str, state: str) -> str:
    (name,) = [
        name
        for name in scraped["series"]
        if name.startswith("otel_breaker_state{")
        and _labels(name)["gen_ai_tool_name"] == tool
        and _labels(name)["otel_breaker_state"] == state
    ]
    return name


def _rules_without_annotations(tmp_path: Path, stuck_open_expr: str | None = None) -> None:
    rules = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
            if stuck_open_expr is not None and rule["alert"] == "OtelBreakerStuckOpen":
                rule["expr"] = stuck_open_expr
    (tmp_path / "alerts.yaml").write_text(yaml.safe_dump(rules), encoding="utf-8")


def _run_promtool(tmp_path: Path, scraped: dict, checks: list[dict]) -> subprocess.CompletedProcess:
    tests = {
        "rule_files": ["alerts.yaml"],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": scraped["interval"],
                "input_series": [
                    {"series": name, "values": _values(values)} for name, values in scraped["series"].items()
                ],
                "alert_rule_test": checks,
            }
        ],
    }
    (tmp_path / "dead_tool.test.yaml").write_text(yaml.safe_dump(tests), encoding="utf-8")
    return subprocess.run(
        ["promtool", "test", "rules", "dead_tool.test.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )


def _stuck_open_alert(scraped: dict) -> dict:
    labels = _labels(_state_series(scraped, "web_search", "open"))
    del labels["otel_breaker_state"]
    return {"exp_labels": {**labels, "severity": "critical"}}


def test_the_dead_tools_gauge_reads_half_open_between_open_samples(scraped):
    """The trap the stuck-open rule must survive is in the data: half-open samples, never closed again."""
    half_open = scraped["series"][_state_series(scraped, "web_search", "half_open")]
    closed = scraped["series"][_state_series(scraped, "web_search", "closed")]
    assert sum(1 for value in half_open if value == 1) >= 10
    assert closed[0] == 1 and closed[-1] == 0
    assert all(value == 0 for value in closed[closed.index(0) :])


def test_every_alert_fires_for_the_dead_tool_and_none_for_the_healthy_one(scraped, tmp_path):
    _rules_without_annotations(tmp_path)
    tool = {"job": "agent", "gen_ai_tool_name": "web_search"}
    checks = [
        # one minute in: three failures opened the breaker; nothing has lasted long enough yet
        {"eval_time": "1m", "alertname": "OtelBreakerFrequentOpenings", "exp_alerts": []},
        {"eval_time": "1m", "alertname": "OtelBreakerHighRejectionRate", "exp_alerts": []},
        {"eval_time": "9m", "alertname": "OtelBreakerStuckOpen", "exp_alerts": []},
        # 20 minutes of a dead tool: open or half-open throughout, reopened at every probe
        {"eval_time": "20m", "alertname": "OtelBreakerStuckOpen", "exp_alerts": [_stuck_open_alert(scraped)]},
        {
            "eval_time": "20m",
            "alertname": "OtelBreakerFrequentOpenings",
            "exp_alerts": [{"exp_labels": {**tool, "severity": "warning"}}],
        },
        {
            "eval_time": "20m",
            "alertname": "OtelBreakerHighRejectionRate",
            "exp_alerts": [{"exp_labels": {**tool, "severity": "warning"}}],
        },
    ]
    proc = _run_promtool(tmp_path, scraped, checks)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_rule_on_open_alone_would_never_fire_for_the_dead_tool(scraped, tmp_path):
    """Why the rule says "not closed": each half-open sample restarts an "open for 2m" wait."""
    _rules_without_annotations(tmp_path, stuck_open_expr=OPEN_ONLY_EXPR)
    checks = [{"eval_time": "20m", "alertname": "OtelBreakerStuckOpen", "exp_alerts": [_stuck_open_alert(scraped)]}]
    proc = _run_promtool(tmp_path, scraped, checks)
    assert proc.returncode != 0, proc.stdout
    assert "OtelBreakerStuckOpen" in proc.stdout + proc.stderr
