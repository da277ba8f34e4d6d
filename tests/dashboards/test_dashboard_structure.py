"""Structure of the generated Grafana dashboard and conventions of the alert rules."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import urllib.parse

import pytest
from obs_helpers import (
    ALERTS,
    CONTRACT_METRICS,
    COUNTERS,
    DASHBOARD_JSON,
    GENERATOR,
    RUNBOOK,
    alert_rules,
    dashboard_queries,
    enclosing_function,
    metric_names,
    metric_occurrences,
    parse_label_values,
    variable_queries,
)

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
COUNTER_FUNCTIONS = {"rate", "increase", "irate"}


def _load_generator():
    spec = importlib.util.spec_from_file_location("generate_dashboard", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _data_panels(dashboard):
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def test_regenerating_reproduces_committed_json():
    generated = _load_generator().render()
    committed = DASHBOARD_JSON.read_text(encoding="utf-8")
    assert generated == committed, (
        "dashboards/grafana/otel-breaker.json is out of date: "
        "run `python dashboards/generate_dashboard.py` and commit the result"
    )


def test_generator_check_mode_agrees(tmp_path):
    script = [sys.executable, str(GENERATOR)]
    ok = subprocess.run([*script, "--check"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    stale = tmp_path / "stale.json"
    stale.write_text("{}\n", encoding="utf-8")
    bad = subprocess.run([*script, "--check", "--output", str(stale)], capture_output=True, text=True)
    assert bad.returncode == 1
    assert "out of date" in bad.stderr


def test_current_schema_and_no_inputs(dashboard):
    assert "__inputs" not in dashboard
    assert "__requires" not in dashboard
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard["uid"] and len(dashboard["uid"]) <= 40
    assert dashboard["title"]


def test_panel_ids_unique(dashboard):
    ids = [p["id"] for p in dashboard["panels"]]
    assert all(isinstance(i, int) and i > 0 for i in ids)
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {ids}"


def test_grid_positions_valid_and_not_overlapping(dashboard):
    cells = {}
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        where = f"panel {panel['id']} {panel['title']!r}"
        assert set(pos) == {"h", "w", "x", "y"}, where
        assert all(isinstance(v, int) for v in pos.values()), where
        assert 1 <= pos["w"] <= 24, where
        assert pos["h"] >= 1, where
        assert pos["x"] >= 0 and pos["y"] >= 0, where
        assert pos["x"] + pos["w"] <= 24, where
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{where} overlaps {cells[(x, y)]}"
                cells[(x, y)] = where


def test_every_panel_and_target_uses_datasource_variable(dashboard):
    panels = _data_panels(dashboard)
    assert panels
    for panel in panels:
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert target["expr"].strip()
    for ann in dashboard["annotations"]["list"]:
        if not ann.get("builtIn"):
            assert ann["datasource"] == DATASOURCE, ann["name"]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            assert var["datasource"] == DATASOURCE, var["name"]


def test_template_variables(dashboard):
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    for name, label in (("service", "job"), ("agent", "gen_ai_agent_name"), ("tool", "gen_ai_tool_name")):
        var = variables[name]
        assert var["type"] == "query"
        assert var["multi"] is True and var["includeAll"] is True
        assert var["allValue"] == ".*"
        _selector, var_label = parse_label_values(var["query"]["query"])
        assert var_label == label
        assert var.get("definition", var["query"]["query"]) == var["query"]["query"]


def test_panel_kinds_present(dashboard):
    by_type = {}
    for panel in _data_panels(dashboard):
        by_type.setdefault(panel["type"], []).append(panel["title"])
    assert {"stat", "state-timeline", "timeseries", "table"} <= set(by_type)
    titles = " | ".join(p["title"].lower() for p in _data_panels(dashboard))
    for needle in (
        "open now",
        "state",
        "openings",
        "rejected",
        "tokens saved",
        "cost",
        "outcomes",
        "failure ratio",
        "latency",
        "top tools",
    ):
        assert needle in titles, f"no panel about {needle!r}"


def test_latency_panel_uses_histogram_quantiles(dashboard):
    exprs = [
        t["expr"]
        for p in _data_panels(dashboard)
        for t in p["targets"]
        if "gen_ai_execute_tool_duration_seconds_bucket" in t["expr"]
    ]
    quantiles = {re.search(r"histogram_quantile\(([0-9.]+)", e).group(1) for e in exprs}
    assert quantiles == {"0.5", "0.95"}
    assert all("by (le," in e for e in exprs)


def test_openings_annotation(dashboard):
    anns = [a for a in dashboard["annotations"]["list"] if "expr" in a]
    assert len(anns) == 1
    expr = anns[0]["expr"]
    assert "otel_breaker_transitions_total" in expr
    assert 'otel_breaker_to_state="open"' in expr
    assert anns[0]["enable"] is True


def test_no_upper_case_in_metric_names(dashboard):
    for where, expr, _ in dashboard_queries(dashboard):
        for name in metric_names(expr):
            assert name == name.lower(), f"{where}: {name}"


def test_rejected_calls_link_to_their_traces(dashboard):
    (link,) = [link for link in dashboard["links"] if "Jaeger" in link["title"]]
    assert link["url"].startswith("http://localhost:16686/search?")
    assert "otel_breaker.rejected" in urllib.parse.unquote(link["url"])
    table = next(p for p in dashboard["panels"] if p["title"] == "Top tools by rejections")
    (override,) = table["fieldConfig"]["overrides"]
    assert override["matcher"] == {"id": "byName", "options": "tool"}
    assert "16686" in override["properties"][0]["value"][0]["url"]


def test_jaeger_links_name_one_service_or_none(dashboard):
    """``$service`` is multi-value: in a URL it becomes ``{a,b}``, which Jaeger cannot search."""
    table = next(p for p in dashboard["panels"] if p["title"] == "Top tools by rejections")
    urls = [link["url"] for link in dashboard["links"] if "Jaeger" in link["title"]]
    urls += [link["url"] for link in table["fieldConfig"]["overrides"][0]["properties"][0]["value"]]
    for url in urls:
        assert "${service" not in url and "$service" not in url, url
    assert "service=${__data.fields.job}" in urls[-1]  # the row's own service


def test_the_generator_takes_its_names_from_semconv():
    from otel_breaker import semconv

    source = GENERATOR.read_text(encoding="utf-8")
    assert "from otel_breaker import semconv" in source
    assert "otel_breaker_" not in source and "gen_ai_" not in source, "metric names written by hand"
    assert {i.prometheus for i in semconv.INSTRUMENTS if i.kind == "counter"} < COUNTERS
    assert semconv.DURATION.prometheus + "_bucket" in COUNTERS


def test_queries_use_only_contract_metrics(dashboard):
    for where, expr, _ in dashboard_queries(dashboard):
        names = metric_names(expr)
        assert names, f"{where}: no metric found in {expr}"
        unknown = names - CONTRACT_METRICS
        assert not unknown, f"{where}: unknown metric(s) {sorted(unknown)} in {expr}"
    for name, query in variable_queries(dashboard):
        assert metric_names(query) <= CONTRACT_METRICS, name


def test_queries_filter_by_template_variables(dashboard):
    for where, expr, _ in dashboard_queries(dashboard):
        assert 'job=~"$service"' in expr, f"{where} ignores $service"
        # Per-process and per-upstream panels have no tool to filter by.
        if "store_errors" not in expr and "otel_breaker_upstream" not in expr:
            assert 'gen_ai_tool_name=~"$tool"' in expr, f"{where} ignores $tool"


@pytest.mark.parametrize("source", ["dashboard", "alerts"])
def test_counters_only_inside_rate_or_increase(dashboard, source):
    if source == "dashboard":
        exprs = [(where, expr) for where, expr, _ in dashboard_queries(dashboard)]
    else:
        exprs = [(rule["alert"], rule["expr"]) for rule in alert_rules()]
    for where, expr in exprs:
        for name, offset in metric_occurrences(expr):
            if name in COUNTERS:
                fn = enclosing_function(expr, offset)
                assert fn in COUNTER_FUNCTIONS, f"{where}: counter {name} used raw (in {fn}())"


def test_helpers_catch_mistakes():
    # The checks above must be able to fail.
    assert metric_names('sum(rate(otel_breaker_transition_total{a="b"}[5m]))') == {"otel_breaker_transition_total"}
    expr = 'sum by (job) (otel_breaker_calls_total{job="x"}) > 3'
    ((_name, offset),) = metric_occurrences(expr)
    assert enclosing_function(expr, offset) == "sum"


def test_alert_rules_conventions():
    rules = {rule["alert"]: rule for rule in alert_rules()}
    assert set(rules) == {"OtelBreakerFrequentOpenings", "OtelBreakerStuckOpen", "OtelBreakerHighRejectionRate"}
    runbook = RUNBOOK.read_text(encoding="utf-8")
    anchors = {_github_anchor(h) for h in re.findall(r"^#+\s+(.+?)\s*$", runbook, re.MULTILINE)}
    for name, rule in rules.items():
        assert metric_names(rule["expr"]) <= CONTRACT_METRICS, name
        ann = rule["annotations"]
        assert ann["summary"].strip() and ann["description"].strip(), name
        url = ann["runbook_url"]
        assert (
            url == f"https://github.com/otel-breaker/otel-breaker/blob/main/docs/dashboards.md#runbook-{name.lower()}"
        )
        assert url.split("#", 1)[1] in anchors, f"{ALERTS.name}: no runbook section for {name}"
        assert rule["labels"]["severity"] in {"warning", "critical"}
    assert 'otel_breaker_to_state="open"' in rules["OtelBreakerFrequentOpenings"]["expr"]
    assert "[15m]" in rules["OtelBreakerFrequentOpenings"]["expr"]
    assert rules["OtelBreakerStuckOpen"]["for"]


def _github_anchor(heading: str) -> str:
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")
