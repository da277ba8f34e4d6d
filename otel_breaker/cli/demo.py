"""``otel-breaker demo``: what a breaker changes, offline, in a few seconds.

A scripted research agent works through a task (search, then fetch, per
question) while its search tool dies mid-session: while the agent works on the
middle half of the questions, every search call hangs until its 30 s timeout.
The same agent runs twice, without and with breakers, on the same script, and
the two runs are compared side by side.

Everything runs on a simulated clock (tools "take" simulated seconds, the
breakers read the same clock), so the demo is deterministic and fast.
``--duration 5m`` paces the run with breakers over wall-clock time instead, so
the dashboards (``--serve-metrics``, ``--otlp``, which exports periodically)
watch it happen. The
breakers, the guarded call path and the telemetry are the real ones: calls go
through :class:`otel_breaker.guard.Guard`, spans and metrics through the
OpenTelemetry SDK, and the tokens saved come from the library's estimator.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
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
    saved_measured: int | None = None
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
    registry.get(PRIMARY, CircuitBreakerConfig.preset("fast_api", fallbacks=(BACKUP,)))
    registry.get(BACKUP, CircuitBreakerConfig.preset("fast_api"))
    registry.get(FETCH, CircuitBreakerConfig.preset("fast_api"))
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
    watch: Any = None
    logger_provider: Any = None
    where: str = "OTLP"

    def providers(self) -> list[Any]:
        return [p for p in (self.tracer_provider, self.meter_provider, self.logger_provider) if p is not None]


#: Metric export interval of ``--otlp`` unless OTEL_METRIC_EXPORT_INTERVAL says otherwise:
#: short, so ``increase()`` panels see a paced run as it happens.
EXPORT_INTERVAL_MS = 5000
#: Seconds the demo waits for its last export at the end (unless an OTLP timeout is set).
DEMO_EXIT_BUDGET = 2.0


def _resource() -> Any:
    from opentelemetry.sdk.resources import Resource

    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "otel-breaker-demo"}
    return Resource.create(attributes)


def set_up_telemetry(serve_metrics: int | None, otlp: bool) -> Exporters:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider

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
    tracer_provider = TracerProvider(resource=_resource(), shutdown_on_exit=False)
    exporters = Exporters(tracer_provider, None, port)
    if otlp:
        _add_otlp(exporters, readers)
    exporters.meter_provider = MeterProvider(metric_readers=readers, resource=_resource(), shutdown_on_exit=False)
    telemetry.configure(tracer_provider, exporters.meter_provider, estimator=TokenEstimator())
    return exporters


def _add_otlp(exporters: Exporters, readers: list[Any]) -> None:
    """OTLP for traces, metrics (every :data:`EXPORT_INTERVAL_MS`) and logs, built
    as the zero-code set-up builds them: watched, so a missing collector is one
    line and never holds the demo."""
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from otel_breaker import sdk_setup

    try:
        plan = sdk_setup.plan_export(force_otlp=True)
    except ImportError as exc:  # pragma: no cover - the OTLP exporters are a default dependency
        raise UsageError(
            f"--otlp needs the OTLP exporter ({exc.name}): pip install opentelemetry-exporter-otlp"
        ) from None
    if plan.problems:
        raise UsageError(f"--otlp: {plan.problems[0]}")
    if not plan.exporters("traces") or not plan.exporters("metrics"):
        raise UsageError("--otlp needs the OTLP exporter: pip install opentelemetry-exporter-otlp")
    watch = sdk_setup.CollectorWatch()
    (traces,) = plan.exporters("traces")
    exporters.tracer_provider.add_span_processor(BatchSpanProcessor(sdk_setup.load_exporter(traces, watch)))
    (metrics,) = plan.exporters("metrics")
    interval = None if os.environ.get("OTEL_METRIC_EXPORT_INTERVAL") else EXPORT_INTERVAL_MS
    readers.append(
        PeriodicExportingMetricReader(sdk_setup.load_exporter(metrics, watch), export_interval_millis=interval)
    )
    for logs_exporter in plan.exporters("logs"):  # log-based events, through the global logger provider
        try:
            logs = sdk_setup._logs_sdk()
        except ImportError:
            break
        exporters.logger_provider = logs.LoggerProvider(resource=_resource(), shutdown_on_exit=False)
        exporters.logger_provider.add_log_record_processor(
            logs.BatchLogRecordProcessor(sdk_setup.load_exporter(logs_exporter, watch))
        )
        logs.set_logger_provider(exporters.logger_provider)
    protocol = "grpc" if traces.entry_point == "otlp_proto_grpc" else "http/protobuf"
    default = "http://localhost:4317" if protocol == "grpc" else "http://localhost:4318"
    exporters.otlp = f"{os.environ.get('OTEL_EXPORTER_OTLP_ENDPOINT') or default} ({protocol})"
    exporters.watch = watch
    exporters.where = traces.description


class Pacer:
    """Spreads the steps of a run evenly over ``total`` wall-clock seconds.

    ``sleep`` and ``clock`` are injectable: tests pace a five-minute run in no time.
    """

    def __init__(
        self,
        total: float,
        steps: int,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.steps = steps
        self.sleep = sleep
        self.clock = clock
        self.start = clock()

    def __call__(self, step: int) -> None:
        delay = self.start + self.total * (step + 1) / self.steps - self.clock()
        if delay > 0:
            self.sleep(delay)


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
    (
        "est. tokens saved (difference in tokens spent)",
        lambda x: "-" if x.saved_measured is None else f"{x.saved_measured:,}",
    ),
    ("  counted live by otel_breaker.tokens.saved (*)", lambda x: f"{x.tokens_saved:,}"),
    ("time waiting on a dead tool", lambda x: duration(x.dead_wait)),
    ("switched to the backup tool", lambda x: f"{x.fallbacks_used:,}"),
    ("session length (simulated)", lambda x: duration(x.session_seconds)),
]


def _saving_note(with_: Ledger) -> str:
    """Why the metric's count differs from the measured saving (it only sees rejections)."""
    if not with_.rejected:
        return "(*) otel_breaker.tokens.saved counts one failed round-trip per rejected call; none was rejected."
    per_call = with_.tokens_saved / with_.rejected
    measured = with_.saved_measured or 0
    relation = (
        "below the measured saving: each rejection also spared the agent its retries of the dead tool "
        "(it switched to the backup at once)"
        if with_.tokens_saved < measured
        else "the measured saving"
        if with_.tokens_saved == measured
        else "above the measured saving: the agent still paid for the round-trip that was rejected"
    )
    text = (
        f"(*) otel_breaker.tokens.saved counts one failed round-trip (~{per_call:,.0f} tokens) per rejected call "
        f"({with_.rejected}), as it happens; here that is {relation}."
    )
    return textwrap.fill(text, width=100, subsequent_indent="    ")


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
    lines.append(_saving_note(with_))
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
    for (tool, _agent, _from, to, _source), count in transitions.items():
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
_UNITS = {"s": 1, "m": 60, "h": 3600}


def _wall_time(raw: str) -> float:
    """``90``, ``90s``, ``5m`` or ``1h``: 1 s to 24 h."""
    text = raw.strip().lower()
    unit = _UNITS.get(text[-1:])
    try:
        value = float(text[:-1] if unit else text) * (unit or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a time such as 90s, 5m or 1h, got {raw!r}") from None
    if not 1 <= value <= 86_400:
        raise argparse.ArgumentTypeError(f"expected a time from 1s to 24h, got {raw!r}")
    return value


#: Waiting between paced steps (tests replace it).
SLEEP: Callable[[float], None] = time.sleep
CLOCK: Callable[[], float] = time.monotonic


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
        help="export spans, metrics (every 5 s) and log events over OTLP (OTEL_EXPORTER_OTLP_ENDPOINT, "
        "OTEL_EXPORTER_OTLP_PROTOCOL, ...)",
    )
    parser.add_argument(
        "--duration",
        type=_wall_time,
        metavar="TIME",
        help="pace the run with breakers over this wall-clock time (e.g. 90s, 5m), so dashboards watch it live",
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
    try:
        without = run_without_breakers(args.steps, lambda step: progress.advance("without breakers"))
        timeline: list[Moment] = []
        prompt: list[str] = []
        pace = Pacer(args.duration, args.steps, SLEEP, CLOCK) if args.duration else None
        if pace is not None:
            print(
                f"Pacing the run with breakers over {duration(args.duration)} of wall-clock time (Ctrl-C stops it)...",
                file=sys.stderr,
                flush=True,
            )

        def with_step(step: int) -> None:
            progress.advance("with breakers")
            if pace is not None:
                pace(step)

        with_ = run_with_breakers(args.steps, with_step, timeline, prompt)
        with_.saved_measured = without.tokens_spent - with_.tokens_spent
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
                f"\nRecorded {len(without.outcomes)} tool outcomes to {args.record}; "
                f"try: otel-breaker tune {args.record}"
            )
        sys.stdout.flush()
        if exporters.metrics_port is not None:
            _serve(exporters.metrics_port, args.hold)
    finally:
        _close(exporters)
    return 0


def _close(exporters: Exporters) -> None:
    """Flush and shut down, never waiting long for a collector that is not there."""
    from otel_breaker import sdk_setup

    budget = sdk_setup.exit_budget()
    if budget == sdk_setup.EXIT_BUDGET:  # no OTLP timeout given: an interactive command waits less
        budget = DEMO_EXIT_BUDGET
    finished = sdk_setup.shutdown_within(exporters.providers(), budget, exporters.watch, exporters.where)
    if exporters.otlp and finished and not exporters.watch.warned:
        print(f"Sent spans and metrics over OTLP to {exporters.otlp}", file=sys.stderr)


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
        "tokens_saved_measured": with_.saved_measured,
        "without_breakers": ledger(without),
        "with_breakers": ledger(with_),
        "timeline": [
            {"at_s": m.at, "tool": m.tool, "from": m.from_state, "to": m.to_state, "reason": m.reason} for m in timeline
        ],
        "openings": {key[0]: count for key, count in sorted(transitions.items(), key=str) if key[3] == "open"},
    }
