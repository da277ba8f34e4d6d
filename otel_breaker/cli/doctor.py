"""``otel-breaker doctor``: why the breakers behave as they do here.

Prints the resolved configuration with the source of every value (default,
env, code) and every problem strict validation finds (the same ones the
start-up hook logs); whether a per-call timeout applies and to which tools; which agent frameworks
are installed and which of their patch points would be active or are skipped,
and why; and what the zero-code set-up exports, by the same rule it follows
(:func:`otel_breaker.sdk_setup.plan_export`). Nothing is
patched: the check imports framework modules and looks the targets up.

Exit code 0 when nothing is wrong, 1 when a problem was found.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from importlib import metadata
from typing import Any

from otel_breaker.cli._common import one_line_errors
from otel_breaker.sanitize import bounded

OTEL_ENV = (
    "OTEL_SDK_DISABLED",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_LOGS_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS",
)
_SECRET_HINTS = ("HEADERS", "PASSWORD", "TOKEN", "KEY")

SDK_PACKAGES = (
    ("opentelemetry-api", "API (required)"),
    ("opentelemetry-sdk", "SDK: needed to export anything"),
    ("opentelemetry-instrumentation", "opentelemetry-instrument launcher support"),
    ("opentelemetry-distro", "the launcher's default SDK set-up (without it otel-breaker sets the SDK up)"),
    ("opentelemetry-exporter-otlp-proto-http", "OTLP/HTTP exporter"),
    ("opentelemetry-exporter-otlp-proto-grpc", "OTLP/gRPC exporter"),
    ("opentelemetry-exporter-prometheus", "Prometheus exporter (extra [prometheus])"),
)


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _shown(var: str, value: str) -> str:
    if any(hint in var for hint in _SECRET_HINTS) and value:
        return "***"
    return value


#: The widest a cell of doctor's tables gets: a long value is cut (with an ellipsis) rather
#: than pushing every row of its table off the screen.
MAX_CELL_CHARS = 60


def _table(rows: list[tuple[str, ...]], indent: str = "  ") -> list[str]:
    rows = [tuple(bounded(cell, MAX_CELL_CHARS) for cell in row) for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [
        indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1]
        for row in rows
    ]


class Report:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.problems: list[str] = []

    def section(self, title: str) -> None:
        if self.lines:
            self.lines.append("")
        self.lines.append(title)

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def problem(self, text: str) -> None:
        self.problems.append(text)
        self.lines.append(f"  PROBLEM: {text}")


def check_configuration(report: Report) -> Any:
    from otel_breaker.config import ConfigError, describe_sources, load_settings

    report.section("Configuration (OTEL_BREAKER_*): value and where it comes from")
    logger = logging.getLogger("otel_breaker")
    disabled, logger.disabled = logger.disabled, True  # each problem is reported below instead
    try:
        settings = load_settings(strict=False)
    finally:
        logger.disabled = disabled
    rows = [("variable", "value", "source")]
    rows += [(var, value, source) for var, value, source in describe_sources(settings)]
    report.add(*_table(rows))
    try:
        load_settings(strict=True)
    except ConfigError as exc:
        for problem in exc.problems:
            report.problem(problem)
    return settings


def check_timeouts(report: Report, settings: Any) -> None:
    """Whether a per-call timeout applies, and to which tools."""
    report.section("Per-call timeout")
    default = settings.defaults.timeout
    if default is None:
        report.add(
            "  every tool: none (the default: a slow tool is never a failure; OTEL_BREAKER_TIMEOUT, "
            "timeout= or a per-tool override switches one on)"
        )
    else:
        source = settings.sources.get("OTEL_BREAKER_TIMEOUT", "default")
        report.add(
            f"  every tool: {default:g}s ({source}): a sync call that returns later counts as a failure, "
            "an async call is cancelled"
        )
    overrides = {tool: options["timeout"] for tool, options in settings.tools.items() if "timeout" in options}
    for tool, timeout in sorted(overrides.items()):
        report.add(f"  {tool}: {'none' if timeout is None else f'{timeout:g}s'} (OTEL_BREAKER_TOOLS)")
    report.add("  (breakers configured in code with timeout= apply their own)")


def check_frameworks(report: Report, settings: Any) -> None:
    from otel_breaker.instrumentation import ADAPTERS, load_adapter_class
    from otel_breaker.instrumentation.base import DidNotEnable

    requested = set(settings.frameworks) if settings.frameworks else None
    report.section("Frameworks")
    if requested is not None:
        report.add(f"  OTEL_BREAKER_FRAMEWORKS selects: {', '.join(sorted(requested))}")
    else:
        report.add("  all frameworks are auto-detected (OTEL_BREAKER_FRAMEWORKS is not set)")
    if not settings.enabled:
        report.add(
            "  note: OTEL_BREAKER_ENABLED is off; patches apply under `opentelemetry-instrument` "
            "or with OTEL_BREAKER_ENABLED=true"
        )
    for name in ADAPTERS:
        selected = requested is None or name in requested
        try:
            adapter_class = load_adapter_class(name)
        except ImportError:
            report.add(f"  {name:<14} adapter not available")
            if requested is not None and name in requested:
                report.problem(f"OTEL_BREAKER_FRAMEWORKS asks for {name}, but its adapter is not available")
            continue
        adapter = adapter_class()
        version = adapter.installed_version()
        tested = f"tested {adapter.version_range}" if adapter.version_range else "no tested range"
        if version is None:
            report.add(f"  {name:<14} not installed ({adapter.distribution}; {tested})")
            if requested is not None and name in requested:
                report.problem(f"OTEL_BREAKER_FRAMEWORKS asks for {name}, but {adapter.distribution} is not installed")
            continue
        if not selected:
            report.add(
                f"  {name:<14} {adapter.distribution} {version} installed; not selected by OTEL_BREAKER_FRAMEWORKS"
            )
            continue
        try:
            adapter.check_version()
            in_range = True
        except DidNotEnable as exc:
            in_range = False
            report.add(f"  {name:<14} {adapter.distribution} {version}: skipped: {exc}")
            if requested is not None:  # asked for by name: an error, as the instrumentor treats it
                report.problem(
                    f"OTEL_BREAKER_FRAMEWORKS asks for {name}, but {adapter.distribution} {version} is outside "
                    f"the supported range {adapter.version_range}; its tools run unguarded"
                )
        if in_range:
            report.add(f"  {name:<14} {adapter.distribution} {version} ({tested})")
        try:
            targets = adapter.describe_targets()
        except Exception as exc:
            report.add(f"      cannot list patch points: {type(exc).__name__}: {exc}")
            continue
        for where, status in targets:
            if not in_range:
                verdict = "skipped: version outside the tested range"
            elif status == "found":
                verdict = "active" if settings.enabled else "active when enabled"
            else:
                verdict = f"skipped: {status}"
            report.add(f"      {where:<60} {verdict}")
        if in_range and targets and not any(status == "found" for _where, status in targets):
            report.problem(f"{name}: no patch point found in {adapter.distribution} {version}; its tools run unguarded")


def check_running_instrumentor(report: Report) -> None:
    """When the start-up hook runs in this very process, what it did."""
    watch = next((f for f in sys.meta_path if getattr(f, "otel_breaker_watch", False)), None)
    if watch is None:
        return
    if not watch.fired:
        report.add(
            "  start-up hook active in this process: waiting for the first import of a supported framework "
            "(nothing else is loaded until then)"
        )
        return
    from otel_breaker.instrumentation import BreakerInstrumentor

    status = BreakerInstrumentor().status()
    report.add("  instrumented at start-up in this process:")
    for name, text in sorted(status.items()):
        report.add(f"    {name:<14} {text}")
    if not status:
        report.add("    (no framework)")


def check_telemetry(report: Report) -> None:
    report.section("OpenTelemetry SDK and exporters")
    rows = []
    for distribution, role in SDK_PACKAGES:
        version = _version(distribution)
        rows.append((distribution, version or "not installed", role))
    report.add(*_table(rows))
    if _version("opentelemetry-sdk") is None:
        report.problem("opentelemetry-sdk is not installed: spans and metrics go nowhere")
    entry_points = {ep.name for ep in metadata.entry_points(group="opentelemetry_instrumentor")}
    report.add(
        "  instrumentor entry point otel_breaker: "
        + ("registered (opentelemetry-instrument loads it)" if "otel_breaker" in entry_points else "NOT registered")
    )
    if "otel_breaker" not in entry_points:
        report.problem("the otel_breaker instrumentor entry point is missing: reinstall otel-breaker")
    report.add("  environment:")
    for var in OTEL_ENV:
        value = os.environ.get(var)
        shown = bounded(_shown(var, value), 2 * MAX_CELL_CHARS) if value is not None else "(not set)"
        report.add(f"    {var:<40} {shown}")
    from otel_breaker.sdk_setup import check_signals, plan_export

    report.add(
        "  zero-code export (OTEL_BREAKER_ENABLED=true, at the first import of a supported framework, when the "
        "program set no provider itself; each signal on its own):"
    )
    plan = plan_export()
    checks = check_signals(plan)
    for check in checks:
        named = check.detail.startswith(check.signal)
        report.add("    " + (check.detail if named else f"{check.signal}: {check.detail}"))
        if check.state == "problem":
            report.problem(check.detail)
    for problem in plan.problems:
        if not any(problem in check.detail for check in checks):
            report.problem(problem)
    for signal in plan.signals:
        for exporter in signal.exporters:
            if exporter.entry_point == "otlp_proto_grpc" and ":4318" in exporter.description:
                report.add(
                    f"    note: {signal.signal} use gRPC (OTEL_EXPORTER_OTLP_PROTOCOL is not http/protobuf) to port "
                    "4318, the usual OTLP/HTTP port; set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf if that is meant"
                )
    check_launcher(report, plan)


def check_launcher(report: Report, plan: Any) -> None:
    """What ``opentelemetry-instrument`` sets up here: with ``opentelemetry-distro`` its
    configurator does; without it, otel-breaker does from the same plan, or nothing."""
    if _version("opentelemetry-distro") is not None:
        report.add(
            "  opentelemetry-instrument: opentelemetry-distro is installed, its configuration applies (a program "
            "that sets its own providers exports as it chose)"
        )
    elif plan.active:
        report.add(
            "  opentelemetry-instrument: opentelemetry-distro is not installed; otel-breaker sets the SDK up "
            "from the OTEL_* variables as above when the launcher loads it"
        )
    else:
        report.add(
            "  opentelemetry-instrument: opentelemetry-distro is not installed and no OTEL_*_EXPORTER or OTLP\n"
            "    endpoint is set, so under the launcher nothing is exported; pip install opentelemetry-distro"
        )


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="show the resolved configuration, frameworks, patch points and exporters",
        description="Show the resolved otel-breaker configuration with the source of every value, which agent "
        "frameworks are installed and which patch points are active or skipped (and why), and whether the "
        "OpenTelemetry SDK and exporters are set up. Exit code 1 when a problem is found.",
    )
    one_line_errors(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from otel_breaker import __version__

    report = Report()
    report.add(f"otel-breaker {__version__} on Python {sys.version.split()[0]} ({sys.executable})")
    settings = check_configuration(report)
    check_timeouts(report, settings)
    check_frameworks(report, settings)
    check_running_instrumentor(report)
    check_telemetry(report)
    report.section("No problems found." if not report.problems else f"{len(report.problems)} problem(s) found:")
    report.add(*(f"  - {problem}" for problem in report.problems))
    print("\n".join(report.lines))
    return 1 if report.problems else 0
