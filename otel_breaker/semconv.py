"""Every OpenTelemetry name otel-breaker emits, in one place.

Span, event and attribute names, instrument names with their units and
descriptions, and the names those instruments get in Prometheus. The
telemetry module, the dashboard generator and the docs' tables read them from
here, so a rename happens once. Standard library only: this module imports
nothing else of ours (layer 0).

Names follow the GenAI and MCP semantic conventions of the
``semantic-conventions-genai`` repository, release :data:`SEMCONV_VERSION`
(``execute_tool`` spans, ``gen_ai.*`` attributes, ``gen_ai.execute_tool.duration``,
``error.type``), and the ``otel_breaker.`` namespace for breaker state. The core
``opentelemetry-semantic-conventions`` package's ``gen_ai.*`` constants are
deprecated, so the names are written here rather than imported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Instrumentation scope of every tracer, meter and logger of otel-breaker.
SCOPE_NAME = "otel_breaker"
#: The release of the GenAI semantic conventions (``semantic-conventions-genai``) we follow.
SEMCONV_VERSION = "0.1.0"
#: Its schema URL, given to every tracer, meter and logger (a backend can translate by it).
SCHEMA_URL = f"https://opentelemetry.io/schemas/gen-ai/{SEMCONV_VERSION}"

# -- spans ------------------------------------------------------------------------------
OPERATION = "execute_tool"
#: Span name template of a tool call (GenAI conventions: ``{operation} {tool}``).
SPAN_NAME = OPERATION + " {tool}"


def span_name(tool: str) -> str:
    """The name of a tool call's span."""
    return f"{OPERATION} {tool}"


# -- attributes -------------------------------------------------------------------------
ATTR_OPERATION = "gen_ai.operation.name"
ATTR_TOOL = "gen_ai.tool.name"
ATTR_TOOL_CALL_ID = "gen_ai.tool.call.id"
ATTR_TOOL_TYPE = "gen_ai.tool.type"
ATTR_TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
ATTR_AGENT = "gen_ai.agent.name"
ATTR_MODEL = "gen_ai.request.model"
#: Where the tool runs when its name alone does not say it (an MCP server's ``name@version``).
ATTR_SOURCE = "otel_breaker.tool.source"
#: The code behind a local tool (``module:qualname``): two same-named tools of different code are two series.
ATTR_ORIGIN = "otel_breaker.tool.origin"
#: The upstream a tool runs behind (an MCP server, a group of ``OTEL_BREAKER_UPSTREAMS``).
#: On an upstream's own breaker series (``gen_ai.tool.name`` = ``upstream:<name>``) it names that upstream.
ATTR_UPSTREAM = "otel_breaker.upstream"
ATTR_ERROR_TYPE = "error.type"
ATTR_EXCEPTION_TYPE = "exception.type"
ATTR_STATE = "otel_breaker.state"
ATTR_REJECTED = "otel_breaker.rejected"
ATTR_GUARDED = "otel_breaker.guarded"
ATTR_FRAMEWORK = "otel_breaker.framework"
ATTR_MODE = "otel_breaker.mode"
ATTR_WOULD_REJECT = "otel_breaker.would_reject"
ATTR_ESCALATED = "otel_breaker.escalated"
ATTR_FROM_STATE = "otel_breaker.from_state"
ATTR_TO_STATE = "otel_breaker.to_state"
ATTR_REASON = "otel_breaker.reason"
ATTR_RETRY_AFTER = "otel_breaker.retry_after_s"
ATTR_OUTCOME = "otel_breaker.outcome"
#: Why a neutral outcome is neutral: ``mistake``, ``control``, ``retry_request``, ``configured``, ``upstream``.
ATTR_OUTCOME_REASON = "otel_breaker.outcome.reason"
#: The rule that judged an outcome (``http.404``, ``errno.ENOENT``, ``sqlstate.42P01``, ``unrecognised`` ...):
#: a bounded vocabulary (docs/outcomes.md).
ATTR_OUTCOME_RULE = "otel_breaker.outcome.rule"
ATTR_ESTIMATE_SOURCE = "otel_breaker.estimate.source"
ATTR_STORE = "otel_breaker.store"
#: MCP semantic conventions: the JSON-RPC method of an MCP span (``tools/call``).
ATTR_MCP_METHOD = "mcp.method.name"
#: MCP semantic conventions: the session an MCP request belongs to (streamable HTTP's ``Mcp-Session-Id``).
ATTR_MCP_SESSION = "mcp.session.id"
#: The MCP method of a tool call.
MCP_TOOLS_CALL = "tools/call"

# -- events (log-based, and span events behind a switch) -----------------------------------
EVENT_STATE_CHANGE = "otel_breaker.state_change"
EVENT_REJECTED = "otel_breaker.rejected"
EVENT_EXCEPTION = "exception"
#: The loop guard saw an identical call repeat (``loops.py``).
EVENT_LOOP = "otel_breaker.loop"
#: ``otel_breaker.reason`` of a call the loop guard did not run.
REASON_LOOP = "loop"
#: ``reason`` of a call the waste budget answered (``run_budget.py``).
REASON_RUN_BUDGET = "run_budget"
#: The log-based event of a run's waste budget spent on a tool.
EVENT_RUN_BUDGET = "otel_breaker.run_budget"
ATTR_RUN_ACTION = "otel_breaker.run.action"
ATTR_RUN_REJECTIONS = "otel_breaker.run.rejections"
#: A run's identity: on events only, never a metric label (one value per run).
ATTR_RUN_ID = "otel_breaker.run.id"
#: ``gen_ai.tool.name`` of a loop of calls to a tool no tool has: no per-name series.
UNKNOWN_TOOL = "otel_breaker.unknown_tool"
#: ``otel_breaker.loop.action`` of a loop detection.
ATTR_LOOP_ACTION = "otel_breaker.loop.action"
ATTR_LOOP_COUNT = "otel_breaker.loop.count"
#: What running the tool does: ``read_only``, ``idempotent``, ``destructive`` or ``unknown``.
ATTR_EFFECTS = "otel_breaker.tool.effects"
#: Which attempt of one logical call a span is (1 for the first; set from the second on).
ATTR_RETRY_ATTEMPT = "otel_breaker.retry.attempt"
#: A failed call of a destructive tool that may have taken effect (a timeout, a dropped connection).
ATTR_OUTCOME_UNKNOWN = "otel_breaker.outcome.unknown"
#: Log-based event: a transient failure was not retried because the retry budget was spent.
EVENT_RETRY_BUDGET_EXHAUSTED = "otel_breaker.retry_budget_exhausted"

#: ``error.type`` of a call a breaker rejected.
ERROR_CIRCUIT_OPEN = "circuit_open"
#: ``error.type`` of an MCP tool result with ``isError`` set (a protocol error carries its JSON-RPC code).
ERROR_TOOL = "tool_error"

# -- instruments ------------------------------------------------------------------------
GAUGE = "gauge"
COUNTER = "counter"
HISTOGRAM = "histogram"

#: GenAI semantic-convention bucket boundaries for operation durations (seconds).
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)

# UCUM units Prometheus spells out; annotations in braces ({call}) are dropped.
_PROMETHEUS_UNITS = {"s": "seconds", "ms": "milliseconds", "By": "bytes", "1": "ratio"}


@dataclass(frozen=True)
class Instrument:
    """One metric instrument: its OpenTelemetry name, kind, unit and description."""

    name: str
    kind: str
    unit: str
    description: str

    @property
    def prometheus(self) -> str:
        """The series name after the OpenTelemetry-to-Prometheus translation (the SDK's
        Prometheus exporter and the collector's agree): dots to underscores, the unit
        as a suffix unless it is an annotation, ``_total`` on counters."""
        name = re.sub(r"[^a-zA-Z0-9_:]", "_", self.name)
        unit = "" if self.unit.startswith("{") else _PROMETHEUS_UNITS.get(self.unit, self.unit)
        if unit and not name.endswith("_" + unit):
            name = f"{name}_{unit}"
        if self.kind == COUNTER:
            name += "_total"
        return name


STATE = Instrument(
    "otel_breaker.state",
    GAUGE,
    "{breaker}",
    "Circuit breaker state per tool: 1 for the current state, 0 for the others.",
)
TRANSITIONS = Instrument(
    "otel_breaker.transitions",
    COUNTER,
    "{transition}",
    "State transitions of tool circuit breakers.",
)
CALLS = Instrument(
    "otel_breaker.calls",
    COUNTER,
    "{call}",
    "Tool calls that ran through a breaker, by outcome (success, failure, ignored).",
)
REJECTED = Instrument(
    "otel_breaker.calls.rejected",
    COUNTER,
    "{call}",
    "Tool calls rejected by an open or half-open breaker without running the tool "
    "(in observe mode: calls that would have been rejected).",
)
TOKENS_SAVED = Instrument(
    "otel_breaker.tokens.saved",
    COUNTER,
    "{token}",
    "Estimated LLM tokens saved by rejected tool calls.",
)
#: A currency is not a UCUM unit: it is an annotation, as the OpenTelemetry naming
#: guidance writes non-UCUM units, so no upper case reaches the Prometheus name.
COST_SAVED = Instrument(
    "otel_breaker.cost.saved",
    COUNTER,
    "{USD}",
    "Estimated LLM cost saved by rejected tool calls, in US dollars, from the configured price table.",
)
STORE_ERRORS = Instrument(
    "otel_breaker.store.errors",
    COUNTER,
    "{error}",
    "Errors talking to the shared breaker store (calls fell back to local breakers).",
)
DURATION = Instrument(
    "gen_ai.execute_tool.duration",
    HISTOGRAM,
    "s",
    "Duration of tool executions.",
)

NEUTRAL = Instrument(
    "otel_breaker.calls.neutral",
    COUNTER,
    "{call}",
    "Tool calls that ran and ended in an error that does not count against the tool "
    "(the caller's mistake, control flow, a user's rule), by reason and by the rule that decided.",
)

LOOPS = Instrument(
    "otel_breaker.loops",
    COUNTER,
    "{call}",
    "Identical repeated tool calls the loop guard saw and let run (loop_action=warn).",
)

RETRIES = Instrument(
    "otel_breaker.retries",
    COUNTER,
    "{retry}",
    "Retries of failed tool calls made below the model, by the retry's outcome (success, failure, "
    "ignored, rejected by an open breaker), and retries the budget did not allow (budget_exhausted).",
)

INSTRUMENTS = (
    STATE,
    TRANSITIONS,
    CALLS,
    NEUTRAL,
    REJECTED,
    LOOPS,
    RETRIES,
    TOKENS_SAVED,
    COST_SAVED,
    STORE_ERRORS,
    DURATION,
)


def prometheus_label(attribute: str) -> str:
    """An attribute's label name in Prometheus (``gen_ai.tool.name`` -> ``gen_ai_tool_name``)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", attribute)
