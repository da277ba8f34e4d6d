"""``otel-breaker demo``: what a breaker changes, offline, in a few seconds.

A scripted research agent works through a task (search, then fetch, per
question) while its search tool dies mid-session: while the agent works on the
middle half of the questions, every search call hangs until its 30 s timeout.
The same agent runs twice, without and with breakers, on the same script, and
the two runs are compared side by side.

Everything runs on a simulated clock (tools "take" simulated seconds, the
breakers read the same clock), so the demo is deterministic and fast. The
breakers, the guarded call path and the telemetry are the real ones: calls go
through :class:`otel_breaker.guard.Guard`, spans and metrics through the
OpenTelemetry SDK, and the tokens saved come from the library's estimator.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from otel_breaker.cli import UsageError
from otel_breaker.cli._common import number, one_line_errors

AGENT = "research_agent"
PRIMARY = "web_search"
BACKUP = "backup_search"
FETCH = "fetch_page"
MODEL = "demo-model"

TOOL_TIMEOUT = 30.0
"""A dead tool hangs until this timeout (simulated seconds)."""
THINK_SECONDS = 2.0
"""One model round-trip (issue a tool call, read its result)."""
MAX_ATTEMPTS = 3
"""The agent retries a failing tool this many times before switching to the backup."""
TOOL_SECONDS = {PRIMARY: 1.5, BACKUP: 3.0, FETCH: 1.0}
DEFAULT_STEPS = 60
TIMELINE_LINES = 12


class SimClock:
    """Monotonic simulated seconds; tools advance it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class SimStore:
    """A breaker store whose breakers read the simulated clock."""

    name = "memory"

    def __init__(self, clock: SimClock) -> None:
        self.clock = clock

    def create(self, key: str, config: Any, *, clock: Any = None, agent_name: Any = None, session_id: Any = None):
        from otel_breaker.breaker import CircuitBreaker

        return CircuitBreaker(key, config, clock=self.clock, agent_name=agent_name, session_id=session_id)

    def close(self) -> None:
        """Nothing to release."""


class ToolTimedOut(TimeoutError):
    pass


def outage(steps: int) -> tuple[int, int]:
    """The first and last question (1-based) during which ``web_search`` is dead."""
    return steps // 6 + 1, steps * 2 // 3


class World:
    """The tools, in simulated time. ``web_search`` is dead while ``broken``."""

    def __init__(self, clock: SimClock) -> None:
        self.clock = clock
        self.broken = False

    def tool(self, name: str) -> Callable[[str], str]:
        def run(query: str) -> str:
            if name == PRIMARY and self.broken:
                self.clock.advance(TOOL_TIMEOUT)
                raise ToolTimedOut(f"{name} did not answer within {TOOL_TIMEOUT:g}s")
            self.clock.advance(TOOL_SECONDS[name])
            return f"{name} result for {query!r}"

        run.__name__ = name
        return run


@dataclass
class Ledger:
    """What one run cost."""

    label: str
    attempted: int = 0
    ran: int = 0
    failed: int = 0
    rejected: int = 0
    tokens_spent: int = 0
    tokens_failed: int = 0
    tokens_saved: int = 0
    dead_wait: float = 0.0
    fallbacks_used: int = 0
    degraded_reported: int = 0
    session_seconds: float = 0.0
    steps: int = 0
    outcomes: list[dict[str, Any]] = field(default_factory=list)


def round_trip_tokens(step: int) -> tuple[int, int]:
    """(input, output) tokens of the model round-trip around one tool call:
    the context grows as the session goes on."""
    return 1200 + 25 * step, 80


class Agent:
    """A plain-Python agent loop: per question, search (retrying a failing tool,
    then switching to the backup) and fetch the top page.

    A rejection is handled the way the rejection message says: use the named
    alternative, or report the degradation instead of retrying.
    """

    def __init__(self, world: World, ledger: Ledger, invoke: Callable[[str, Callable, str], tuple[str, Any]]):
        self.world = world
        self.ledger = ledger
        self.invoke = invoke
        self.step = 0

    def call(self, tool: str, query: str) -> tuple[str, Any]:
        ledger = self.ledger
        clock = self.world.clock
        clock.advance(THINK_SECONDS)
        tokens_in, tokens_out = round_trip_tokens(self.step)
        ledger.attempted += 1
        ledger.tokens_spent += tokens_in + tokens_out
        started = clock()
        outcome, value = self.invoke(tool, self.world.tool(tool), query)
        if outcome == "rejected":
            ledger.rejected += 1
            return outcome, value
        ledger.ran += 1
        ledger.outcomes.append({"tool": tool, "ts": round(started, 3), "ok": outcome == "ok"})
        if outcome == "failed":
            ledger.failed += 1
            ledger.tokens_failed += tokens_in + tokens_out
            ledger.dead_wait += clock() - started
        return outcome, value

    def search(self, query: str) -> str | None:
        tool, attempts = PRIMARY, 0
        while True:
            outcome, value = self.call(tool, query)
            if outcome == "ok":
                return value
            if outcome == "rejected":
                alternatives = [a for a in value.get("alternatives", ()) if a != tool]
                if alternatives:
                    self.ledger.fallbacks_used += 1
                    tool, attempts = alternatives[0], 0
                    continue
                self.ledger.degraded_reported += 1
                return None
            attempts += 1
            if attempts < MAX_ATTEMPTS:
                continue
            if tool == PRIMARY:
                self.ledger.fallbacks_used += 1
                tool, attempts = BACKUP, 0
                continue
            self.ledger.degraded_reported += 1
            return None

    def work(self, steps: int, on_step: Callable[[int], None]) -> None:
        first, last = outage(steps)
        for step in range(steps):
            self.step = step
            self.world.broken = first <= step + 1 <= last
            found = self.search(f"question {step + 1}")
            if found is not None:
                self.call(FETCH, f"top page for question {step + 1}")
            self.world.clock.advance(THINK_SECONDS)  # write up the answer
            self.ledger.steps += 1
            on_step(step)
        self.ledger.session_seconds = self.world.clock()


# -- the two runs ---------------------------------------------------------------------


def run_without_breakers(steps: int, on_step: Callable[[int], None]) -> Ledger:
    ledger = Ledger("without breakers")
    world = World(SimClock())

    def invoke(tool: str, fn: Callable, query: str) -> tuple[str, Any]:
        try:
            return "ok", fn(query)
        except Exception as exc:
            return "failed", exc

    Agent(world, ledger, invoke).work(steps, on_step)
    return ledger


@dataclass
class Moment:
    at: float
    tool: str
    from_state: str
    to_state: str
    reason: str


def run_with_breakers(
    steps: int, on_step: Callable[[int], None], timeline: list[Moment], prompt_sample: list[str]
) -> Ledger:
    from otel_breaker import breaker as breaker_module
    from otel_breaker import degrade
    from otel_breaker.breaker import CircuitBreakerConfig
    from otel_breaker.guard import Guard
    from otel_breaker.registry import default_registry
    from otel_breaker.telemetry import TELEMETRY
    from otel_breaker.toolcall import ToolCall

    ledger = Ledger("with breakers")
    clock = SimClock()
    world = World(clock)
    registry = default_registry()
    registry.use_store(SimStore(clock))
    registry.get(PRIMARY, CircuitBreakerConfig.preset("fast_api", timeout=TOOL_TIMEOUT, fallbacks=(BACKUP,)))
    registry.get(BACKUP, CircuitBreakerConfig.preset("fast_api", timeout=TOOL_TIMEOUT))
    registry.get(FETCH, CircuitBreakerConfig.preset("fast_api", timeout=TOOL_TIMEOUT))
    guard = Guard(registry)

    def listener(change: Any) -> None:
        timeline.append(
            Moment(change.at, change.breaker.name, change.from_state.value, change.to_state.value, change.reason)
        )

    breaker_module.add_global_listener(listener)

    def invoke(tool: str, fn: Callable, query: str) -> tuple[str, Any]:
        tokens_in, tokens_out = round_trip_tokens(agent.step)
        TELEMETRY.estimator.observe(tool, tokens_in, tokens_out, MODEL)
        try:
            result = guard.call(ToolCall(tool, agent_name=AGENT, call_id=f"call_{ledger.attempted}"), fn, (query,))
        except Exception as exc:
            return "failed", exc
        if isinstance(result, dict) and result.get("circuit_open"):
            if not prompt_sample:
                prompt_sample.append(degrade.tool_status_block())
                prompt_sample.append(degrade.Rejection(registry.get(tool), ToolCall(tool)).message)
            return "rejected", result
        return "ok", result

    def step_done(step: int) -> None:
        TELEMETRY.settle_savings()
        on_step(step)

    agent = Agent(world, ledger, invoke)
    try:
        agent.work(steps, step_done)
    finally:
        breaker_module.remove_global_listener(listener)
    TELEMETRY.settle_savings()
    ledger.tokens_saved = TELEMETRY.estimator.total_saved()
    return ledger


# -- telemetry set-up ---------------------------------------------------------------------


@dataclass
class Exporters:
    tracer_provider: Any
    meter_provider: Any
    metrics_port: int | None = None
    otlp: str | None = None
    span_exporter: Any = None


def _resource() -> Any:
    from opentelemetry.sdk.resources import Resource

    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "otel-breaker-demo"}
    return Resource.create(attributes)


def set_up_telemetry(serve_metrics: int | None, otlp: bool) -> Exporters:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader, PeriodicExportingMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from otel_breaker import telemetry
    from otel_breaker.tokens import TokenEstimator

    readers: list[Any] = [InMemoryMetricReader()]
    port = None
    if serve_metrics is not None:
        try:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
            from prometheus_client import start_http_server
        except ImportError:
            raise UsageError(
                "--serve-metrics needs the Prometheus exporter: pip install 'otel-breaker[prometheus]'"
            ) from None
        readers.append(PrometheusMetricReader())
        try:
            server, _thread = start_http_server(serve_metrics)
        except OSError as exc:
            raise UsageError(f"--serve-metrics: cannot listen on port {serve_metrics}: {exc.strerror or exc}") from None
        port = server.server_port
    tracer_provider = TracerProvider(resource=_resource())
    endpoint = None
    if otlp:
        span_exporter, metric_exporter, endpoint = _otlp_exporters()
        tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
        readers.append(PeriodicExportingMetricReader(metric_exporter, export_interval_millis=3_600_000))
    meter_provider = MeterProvider(metric_readers=readers, resource=_resource())
    telemetry.configure(tracer_provider, meter_provider, estimator=TokenEstimator())
    return Exporters(tracer_provider, meter_provider, port, endpoint, span_exporter if otlp else None)


def _otlp_exporters() -> tuple[Any, Any, str]:
    from otel_breaker.sdk_setup import _default_protocol

    protocol = os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or _default_protocol()
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            default = "http://localhost:4317"
        elif protocol in ("http/protobuf", "http/json"):
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            default = "http://localhost:4318"
        else:
            raise UsageError(f"--otlp: OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} (expected grpc or http/protobuf)")
    except ImportError as exc:
        raise UsageError(
            f"--otlp needs the OTLP exporter ({exc.name}): pip install opentelemetry-exporter-otlp"
        ) from None
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or default
    return _Watched(OTLPSpanExporter()), OTLPMetricExporter(), f"{endpoint} ({protocol})"


class _Watched:
    """A span exporter that remembers whether every export succeeded."""

    def __init__(self, exporter: Any) -> None:
        self._exporter = exporter
        self.failed = False

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        result = self._exporter.export(spans)
        if result is not SpanExportResult.SUCCESS:
            self.failed = True
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._exporter, name)


# -- output ------------------------------------------------------------------------------------


class Progress:
    """A plain-text progress bar on stderr (only on a terminal)."""

    WIDTH = 30

    def __init__(self, total: int, enabled: bool) -> None:
        self.total = total
        self.done = 0
        self.enabled = enabled

    def advance(self, label: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        filled = self.WIDTH * self.done // self.total
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        sys.stderr.write(f"\r[{bar}] {100 * self.done // self.total:3d}%  {label:<17}")
        sys.stderr.flush()

    def finish(self) -> None:
        if self.enabled:
            sys.stderr.write("\r" + " " * (self.WIDTH + 30) + "\r")
            sys.stderr.flush()


def duration(seconds: float) -> str:
    seconds = round(seconds)
    minutes, secs = divmod(seconds, 60)
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def clock_time(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes:02d}:{secs:02d}"


ROWS: list[tuple[str, Callable[[Ledger], str]]] = [
    ("tool calls attempted", lambda x: f"{x.attempted:,}"),
    ("  failed", lambda x: f"{x.failed:,}"),
    ("  rejected by a breaker (not run)", lambda x: f"{x.rejected:,}"),
    ("est. tokens spent on tool round-trips", lambda x: f"{x.tokens_spent:,}"),
    ("  of which on failed calls", lambda x: f"{x.tokens_failed:,}"),
    ("est. tokens saved (otel_breaker.tokens.saved)", lambda x: f"{x.tokens_saved:,}"),
    ("time waiting on a dead tool", lambda x: duration(x.dead_wait)),
    ("switched to the backup tool", lambda x: f"{x.fallbacks_used:,}"),
    ("session length (simulated)", lambda x: duration(x.session_seconds)),
]


def render(
    steps: int, without: Ledger, with_: Ledger, timeline: list[Moment], transitions: dict, prompt: list[str]
) -> str:
    first, last = outage(steps)
    lines = [
        f"otel-breaker demo: a research agent answers {steps} questions (search, then fetch). "
        f"'{PRIMARY}' is dead during questions {first}-{last}: every call hangs until its {TOOL_TIMEOUT:g}s timeout.",
        f"The agent retries a failing tool {MAX_ATTEMPTS} times, then switches to '{BACKUP}'; "
        f"breakers: fast_api preset (3 failures, 30s cooldown), '{PRIMARY}' falls back to '{BACKUP}'.",
        "",
    ]
    label_width = max(len(label) for label, _ in ROWS)
    header = f"{'':<{label_width}}  {'without breakers':>16}  {'with breakers':>14}"
    lines += [header, "-" * len(header)]
    for label, cell in ROWS:
        lines.append(f"{label:<{label_width}}  {cell(without):>16}  {cell(with_):>14}")
    lines += ["", "Timeline of breaker state changes (simulated time):"]
    shown: list[Moment | None] = list(timeline)
    if len(timeline) > TIMELINE_LINES:
        shown = [*timeline[:6], None, *timeline[-(TIMELINE_LINES - 7) :]]
    for moment in shown:
        if moment is None:
            hidden = len(timeline) - TIMELINE_LINES + 1
            lines.append(f"  ...    ({hidden} more: cooldown elapsed, the probe failed, open again)")
            continue
        arrow = f"{moment.from_state.replace('_', '-')} -> {moment.to_state.replace('_', '-')}"
        lines.append(f"  {clock_time(moment.at)}  {moment.tool:<14} {arrow:<22} {moment.reason}")
    if not timeline:
        lines.append("  (none)")
    openings: dict[str, int] = {}
    for (tool, _agent, _from, to), count in transitions.items():
        if to == "open":
            openings[tool] = openings.get(tool, 0) + count
    if openings:
        summary = ", ".join(f"'{tool}' opened {count} times" for tool, count in sorted(openings.items()))
        lines.append(f"  ({summary}; the OtelBreakerFrequentOpenings alert fires at 3 openings in 15 minutes)")
    if prompt:
        lines += [
            "",
            "What the model read when the breaker first rejected a call:",
            *(f"  {line}" for line in prompt[1].splitlines()),
            "Tool-status block for the system prompt (OTEL_BREAKER_STATUS_IN_PROMPT=true):",
            *(f"  {line}" for line in prompt[0].splitlines()),
        ]
    return "\n".join(lines)


# -- the verb ------------------------------------------------------------------------------------


_steps = number(int, "a whole number", low=10, high=10_000)
_port = number(int, "a port number", low=0, high=65535)
_seconds = number(float, "seconds", low=0, unit="s")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="show what breakers change: the same agent with and without them, offline",
        description="Run a scripted agent twice, without and with breakers, while one of its tools dies "
        "mid-session, and compare what each run cost. Offline, no API key; simulated time, so it takes "
        "seconds and always gives the same numbers.",
    )
    parser.add_argument("--steps", type=_steps, default=DEFAULT_STEPS, help=f"questions (default {DEFAULT_STEPS})")
    parser.add_argument(
        "--serve-metrics",
        type=_port,
        metavar="PORT",
        help="serve the metrics for Prometheus on this port after the run, until Ctrl-C (needs [prometheus])",
    )
    parser.add_argument(
        "--hold",
        type=_seconds,
        metavar="SECONDS",
        help="with --serve-metrics: stop serving after this many seconds instead of waiting for Ctrl-C",
    )
    parser.add_argument(
        "--otlp",
        action="store_true",
        help="export spans and metrics over OTLP (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL, ...)",
    )
    parser.add_argument(
        "--record",
        metavar="FILE",
        help="write the tool outcomes of the run without breakers as JSONL ({tool, ts, ok}) for 'otel-breaker tune'",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    one_line_errors(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.hold is not None and args.serve_metrics is None:
        raise UsageError("--hold only applies with --serve-metrics")
    from otel_breaker.config import Settings, set_settings
    from otel_breaker.telemetry import TELEMETRY

    set_settings(Settings())  # the demo's breakers are configured here, not by the environment
    exporters = set_up_telemetry(args.serve_metrics, args.otlp)
    record = None
    if args.record:
        try:
            record = open(args.record, "w", encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            raise UsageError(f"--record: cannot write {args.record}: {exc.strerror or exc}") from None

    progress = Progress(2 * args.steps, enabled=not args.no_progress and sys.stderr.isatty())
    without = run_without_breakers(args.steps, lambda step: progress.advance("without breakers"))
    timeline: list[Moment] = []
    prompt: list[str] = []
    with_ = run_with_breakers(args.steps, lambda step: progress.advance("with breakers"), timeline, prompt)
    progress.finish()
    transitions = TELEMETRY.transitions()

    if record is not None:
        with record:
            for outcome in without.outcomes:
                record.write(json.dumps(outcome) + "\n")
    if args.json:
        print(json.dumps(_as_json(args.steps, without, with_, timeline, transitions), indent=2))
    else:
        print(render(args.steps, without, with_, timeline, transitions, prompt))
    if record is not None:
        print(
            f"\nRecorded {len(without.outcomes)} tool outcomes to {args.record}; try: otel-breaker tune {args.record}"
        )
    sys.stdout.flush()

    if exporters.otlp:
        exporters.tracer_provider.force_flush()
        exporters.meter_provider.force_flush()
        if exporters.span_exporter.failed:
            print(f"OTLP export to {exporters.otlp} failed (is a collector listening there?)", file=sys.stderr)
        else:
            print(f"Sent spans and metrics over OTLP to {exporters.otlp}", file=sys.stderr)
    if exporters.metrics_port is not None:
        _serve(exporters.metrics_port, args.hold)
    exporters.tracer_provider.shutdown()
    exporters.meter_provider.shutdown()
    return 0


def _serve(port: int, hold: float | None) -> None:
    print(f"Serving Prometheus metrics at http://localhost:{port}/metrics", end="", flush=True)
    print(f" for {hold:g}s" if hold is not None else " (Ctrl-C to stop)", flush=True)
    deadline = None if hold is None else time.monotonic() + hold
    try:
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic())))
    except KeyboardInterrupt:
        pass


def _as_json(steps: int, without: Ledger, with_: Ledger, timeline: list[Moment], transitions: dict) -> dict:
    def ledger(x: Ledger) -> dict[str, Any]:
        return {
            "attempted": x.attempted,
            "failed": x.failed,
            "rejected": x.rejected,
            "tokens_spent": x.tokens_spent,
            "tokens_failed": x.tokens_failed,
            "tokens_saved": x.tokens_saved,
            "dead_wait_s": round(x.dead_wait, 3),
            "fallbacks_used": x.fallbacks_used,
            "degraded_reported": x.degraded_reported,
            "session_s": round(x.session_seconds, 3),
        }

    return {
        "steps": steps,
        "without_breakers": ledger(without),
        "with_breakers": ledger(with_),
        "timeline": [
            {"at_s": m.at, "tool": m.tool, "from": m.from_state, "to": m.to_state, "reason": m.reason} for m in timeline
        ],
        "openings": {tool: count for (tool, _agent, _from, to), count in sorted(transitions.items()) if to == "open"},
    }
