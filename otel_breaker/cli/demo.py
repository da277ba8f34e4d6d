"""``otel-breaker demo``: what a breaker changes, offline, in a few seconds.

A scripted research agent works through a task (search, then fetch, per
question) while its search tool dies mid-session: while the agent works on the
middle half of the questions, every search call hangs until its 30 s timeout.
The same agent runs twice, without and with breakers, on the same script, and
the two runs are compared side by side; then the same script runs in the four
configurations of "what hiding open tools saves" (no breaker, breakers only,
with the tool-status block, with open tools hidden).

The engine is :mod:`otel_breaker.simulation` (simulated clock, tools, scripted
model, cost model); this module parses options, sets up telemetry
(:mod:`._demo_telemetry`) and prints (:mod:`._demo_text`). ``--duration 5m``
paces the run with breakers over wall-clock time, so the dashboards
(``--serve-metrics``, ``--otlp``, which exports periodically) watch it happen.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from otel_breaker.cli import UsageError
from otel_breaker.cli._common import number, one_line_errors
from otel_breaker.cli._demo_telemetry import close, metrics_url, serve, set_up_telemetry
from otel_breaker.cli._demo_text import NEXT_STEPS, as_json, duration, render, render_scene, scene_json
from otel_breaker.simulation import upstream_scene
from otel_breaker.simulation.cases import CASES, run_case
from otel_breaker.simulation.loop_case import compare_loop_cases
from otel_breaker.simulation.runs import Moment, run_with_breakers, run_without_breakers
from otel_breaker.simulation.stubborn_case import compare_stubborn_cases
from otel_breaker.simulation.world import DEFAULT_STEPS


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
        "mid-session, and compare what each run cost; then measure what the tool-status block and hiding "
        "open tools save (four configurations, a scripted model). Offline, no API key; simulated time, so "
        "it takes seconds and always gives the same numbers.",
    )
    parser.add_argument("--steps", type=_steps, default=DEFAULT_STEPS, help=f"questions (default {DEFAULT_STEPS})")
    parser.add_argument(
        "--serve-metrics",
        type=_port,
        metavar="PORT",
        help="serve the metrics for Prometheus on this port after the run, until Ctrl-C (needs [prometheus])",
    )
    parser.add_argument(
        "--metrics-host",
        metavar="HOST",
        default="127.0.0.1",
        help="with --serve-metrics: the address to listen on (default 127.0.0.1, this machine only; "
        "0.0.0.0 for every interface, e.g. for a Prometheus in a container)",
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
    if args.metrics_host != "127.0.0.1" and args.serve_metrics is None:
        raise UsageError("--metrics-host only applies with --serve-metrics")
    from otel_breaker.config import Settings, set_settings
    from otel_breaker.registry import default_registry
    from otel_breaker.telemetry import TELEMETRY

    # The demo's breakers are configured here, not by the environment; two tools of the
    # second scene run behind an upstream.
    set_settings(Settings(upstreams=upstream_scene.upstreams()))
    progress = Progress(
        2 * args.steps + len(CASES) * args.steps + upstream_scene.CALLS,
        enabled=not args.no_progress and sys.stderr.isatty(),
    )
    # The four menu cases run first, before telemetry exists, and are then forgotten:
    # what the demo exports is the run with breakers alone.
    cases = [run_case(case, args.steps, lambda step, c=case: progress.advance(c.label)) for case in CASES]
    loop_cases = compare_loop_cases()
    stubborn_cases = compare_stubborn_cases()
    TELEMETRY.reset(counts=True)
    upstream_scene.prepare(default_registry())
    record = None
    try:
        exporters = set_up_telemetry(args.serve_metrics, args.otlp, args.metrics_host)
        if exporters.metrics_port is not None:  # scrapeable from now on: the paced run can be watched
            where = metrics_url(exporters.metrics_host, exporters.metrics_port)
            print(f"Serving Prometheus metrics at {where} during the run", file=sys.stderr, flush=True)
        if args.record:
            try:
                record = open(args.record, "w", encoding="utf-8")  # noqa: SIM115
            except OSError as exc:
                raise UsageError(f"--record: cannot write {args.record}: {exc.strerror or exc}") from None
    except UsageError:
        progress.finish()  # the error is the one line left on the terminal
        raise

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
        transitions = TELEMETRY.transitions()
        scene = upstream_scene.run(default_registry(), lambda call: progress.advance("upstream down"))
        progress.finish()

        if record is not None:
            with record:
                for outcome in without.outcomes:
                    record.write(json.dumps(outcome) + "\n")
        if args.json:
            data = as_json(args.steps, without, with_, timeline, transitions, cases, loop_cases, stubborn_cases)
            data["upstream_scene"] = scene_json(scene)
            print(json.dumps(data, indent=2))
        else:
            print(render(args.steps, without, with_, timeline, transitions, prompt, cases, loop_cases, stubborn_cases))
            print(render_scene(scene))
        if record is not None:
            # The demo's breaker settings, so tune's "(current)" row is this run's configuration.
            print(
                f"\nRecorded {len(without.outcomes)} tool outcomes (the run without breakers) to {args.record}; "
                f"try: otel-breaker tune {args.record}\n  (with OTEL_BREAKER_FAILURE_THRESHOLD=3 "
                "OTEL_BREAKER_RECOVERY_TIMEOUT=30 set, its '(current)' row is this demo's configuration)"
            )
        if not args.json:
            print("\n".join(NEXT_STEPS))
        sys.stdout.flush()
        if exporters.metrics_port is not None:
            serve(exporters.metrics_host, exporters.metrics_port, args.hold)
    finally:
        close(exporters)
    return 0
