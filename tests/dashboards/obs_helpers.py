"""Shared helpers for the dashboard, alert-rule, collector and end-to-end tests."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DASHBOARD_JSON = REPO / "dashboards" / "grafana" / "otel-breaker.json"
GENERATOR = REPO / "dashboards" / "generate_dashboard.py"
ALERTS = REPO / "dashboards" / "prometheus" / "alerts.yaml"
ALERTS_TEST = REPO / "dashboards" / "prometheus" / "alerts.test.yaml"
RUNBOOK = REPO / "docs" / "dashboards.md"  # the alerts link to the runbooks on the dashboards page
COLLECTOR_CONFIG = REPO / "collector" / "otelcol-config.yaml"
PROMETHEUS_CONFIG = REPO / "collector" / "prometheus.yml"

# The Prometheus metric names otel-breaker emits (after the exporters' name translation).
COUNTERS = {
    "otel_breaker_transitions_total",
    "otel_breaker_calls_total",
    "otel_breaker_calls_rejected_total",
    "otel_breaker_calls_neutral_total",
    "otel_breaker_loops_total",
    "otel_breaker_retries_total",
    "otel_breaker_tokens_saved_total",
    "otel_breaker_cost_saved_total",
    "otel_breaker_store_errors_total",
    "gen_ai_execute_tool_duration_seconds_bucket",
    "gen_ai_execute_tool_duration_seconds_sum",
    "gen_ai_execute_tool_duration_seconds_count",
}
GAUGES = {"otel_breaker_state"}
CONTRACT_METRICS = COUNTERS | GAUGES

PROMQL_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
}
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", re.IGNORECASE)
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_VALUES = re.compile(r"^\s*label_values\((?P<selector>.+),\s*(?P<label>\w+)\s*\)\s*$")


def _blank(text: str, start: int, end: int) -> str:
    return text[:start] + " " * (end - start) + text[end:]


def strip_promql(expr: str) -> str:
    """Blank out strings, label matchers, range selectors and grouping clauses.

    Positions are kept, so offsets into the result are offsets into ``expr``.
    """
    out = expr
    for pattern in (r'"(?:[^"\\]|\\.)*"', r"'(?:[^'\\]|\\.)*'", r"\{[^}]*\}", r"\[[^\]]*\]"):
        for m in re.finditer(pattern, out):
            out = _blank(out, m.start(), m.end())
    for m in _GROUPING.finditer(out):
        out = _blank(out, m.start(), m.end())
    return out


def metric_occurrences(expr: str) -> list[tuple[str, int]]:
    """(metric name, offset) for every metric selector in a PromQL expression."""
    stripped = strip_promql(expr)
    found = []
    for m in _IDENT.finditer(stripped):
        name = m.group(0)
        rest = stripped[m.end() :].lstrip()
        if rest.startswith("("):  # function or aggregation
            continue
        if name.lower() in PROMQL_KEYWORDS:
            continue
        if m.start() > 0 and (stripped[m.start() - 1].isdigit() or stripped[m.start() - 1] in "$."):
            continue  # part of a number such as 1e3
        found.append((name, m.start()))
    return found


def metric_names(expr: str) -> set[str]:
    m = _LABEL_VALUES.match(expr)
    if m:
        expr = m.group("selector")
    return {name for name, _ in metric_occurrences(expr)}


def enclosing_function(expr: str, offset: int) -> str | None:
    """Name of the innermost function call whose parentheses enclose ``offset``."""
    stripped = strip_promql(expr)
    depth = 0
    for i in range(offset - 1, -1, -1):
        c = stripped[i]
        if c == ")":
            depth += 1
        elif c == "(":
            if depth == 0:
                m = re.search(r"([a-zA-Z_]\w*)\s*$", stripped[:i])
                return m.group(1) if m else None
            depth -= 1
    return None


def dashboard_queries(dashboard: dict) -> list[tuple[str, str, dict]]:
    """(where, expr, target) for every panel target and every Prometheus annotation."""
    queries = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            queries.append((f"panel {panel['title']!r} target {target['refId']}", target["expr"], target))
    for ann in dashboard["annotations"]["list"]:
        if "expr" in ann:
            queries.append((f"annotation {ann['name']!r}", ann["expr"], ann))
    return queries


def variable_queries(dashboard: dict) -> list[tuple[str, str]]:
    out = []
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            out.append((var["name"], query))
    return out


def parse_label_values(query: str) -> tuple[str, str]:
    m = _LABEL_VALUES.match(query)
    assert m, f"not a label_values() query: {query}"
    return m.group("selector").strip(), m.group("label")


def alert_rules() -> list[dict]:
    doc = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule]


def load_dashboard() -> dict:
    return json.loads(DASHBOARD_JSON.read_text(encoding="utf-8"))


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(
            f"`{name}` binary not found on PATH (install Prometheus, e.g. "
            f"`apt-get install prometheus`, to run this test)"
        )
    return path
