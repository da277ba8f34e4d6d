"""Generate the otel-breaker Grafana dashboard.

The dashboard JSON in ``dashboards/grafana/otel-breaker.json`` is produced by this script and
committed; ``tests/dashboards/test_dashboard_structure.py`` checks that regenerating it reproduces
the committed file byte for byte. Edit this file, then run::

    python dashboards/generate_dashboard.py

Plain Python dicts, standard library only, no network access. Metric names are the Prometheus
names produced by the OpenTelemetry Prometheus exporters (see ``dashboards/README.md``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

OUTPUT = Path(__file__).resolve().parent / "grafana" / "otel-breaker.json"

DS = {"type": "prometheus", "uid": "${datasource}"}

# Metric names as they appear in Prometheus.
STATE = "otel_breaker_state"
TRANSITIONS = "otel_breaker_transitions_total"
CALLS = "otel_breaker_calls_total"
REJECTED = "otel_breaker_calls_rejected_total"
TOKENS_SAVED = "otel_breaker_tokens_saved_total"
COST_SAVED = "otel_breaker_cost_saved_USD_total"
DURATION_BUCKET = "gen_ai_execute_tool_duration_seconds_bucket"
STORE_ERRORS = "otel_breaker_store_errors_total"

# Label matchers driven by the template variables. ``gen_ai_agent_name`` is optional on the
# breaker metrics; ``=~".*"`` (the "All" value) also matches series without the label.
SEL = 'job=~"$service", gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"'
# Metrics that never carry the agent label (tokens saved, cost saved).
SEL_NO_AGENT = 'job=~"$service", gen_ai_tool_name=~"$tool"'
SEL_SERVICE = 'job=~"$service"'

STATE_COLORS = {"closed": "green", "half_open": "yellow", "open": "red"}


def target(expr, legend="__auto", ref="A", instant=False, fmt="time_series"):
    t = {
        "datasource": DS,
        "editorMode": "code",
        "expr": expr,
        "legendFormat": legend,
        "range": not instant,
        "instant": instant,
        "refId": ref,
    }
    if fmt != "time_series":
        t["format"] = fmt
    return t


class Layout:
    """Hands out panel ids and grid positions row by row (24 columns)."""

    def __init__(self):
        self.next_id = 1
        self.y = 0
        self.x = 0
        self.row_height = 0

    def take_id(self):
        pid = self.next_id
        self.next_id += 1
        return pid

    def place(self, w, h):
        if self.x + w > 24:
            self.newline()
        pos = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.row_height = max(self.row_height, h)
        return pos

    def newline(self):
        self.y += self.row_height
        self.x = 0
        self.row_height = 0


def row(layout, title):
    layout.newline()
    panel = {
        "collapsed": False,
        "gridPos": {"h": 1, "w": 24, "x": 0, "y": layout.y},
        "id": layout.take_id(),
        "panels": [],
        "title": title,
        "type": "row",
    }
    layout.y += 1
    return panel


def base_panel(layout, kind, title, description, w, h, targets):
    return {
        "datasource": DS,
        "description": description,
        "gridPos": layout.place(w, h),
        "id": layout.take_id(),
        "targets": targets,
        "title": title,
        "type": kind,
    }


def stat(layout, title, description, expr, unit="short", thresholds=None, decimals=None):
    panel = base_panel(layout, "stat", title, description, 4, 4, [target(expr, legend="")])
    defaults = {
        "color": {"mode": "thresholds"},
        "mappings": [],
        "noValue": "0",
        "thresholds": {
            "mode": "absolute",
            "steps": thresholds or [{"color": "green", "value": None}],
        },
        "unit": unit,
    }
    if decimals is not None:
        defaults["decimals"] = decimals
    panel["fieldConfig"] = {"defaults": defaults, "overrides": []}
    panel["options"] = {
        "colorMode": "background",
        "graphMode": "area",
        "justifyMode": "auto",
        "orientation": "auto",
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "showPercentChange": False,
        "textMode": "auto",
        "wideLayout": True,
    }
    return panel


def timeseries(layout, title, description, targets, unit="short", w=12, h=8, stack=False, bars=False, max_value=None):
    panel = base_panel(layout, "timeseries", title, description, w, h, targets)
    custom = {
        "axisBorderShow": False,
        "axisPlacement": "auto",
        "drawStyle": "bars" if bars else "line",
        "fillOpacity": 60 if bars else (30 if stack else 10),
        "lineWidth": 1,
        "pointSize": 4,
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"group": "A", "mode": "normal" if stack else "none"},
    }
    defaults = {
        "color": {"mode": "palette-classic"},
        "custom": custom,
        "min": 0,
        "unit": unit,
    }
    if max_value is not None:
        defaults["max"] = max_value
    panel["fieldConfig"] = {"defaults": defaults, "overrides": []}
    panel["options"] = {
        "legend": {"calcs": ["max", "lastNotNull"], "displayMode": "table", "placement": "right", "showLegend": True},
        "tooltip": {"mode": "multi", "sort": "desc"},
    }
    return panel


def build():
    layout = Layout()
    panels = []

    # ---- Overview -------------------------------------------------------------------------
    panels.append(row(layout, "Overview"))
    panels.append(
        stat(
            layout,
            "Breakers open now",
            "Number of breakers currently open (rejecting calls). Each breaker is one tool "
            "(optionally per agent) in one process.",
            f'sum({STATE}{{{SEL}, otel_breaker_state="open"}})',
            thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1}],
        )
    )
    panels.append(
        stat(
            layout,
            "Breakers half-open now",
            "Breakers admitting a probe call after their cooldown.",
            f'sum({STATE}{{{SEL}, otel_breaker_state="half_open"}})',
            thresholds=[{"color": "green", "value": None}, {"color": "yellow", "value": 1}],
        )
    )
    panels.append(
        stat(
            layout,
            "Openings in range",
            "Transitions into the open state over the selected time range.",
            f'sum(increase({TRANSITIONS}{{{SEL}, otel_breaker_to_state="open"}}[$__range]))',
            thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}],
            decimals=0,
        )
    )
    panels.append(
        stat(
            layout,
            "Rejected calls in range",
            "Tool calls the breakers rejected (enforce mode) or would have rejected (observe mode) "
            "over the selected time range.",
            f"sum(increase({REJECTED}{{{SEL}}}[$__range]))",
            thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}],
            decimals=0,
        )
    )
    panels.append(
        stat(
            layout,
            "Estimated tokens saved in range",
            "Estimated LLM tokens not spent because rejected tool calls were not executed and their "
            "results not fed back to the model.",
            f"sum(increase({TOKENS_SAVED}{{{SEL_NO_AGENT}}}[$__range]))",
            decimals=0,
        )
    )
    panels.append(
        stat(
            layout,
            "Estimated cost saved in range",
            "Estimated USD saved by rejected calls; shown only when a price per token is configured.",
            f"sum(increase({COST_SAVED}{{{SEL_NO_AGENT}}}[$__range]))",
            unit="currencyUSD",
            decimals=2,
        )
    )

    # ---- Breaker state ----------------------------------------------------------------------
    panels.append(row(layout, "Breaker state"))
    timeline = base_panel(
        layout,
        "state-timeline",
        "Breaker state per tool",
        "Worst state per tool across processes and agents: closed, half-open or open.",
        24,
        8,
        [
            target(
                "max by (gen_ai_tool_name) ("
                f'{STATE}{{{SEL}, otel_breaker_state="open"}} * 2'
                f' or {STATE}{{{SEL}, otel_breaker_state="half_open"}} * 1'
                f' or {STATE}{{{SEL}, otel_breaker_state="closed"}} * 0'
                ")",
                legend="{{gen_ai_tool_name}}",
            )
        ],
    )
    timeline["fieldConfig"] = {
        "defaults": {
            "color": {"mode": "thresholds"},
            "custom": {"fillOpacity": 80, "lineWidth": 0},
            "mappings": [
                {
                    "options": {
                        "0": {"color": STATE_COLORS["closed"], "index": 0, "text": "closed"},
                        "1": {"color": STATE_COLORS["half_open"], "index": 1, "text": "half-open"},
                        "2": {"color": STATE_COLORS["open"], "index": 2, "text": "open"},
                    },
                    "type": "value",
                },
            ],
            "thresholds": {
                "mode": "absolute",
                "steps": [
                    {"color": "green", "value": None},
                    {"color": "yellow", "value": 1},
                    {"color": "red", "value": 2},
                ],
            },
        },
        "overrides": [],
    }
    timeline["options"] = {
        "alignValue": "left",
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
        "mergeValues": True,
        "rowHeight": 0.9,
        "showValue": "auto",
        "tooltip": {"mode": "single", "sort": "none"},
    }
    panels.append(timeline)
    layout.newline()

    panels.append(
        timeseries(
            layout,
            "Openings per tool",
            "Transitions into the open state, per tool (from closed after failures, or from "
            "half-open after a failed probe).",
            [
                target(
                    "sum by (gen_ai_tool_name) (increase("
                    f'{TRANSITIONS}{{{SEL}, otel_breaker_to_state="open"}}[$__rate_interval]))',
                    legend="{{gen_ai_tool_name}}",
                )
            ],
            bars=True,
        )
    )
    panels.append(
        timeseries(
            layout,
            "Rejected calls per second per tool",
            "Calls rejected by an open or half-open breaker. Mode observe = would have been "
            "rejected (shadow mode, the call still ran).",
            [
                target(
                    f"sum by (gen_ai_tool_name, otel_breaker_mode) (rate({REJECTED}{{{SEL}}}[$__rate_interval]))",
                    legend="{{gen_ai_tool_name}} ({{otel_breaker_mode}})",
                )
            ],
            unit="reqps",
        )
    )

    # ---- Calls --------------------------------------------------------------------------------
    panels.append(row(layout, "Tool calls"))
    panels.append(
        timeseries(
            layout,
            "Call outcomes per tool",
            "Calls the breakers admitted, by outcome: success, failure (counts towards opening) "
            "or ignored (excluded errors such as cancellations or permission denials).",
            [
                target(
                    f"sum by (gen_ai_tool_name, otel_breaker_outcome) (rate({CALLS}{{{SEL}}}[$__rate_interval]))",
                    legend="{{gen_ai_tool_name}} {{otel_breaker_outcome}}",
                )
            ],
            unit="reqps",
            stack=True,
        )
    )
    panels.append(
        timeseries(
            layout,
            "Failure ratio per tool",
            "failure / (success + failure) of admitted calls; ignored outcomes are left out.",
            [
                target(
                    "(sum by (gen_ai_tool_name) (rate("
                    f'{CALLS}{{{SEL}, otel_breaker_outcome="failure"}}[$__rate_interval]))'
                    " or sum by (gen_ai_tool_name) (rate("
                    f"{CALLS}{{{SEL}}}[$__rate_interval])) * 0)"
                    " / sum by (gen_ai_tool_name) (rate("
                    f'{CALLS}{{{SEL}, otel_breaker_outcome=~"success|failure"}}[$__rate_interval]))',
                    legend="{{gen_ai_tool_name}}",
                )
            ],
            unit="percentunit",
            max_value=1,
        )
    )
    panels.append(
        timeseries(
            layout,
            "Tool latency p50 / p95",
            "Duration of executed tool calls (gen_ai.execute_tool.duration), from histogram buckets.",
            [
                target(
                    "histogram_quantile(0.5, sum by (le, gen_ai_tool_name) (rate("
                    f"{DURATION_BUCKET}{{{SEL}}}[$__rate_interval])))",
                    legend="{{gen_ai_tool_name}} p50",
                    ref="A",
                ),
                target(
                    "histogram_quantile(0.95, sum by (le, gen_ai_tool_name) (rate("
                    f"{DURATION_BUCKET}{{{SEL}}}[$__rate_interval])))",
                    legend="{{gen_ai_tool_name}} p95",
                    ref="B",
                ),
            ],
            unit="s",
        )
    )
    top = base_panel(
        layout,
        "table",
        "Top tools by rejections",
        "Tools with the most rejected calls over the selected time range.",
        12,
        8,
        [
            target(
                f"topk(10, sum by (job, gen_ai_tool_name) (increase({REJECTED}{{{SEL}}}[$__range])))",
                legend="",
                instant=True,
                fmt="table",
            )
        ],
    )
    top["fieldConfig"] = {
        "defaults": {"custom": {"align": "auto", "cellOptions": {"type": "auto"}}, "decimals": 0, "unit": "short"},
        "overrides": [],
    }
    top["options"] = {
        "cellHeight": "sm",
        "showHeader": True,
        "sortBy": [{"desc": True, "displayName": "rejected calls"}],
    }
    top["transformations"] = [
        {
            "id": "organize",
            "options": {
                "excludeByName": {"Time": True},
                "indexByName": {"gen_ai_tool_name": 0, "job": 1, "Value": 2},
                "renameByName": {"Value": "rejected calls", "gen_ai_tool_name": "tool", "job": "service"},
            },
        }
    ]
    panels.append(top)

    # ---- Savings and store --------------------------------------------------------------------
    panels.append(row(layout, "Savings and shared store"))
    panels.append(
        timeseries(
            layout,
            "Estimated tokens saved per second",
            "Rate of estimated tokens saved, per tool and estimate source (observed = learned from "
            "gen_ai.usage.* of earlier calls, configured = a fixed estimate).",
            [
                target(
                    "sum by (gen_ai_tool_name, otel_breaker_estimate_source) (rate("
                    f"{TOKENS_SAVED}{{{SEL_NO_AGENT}}}[$__rate_interval]))",
                    legend="{{gen_ai_tool_name}} ({{otel_breaker_estimate_source}})",
                )
            ],
            w=8,
        )
    )
    panels.append(
        timeseries(
            layout,
            "Estimated cost saved (USD per hour)",
            "Estimated USD saved per hour by rejected calls; empty when no price is configured.",
            [
                target(
                    f"sum by (gen_ai_tool_name) (rate({COST_SAVED}{{{SEL_NO_AGENT}}}[$__rate_interval])) * 3600",
                    legend="{{gen_ai_tool_name}}",
                )
            ],
            unit="currencyUSD",
            w=8,
        )
    )
    panels.append(
        timeseries(
            layout,
            "Shared store errors per second",
            "Errors talking to the shared breaker store (e.g. Redis). Breakers fall back to local "
            "state while the store is unavailable.",
            [
                target(
                    f"sum by (job) (rate({STORE_ERRORS}{{{SEL_SERVICE}}}[$__rate_interval]))",
                    legend="{{job}}",
                )
            ],
            unit="reqps",
            w=8,
        )
    )

    templating = [
        {
            "current": {},
            "hide": 0,
            "includeAll": False,
            "label": "Data source",
            "multi": False,
            "name": "datasource",
            "options": [],
            "query": "prometheus",
            "refresh": 1,
            "regex": "",
            "skipUrlSync": False,
            "type": "datasource",
        },
        query_variable("service", "Service", f"label_values({STATE}, job)"),
        query_variable("agent", "Agent", f'label_values({STATE}{{job=~"$service"}}, gen_ai_agent_name)'),
        query_variable(
            "tool",
            "Tool",
            f'label_values({STATE}{{job=~"$service", gen_ai_agent_name=~"$agent"}}, gen_ai_tool_name)',
        ),
    ]

    annotations = [
        {
            "builtIn": 1,
            "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True,
            "hide": True,
            "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts",
            "type": "dashboard",
        },
        {
            "datasource": DS,
            "enable": True,
            "expr": (
                "sum by (job, gen_ai_tool_name) (increase("
                f'{TRANSITIONS}{{{SEL}, otel_breaker_to_state="open"}}[$__interval])) > 0'
            ),
            "hide": False,
            "iconColor": "red",
            "name": "Breaker openings",
            "step": "1m",
            "tagKeys": "job,gen_ai_tool_name",
            "textFormat": "breaker for tool {{gen_ai_tool_name}} opened ({{job}})",
            "titleFormat": "Breaker opened",
            "useValueForTime": False,
        },
    ]

    return {
        "annotations": {"list": annotations},
        "description": "Circuit breakers on AI agent tool calls: state, openings, rejections, "
        "outcomes, latency and estimated savings.",
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "links": [],
        "panels": panels,
        "refresh": "30s",
        "schemaVersion": 39,
        "tags": ["otel-breaker", "circuit-breaker", "gen-ai"],
        "templating": {"list": templating},
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "title": "otel-breaker: tool circuit breakers",
        "uid": "otel-breaker-overview",
        "version": 1,
        "weekStart": "",
    }


def query_variable(name, label, query):
    return {
        "allValue": ".*",
        "current": {},
        "datasource": DS,
        "definition": query,
        "hide": 0,
        "includeAll": True,
        "label": label,
        "multi": True,
        "name": name,
        "options": [],
        "query": {
            "qryType": 1,
            "query": query,
            "refId": "PrometheusVariableQueryEditor-VariableQuery",
        },
        "refresh": 2,
        "regex": "",
        "skipUrlSync": False,
        "sort": 1,
        "type": "query",
    }


def render():
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the file on disk differs from the generated dashboard"
    )
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date; run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
