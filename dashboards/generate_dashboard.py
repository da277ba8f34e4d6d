"""Generate the otel-breaker Grafana dashboard with Grafana's typed SDK.

The dashboard JSON in ``dashboards/grafana/otel-breaker.json`` is produced by this script and
committed; ``tests/dashboards/test_dashboard_structure.py`` checks that regenerating it reproduces
the committed file byte for byte. Edit this file, then run::

    python dashboards/generate_dashboard.py

Panels, queries and variables are built with ``grafana-foundation-sdk`` (typed builders
generated from Grafana's own schema), so a misspelt option fails here rather than in Grafana.
Metric and label names come from ``otel_breaker.semconv``, the module the instrumentation itself
emits them from, translated to their Prometheus names.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    DataTransformerConfig,
    Threshold,
    ThresholdsMode,
    ValueMap,
    ValueMappingResult,
    VariableHide,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat, QueryEditorMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout
from otel_breaker import semconv

OUTPUT = Path(__file__).resolve().parent / "grafana" / "otel-breaker.json"

DS = DataSourceRef(type_val="prometheus", uid="${datasource}")

# Metric names as they appear in Prometheus.
STATE = semconv.STATE.prometheus
TRANSITIONS = semconv.TRANSITIONS.prometheus
CALLS = semconv.CALLS.prometheus
REJECTED = semconv.REJECTED.prometheus
LOOPS = semconv.LOOPS.prometheus
RETRIES = semconv.RETRIES.prometheus
TOKENS_SAVED = semconv.TOKENS_SAVED.prometheus
COST_SAVED = semconv.COST_SAVED.prometheus
DURATION_BUCKET = semconv.DURATION.prometheus + "_bucket"
STORE_ERRORS = semconv.STORE_ERRORS.prometheus

# Label names as they appear in Prometheus.
TOOL = semconv.prometheus_label(semconv.ATTR_TOOL)
AGENT = semconv.prometheus_label(semconv.ATTR_AGENT)
BREAKER_STATE = semconv.prometheus_label(semconv.ATTR_STATE)
TO_STATE = semconv.prometheus_label(semconv.ATTR_TO_STATE)
OUTCOME = semconv.prometheus_label(semconv.ATTR_OUTCOME)
MODE = semconv.prometheus_label(semconv.ATTR_MODE)
REASON = semconv.prometheus_label(semconv.ATTR_REASON)
SOURCE = semconv.prometheus_label(semconv.ATTR_ESTIMATE_SOURCE)
UPSTREAM = semconv.prometheus_label(semconv.ATTR_UPSTREAM)
#: An upstream's own breaker is the series whose tool name is ``upstream:<name>``.
UPSTREAM_BREAKER = f'{TOOL}=~"upstream:.+"'

# Label matchers driven by the template variables. The agent label is optional on the
# breaker metrics; ``=~".*"`` (the "All" value) also matches series without the label.
SEL = f'job=~"$service", {AGENT}=~"$agent", {TOOL}=~"$tool"'
SEL_SERVICE = 'job=~"$service"'
#: The upstream panels: per service, not per agent or tool (an upstream serves them all).
SEL_UPSTREAM = f"{SEL_SERVICE}, {UPSTREAM_BREAKER}"

#: Where a rejected call's trace is seen in the example stack (examples/compose.yaml):
#: Jaeger's search for spans with otel_breaker.rejected=true. Jaeger searches one service;
#: ``$service`` is multi-value (``{a,b}`` in a URL), so the dashboard's link names none (the
#: service is picked in Jaeger) and a table row's link names its own row's service.
JAEGER_REJECTED = "http://localhost:16686/search?limit=20&tags=%7B%22" + semconv.ATTR_REJECTED + "%22%3A%22true%22%7D"
JAEGER_REJECTED_OF_TOOL = (
    JAEGER_REJECTED
    + "&service=${__data.fields.job}&operation="
    + semconv.span_name("${__value.raw}").replace(" ", "%20")
)


def query(expr: str, legend: str = "__auto", ref: str = "A") -> prometheus.Dataquery:
    return (
        prometheus.Dataquery()
        .datasource(DS)
        .editor_mode(QueryEditorMode.CODE)
        .expr(expr)
        .legend_format(legend)
        .range()
        .ref_id(ref)
    )


def steps(*pairs: tuple[str, float | None]) -> dash.ThresholdsConfig:
    return (
        dash.ThresholdsConfig()
        .mode(ThresholdsMode.ABSOLUTE)
        .steps([Threshold(value=value, color=color) for color, value in pairs])
    )


class Ids:
    """Panel ids in order of appearance."""

    def __init__(self) -> None:
        self.last = 0

    def __call__(self) -> int:
        self.last += 1
        return self.last


def stat_panel(
    ids: Ids, title: str, description: str, expr: str, unit: str = "short", warn: str | None = None, decimals=None
) -> stat.Panel:
    thresholds = steps(("green", None), (warn, 1)) if warn else steps(("green", None))
    panel = (
        stat.Panel()
        .id(ids())
        .title(title)
        .description(description)
        .datasource(DS)
        .span(4)
        .height(4)
        .with_target(query(expr, legend=""))
        .unit(unit)
        .no_value("0")
        .mappings([])
        .thresholds(thresholds)
        .color_scheme(dash.FieldColor().mode("thresholds"))
        .color_mode(common.BigValueColorMode.BACKGROUND)
        .graph_mode(common.BigValueGraphMode.AREA)
        .justify_mode(common.BigValueJustifyMode.AUTO)
        .orientation(common.VizOrientation.AUTO)
        .text_mode(common.BigValueTextMode.AUTO)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False))
    )
    if decimals is not None:
        panel = panel.decimals(decimals)
    return panel


def series_panel(
    ids: Ids,
    title: str,
    description: str,
    targets: list[prometheus.Dataquery],
    unit: str = "short",
    w: int = 12,
    stack: bool = False,
    bars: bool = False,
    max_value: float | None = None,
) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .id(ids())
        .title(title)
        .description(description)
        .datasource(DS)
        .span(w)
        .height(8)
        .targets(targets)
        .unit(unit)
        .min(0)
        .color_scheme(dash.FieldColor().mode("palette-classic"))
        .draw_style(common.GraphDrawStyle.BARS if bars else common.GraphDrawStyle.LINE)
        .fill_opacity(60 if bars else (30 if stack else 10))
        .line_width(1)
        .point_size(4)
        .show_points(common.VisibilityMode.NEVER)
        .span_nulls(False)
        .axis_placement(common.AxisPlacement.AUTO)
        .stacking(
            common_builders.StackingConfig()
            .group("A")
            .mode(common.StackingMode.NORMAL if stack else common.StackingMode.NONE)
        )
        .legend(
            common_builders.VizLegendOptions()
            .calcs(["max", "lastNotNull"])
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.RIGHT)
            .show_legend(True)
        )
        .tooltip(
            common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI).sort(common.SortOrder.DESCENDING)
        )
    )
    if max_value is not None:
        panel = panel.max(max_value)
    return panel


def state_timeline(ids: Ids) -> statetimeline.Panel:
    worst_state = (
        f"max by ({TOOL}) ("
        f'{STATE}{{{SEL}, {BREAKER_STATE}="open"}} * 2'
        f' or {STATE}{{{SEL}, {BREAKER_STATE}="half_open"}} * 1'
        f' or {STATE}{{{SEL}, {BREAKER_STATE}="closed"}} * 0'
        ")"
    )
    names = {"0": ("green", "closed"), "1": ("yellow", "half-open"), "2": ("red", "open")}
    return (
        statetimeline.Panel()
        .id(ids())
        .title("Breaker state per tool")
        .description("Worst state per tool across processes and agents: closed, half-open or open.")
        .datasource(DS)
        .span(24)
        .height(8)
        .with_target(query(worst_state, legend="{{" + TOOL + "}}"))
        .color_scheme(dash.FieldColor().mode("thresholds"))
        .fill_opacity(80)
        .line_width(0)
        .mappings(
            [
                ValueMap(
                    options={
                        value: ValueMappingResult(color=color, index=index, text=text)
                        for index, (value, (color, text)) in enumerate(names.items())
                    },
                )
            ]
        )
        .thresholds(steps(("green", None), ("yellow", 1), ("red", 2)))
        .align_value(common.TimelineValueAlignment.LEFT)
        .merge_values(True)
        .row_height(0.9)
        .show_value(common.VisibilityMode.AUTO)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.SINGLE).sort(common.SortOrder.NONE))
    )


def top_tools(ids: Ids) -> table.Panel:
    expr = f"topk(10, sum by (job, {TOOL}) (increase({REJECTED}{{{SEL}}}[$__range])))"
    return (
        table.Panel()
        .id(ids())
        .title("Top tools by rejections")
        .description(
            "Tools with the most rejected calls over the selected time range. "
            "Open a tool's rejected calls in the trace view from the link."
        )
        .datasource(DS)
        .span(12)
        .height(8)
        .with_target(query(expr, legend="").instant().format(PromQueryFormat.TABLE))
        .decimals(0)
        .unit("short")
        .cell_height(common.TableCellHeight.SM)
        .show_header(True)
        .sort_by([common_builders.TableSortByFieldState().display_name("rejected calls").desc(True)])
        .override_by_name(
            "tool",
            [
                {
                    "id": "links",
                    "value": [
                        {
                            "title": "Rejected calls of ${__value.raw} in Jaeger",
                            "url": JAEGER_REJECTED_OF_TOOL,
                            "targetBlank": True,
                        }
                    ],
                }
            ],
        )
        .with_transformation(
            DataTransformerConfig(
                id_val="organize",
                options={
                    "excludeByName": {"Time": True},
                    "indexByName": {TOOL: 0, "job": 1, "Value": 2},
                    "renameByName": {"Value": "rejected calls", TOOL: "tool", "job": "service"},
                },
            )
        )
    )


def variable(name: str, label: str, definition: str) -> dash.QueryVariable:
    return (
        dash.QueryVariable(name)
        .label(label)
        .datasource(DS)
        .query({"qryType": 1, "query": definition, "refId": "PrometheusVariableQueryEditor-VariableQuery"})
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .hide(VariableHide.DONT_HIDE)
        .regex("")
    )


def build() -> dash.Dashboard:
    ids = Ids()
    board = (
        dash.Dashboard("otel-breaker: tool circuit breakers")
        .uid("otel-breaker-overview")
        .description(
            "Circuit breakers on AI agent tool calls: state, openings, rejections, "
            "outcomes, latency and estimated savings."
        )
        .tags(["otel-breaker", "circuit-breaker", "gen-ai"])
        .editable()
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("browser")
        .version(1)
        .link(
            dash.DashboardLink("Rejected calls in Jaeger")
            .type("link")
            .icon("external link")
            .tooltip("Traces of rejected tool calls (the example stack's Jaeger)")
            .url(JAEGER_REJECTED)
            .target_blank(True)
        )
        .with_variable(
            dash.DatasourceVariable("datasource").label("Data source").type("prometheus").multi(False).regex("")
        )
        .with_variable(variable("service", "Service", f"label_values({STATE}, job)"))
        .with_variable(variable("agent", "Agent", f'label_values({STATE}{{job=~"$service"}}, {AGENT})'))
        .with_variable(variable("tool", "Tool", f'label_values({STATE}{{job=~"$service", {AGENT}=~"$agent"}}, {TOOL})'))
        .annotation(
            dash.AnnotationQuery()
            .name("Breaker openings")
            .datasource(DS)
            .enable(True)
            .hide(False)
            .icon_color("red")
            .expr(f'sum by (job, {TOOL}) (increase({TRANSITIONS}{{{SEL}, {TO_STATE}="open"}}[$__interval])) > 0')
        )
    )

    # ---- Overview -------------------------------------------------------------------------
    board = board.with_row(dash.Row("Overview").id(ids()))
    board = board.with_panel(
        stat_panel(
            ids,
            "Breakers open now",
            "Number of breakers currently open (rejecting calls). Each breaker is one tool "
            "(optionally per agent) in one process.",
            f'sum({STATE}{{{SEL}, {BREAKER_STATE}="open"}})',
            warn="red",
        )
    )
    board = board.with_panel(
        stat_panel(
            ids,
            "Breakers half-open now",
            "Breakers admitting a probe call after their cooldown.",
            f'sum({STATE}{{{SEL}, {BREAKER_STATE}="half_open"}})',
            warn="yellow",
        )
    )
    board = board.with_panel(
        stat_panel(
            ids,
            "Openings in range",
            "Transitions into the open state over the selected time range.",
            f'sum(increase({TRANSITIONS}{{{SEL}, {TO_STATE}="open"}}[$__range]))',
            warn="orange",
            decimals=0,
        )
    )
    board = board.with_panel(
        stat_panel(
            ids,
            "Rejected calls in range",
            "Tool calls the breakers rejected (enforce mode) or would have rejected (observe mode) "
            "over the selected time range.",
            f"sum(increase({REJECTED}{{{SEL}}}[$__range]))",
            warn="orange",
            decimals=0,
        )
    )
    board = board.with_panel(
        stat_panel(
            ids,
            "Estimated tokens saved in range",
            "Estimated LLM tokens not spent because rejected tool calls were not executed and their "
            "results not fed back to the model.",
            f"sum(increase({TOKENS_SAVED}{{{SEL}}}[$__range]))",
            decimals=0,
        )
    )
    board = board.with_panel(
        stat_panel(
            ids,
            "Estimated cost saved in range",
            "Estimated USD saved by rejected calls; shown only when a price per token is configured.",
            f"sum(increase({COST_SAVED}{{{SEL}}}[$__range]))",
            unit="currencyUSD",
            decimals=2,
        )
    )

    # ---- Breaker state ----------------------------------------------------------------------
    board = board.with_row(dash.Row("Breaker state").id(ids()))
    board = board.with_panel(state_timeline(ids))
    board = board.with_panel(
        series_panel(
            ids,
            "Openings per tool",
            "Transitions into the open state, per tool (from closed after failures, or from "
            "half-open after a failed probe).",
            [
                query(
                    f'sum by ({TOOL}) (increase({TRANSITIONS}{{{SEL}, {TO_STATE}="open"}}[$__rate_interval]))',
                    legend="{{" + TOOL + "}}",
                )
            ],
            bars=True,
        )
    )
    board = board.with_panel(
        series_panel(
            ids,
            "Rejected calls per second per tool",
            "Calls rejected by an open or half-open breaker. Mode observe = would have been "
            "rejected (shadow mode, the call still ran). Their traces: the dashboard link "
            "'Rejected calls in Jaeger'.",
            [
                query(
                    f"sum by ({TOOL}, {MODE}) (rate({REJECTED}{{{SEL}}}[$__rate_interval]))",
                    legend="{{" + TOOL + "}} ({{" + MODE + "}})",
                )
            ],
            unit="reqps",
        )
    )
    # A tool the loop guard never met shows 0 (its calls, times 0), not "no data".
    no_loops = f"(sum by ({TOOL}) (rate({CALLS}{{{SEL}}}[$__rate_interval])) * 0)"
    board = board.with_panel(
        series_panel(
            ids,
            "Loop guard and waste budget per tool",
            "Identical calls that already failed the same way OTEL_BREAKER_LOOP_LIMIT times in a run: "
            "not run (reject or stop), or run with a warning (warn). Only the model's repeated mistakes "
            "count by default (OTEL_BREAKER_LOOP_COUNT); they never count toward a breaker opening. "
            "Waste budget: calls of a tool a run kept calling after its breaker had rejected it "
            "OTEL_BREAKER_RUN_REJECTIONS times (hidden from that run's menu, or the run stopped).",
            [
                query(
                    f'sum by ({TOOL}) (rate({REJECTED}{{{SEL}, {REASON}="{semconv.REASON_LOOP}"}}'
                    f"[$__rate_interval])) or {no_loops}",
                    legend="{{" + TOOL + "}} not run",
                ),
                query(
                    f"sum by ({TOOL}) (rate({LOOPS}{{{SEL}}}[$__rate_interval])) or {no_loops}",
                    legend="{{" + TOOL + "}} warned, ran",
                    ref="B",
                ),
                query(
                    f'sum by ({TOOL}) (rate({REJECTED}{{{SEL}, {REASON}="{semconv.REASON_RUN_BUDGET}"}}'
                    f"[$__rate_interval])) or {no_loops}",
                    legend="{{" + TOOL + "}} run budget spent",
                    ref="C",
                ),
            ],
            unit="reqps",
        )
    )

    # ---- Upstreams --------------------------------------------------------------------------
    board = board.with_row(dash.Row("Upstreams (servers and API hosts)").id(ids()))
    board = board.with_panel(
        series_panel(
            ids,
            "Upstream breakers open",
            "Upstream breakers (one per MCP server or OTEL_BREAKER_UPSTREAMS group) that are open: "
            "every tool behind them is rejected without a round trip. 1 = open.",
            [
                query(
                    f'max by ({UPSTREAM}) ({STATE}{{{SEL_UPSTREAM}, {BREAKER_STATE}="open"}})',
                    legend="{{" + UPSTREAM + "}}",
                )
            ],
            w=8,
        )
    )
    board = board.with_panel(
        series_panel(
            ids,
            "Upstream openings",
            "Transitions of upstream breakers into the open state (repeated transport failures: "
            "connection refused/reset, DNS, TLS, timeouts, HTTP 502/503/504, closed MCP sessions).",
            [
                query(
                    f"sum by ({UPSTREAM}) (increase({TRANSITIONS}"
                    f'{{{SEL_UPSTREAM}, {TO_STATE}="open"}}[$__rate_interval]))',
                    legend="{{" + UPSTREAM + "}}",
                )
            ],
            bars=True,
            w=8,
        )
    )
    board = board.with_panel(
        series_panel(
            ids,
            "Calls rejected per upstream",
            "Rejections by upstream breakers per second: calls that never went out to a dead server.",
            [
                query(
                    f"sum by ({UPSTREAM}) (rate({REJECTED}{{{SEL_UPSTREAM}}}[$__rate_interval]))",
                    legend="{{" + UPSTREAM + "}}",
                )
            ],
            unit="reqps",
            w=8,
        )
    )

    # ---- Calls --------------------------------------------------------------------------------
    board = board.with_row(dash.Row("Tool calls").id(ids()))
    board = board.with_panel(
        series_panel(
            ids,
            "Call outcomes per tool",
            "Calls the breakers admitted, by outcome: success, failure (counts towards opening) "
            "or ignored (excluded errors such as cancellations or permission denials).",
            [
                query(
                    f"sum by ({TOOL}, {OUTCOME}) (rate({CALLS}{{{SEL}}}[$__rate_interval]))",
                    legend="{{" + TOOL + "}} {{" + OUTCOME + "}}",
                )
            ],
            unit="reqps",
            stack=True,
        )
    )
    board = board.with_panel(
        series_panel(
            ids,
            "Failure ratio per tool",
            "failure / (success + failure) of admitted calls; ignored outcomes are left out.",
            [
                query(
                    f"(sum by ({TOOL}) (rate("
                    f'{CALLS}{{{SEL}, {OUTCOME}="failure"}}[$__rate_interval]))'
                    f" or sum by ({TOOL}) (rate("
                    f"{CALLS}{{{SEL}}}[$__rate_interval])) * 0)"
                    f" / sum by ({TOOL}) (rate("
                    f'{CALLS}{{{SEL}, {OUTCOME}=~"success|failure"}}[$__rate_interval]))',
                    legend="{{" + TOOL + "}}",
                )
            ],
            unit="percentunit",
            max_value=1,
        )
    )
    board = board.with_panel(
        series_panel(
            ids,
            "Tool latency p50 / p95",
            f"Duration of executed tool calls ({semconv.DURATION.name}), from histogram buckets.",
            [
                query(
                    f"histogram_quantile({quantile}, sum by (le, {TOOL}) (rate("
                    f"{DURATION_BUCKET}{{{SEL}}}[$__rate_interval])))",
                    legend="{{" + TOOL + "}} p" + label,
                    ref=ref,
                )
                for quantile, label, ref in (("0.5", "50", "A"), ("0.95", "95", "B"))
            ],
            unit="s",
        )
    )
    # A tool that never retried shows 0 (its calls, times 0), not "no data".
    no_retries = f"(sum by ({TOOL}) (rate({CALLS}{{{SEL}}}[$__rate_interval])) * 0)"
    board = board.with_panel(
        series_panel(
            ids,
            "Retries below the model and retry budget",
            "Retries of transient failures of read-only and idempotent tools (OTEL_BREAKER_RETRY=transient), "
            "by the retry's outcome, next to the retries the budget refused (budget_exhausted: retries "
            "stay within 20% of calls, so a dead backend never gets more traffic). Empty when retries are off.",
            [
                query(
                    f"sum by ({TOOL}, {OUTCOME}) (rate({RETRIES}{{{SEL}}}[$__rate_interval])) or {no_retries}",
                    legend="{{" + TOOL + "}} {{" + OUTCOME + "}}",
                ),
                query(
                    f"(sum by ({TOOL}) (rate({RETRIES}{{{SEL}}}[$__rate_interval])) or {no_retries})"
                    f" / sum by ({TOOL}) (rate({CALLS}{{{SEL}}}[$__rate_interval]))",
                    legend="{{" + TOOL + "}} retries per call",
                    ref="B",
                ),
            ],
            unit="short",
        )
    )
    board = board.with_panel(top_tools(ids))

    # ---- Savings and store --------------------------------------------------------------------
    board = board.with_row(dash.Row("Savings and shared store").id(ids()))
    board = board.with_panel(
        series_panel(
            ids,
            "Estimated tokens saved per second",
            "Rate of estimated tokens saved, per tool and estimate source (observed = learned from "
            "gen_ai.usage.* of earlier calls, configured = a fixed estimate).",
            [
                query(
                    f"sum by ({TOOL}, {SOURCE}) (rate({TOKENS_SAVED}{{{SEL}}}[$__rate_interval]))",
                    legend="{{" + TOOL + "}} ({{" + SOURCE + "}})",
                )
            ],
            w=8,
        )
    )
    board = board.with_panel(
        series_panel(
            ids,
            "Estimated cost saved (USD per hour)",
            "Estimated USD saved per hour by rejected calls; empty when no price is configured.",
            [
                query(
                    f"sum by ({TOOL}) (rate({COST_SAVED}{{{SEL}}}[$__rate_interval])) * 3600",
                    legend="{{" + TOOL + "}}",
                )
            ],
            unit="currencyUSD",
            w=8,
        )
    )
    board = board.with_panel(
        series_panel(
            ids,
            "Shared store errors per second",
            "Errors talking to the shared breaker store (e.g. Redis). Breakers fall back to local "
            "state while the store is unavailable.",
            [
                # A service with breakers but no shared store has no errors series: it shows 0, not "no data".
                query(
                    f"sum by (job) (rate({STORE_ERRORS}{{{SEL_SERVICE}}}[$__rate_interval])) "
                    f"or (sum by (job) (rate({CALLS}{{{SEL_SERVICE}}}[$__rate_interval])) * 0)",
                    legend="{{job}}",
                )
            ],
            unit="reqps",
            w=8,
        )
    )
    return board


def render() -> str:
    return json.dumps(build().build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
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
