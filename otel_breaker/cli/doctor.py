"""``otel-breaker doctor``: why the breakers behave as they do here, and what to fix.

A short report: the settings that differ from their defaults, whether a per-call timeout
applies, the supported frameworks (once: installed ones with their patch points, the rest
in one line), what the zero-code set-up exports (by the rule it follows,
:func:`otel_breaker.sdk_setup.plan_export`) and whether each OTLP endpoint answers in the
protocol it will be sent, and whether a shared Redis store lets this user do what the
breakers need. Every problem is listed once, at the end, with its fix. ``--verbose`` adds
the full tables (every setting and its source, every patch point, every package and
OTEL_* variable). Nothing is patched: the check imports framework modules and looks the
targets up.

Exit code 0 when nothing is wrong, 1 when a problem was found.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import socket
import sys
import textwrap
import threading
import urllib.parse
from dataclasses import dataclass
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

#: The widest a cell of doctor's tables gets: a long value is cut (with an ellipsis) rather
#: than pushing every row of its table off the screen.
MAX_CELL_CHARS = 60
#: Width lists of names are wrapped at.
WRAP_CHARS = 100
#: Seconds to connect to an OTLP endpoint, and again to read its first answer. Name
#: resolution is bounded too (it runs in a thread given three times this), so doctor never hangs.
CONNECT_TIMEOUT = 1.5
#: Socket timeout of the shared-store check (a person is waiting, not a tool call).
STORE_TIMEOUT = 2.0


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _shown(var: str, value: str) -> str:
    if any(hint in var for hint in _SECRET_HINTS) and value:
        return "***"
    return value


def _table(rows: list[tuple[str, ...]], indent: str = "  ") -> list[str]:
    rows = [tuple(bounded(cell, MAX_CELL_CHARS) for cell in row) for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [
        indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1]
        for row in rows
    ]


def _wrapped(text: str, indent: str = "  ") -> list[str]:
    return textwrap.wrap(text, width=WRAP_CHARS, initial_indent=indent, subsequent_indent=indent + "  ")


@dataclass(frozen=True)
class Problem:
    """One thing wrong here, and what to do about it."""

    text: str
    fix: str


class Report:
    """The lines printed, and the problems listed once at the end."""

    def __init__(self, verbose: bool = False) -> None:
        self.verbose = verbose
        self.lines: list[str] = []
        self.problems: list[Problem] = []

    def section(self, title: str) -> None:
        if self.lines:
            self.lines.append("")
        self.lines.append(title)

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def problem(self, text: str, fix: str) -> None:
        if all(problem.text != text for problem in self.problems):
            self.problems.append(Problem(text, fix))


# -- configuration --------------------------------------------------------------------------------

_VALUE_PROBLEM = re.compile(r"^(OTEL_BREAKER_[A-Z_]+)=")
_UNKNOWN_VARIABLE = re.compile(r"^(OTEL_BREAKER_[A-Z0-9_]+) is not an otel-breaker setting")


def _config_fix(problem: str) -> str:
    """What to do about one problem the settings loader reports."""
    from otel_breaker.config.environment import closest_variable

    unknown = _UNKNOWN_VARIABLE.match(problem)
    if unknown:
        closest = closest_variable(unknown.group(1))
        if closest:
            return f"rename it to {closest}"
        return "remove it (docs/configuration.md lists every variable)"
    value = _VALUE_PROBLEM.match(problem)
    if value:
        return f"correct {value.group(1)} (its format is in docs/configuration.md) or unset it"
    return "see docs/configuration.md"


def _masked_value(var: str, value: str) -> str:
    """A setting's value as shown: a store URL without its password."""
    if var == "OTEL_BREAKER_STORE" and "://" in value:
        from otel_breaker.store.redis_setup import mask_url

        return mask_url(value)
    return value


def check_configuration(report: Report) -> Any:
    from otel_breaker.config import ConfigError, describe_sources, load_settings

    logger = logging.getLogger("otel_breaker")
    disabled, logger.disabled = logger.disabled, True  # each problem is reported below instead
    try:
        settings = load_settings(strict=False)
    finally:
        logger.disabled = disabled
    rows = [(var, _masked_value(var, value), source) for var, value, source in describe_sources(settings)]
    changed = [row for row in rows if row[2] != "default"]
    if report.verbose:
        report.section("Configuration (OTEL_BREAKER_*): value and where it comes from")
        report.add(*_table([("variable", "value", "source"), *rows]))
    else:
        report.section(
            f"Configuration: {len(changed)} of {len(rows)} OTEL_BREAKER_* settings changed, the rest are "
            "defaults (--verbose lists every value)"
        )
        if changed:
            report.add(*_table(changed))
    try:
        load_settings(strict=True)
    except ConfigError as exc:
        for problem in exc.problems:
            report.problem(problem, _config_fix(problem))
    return settings


def check_timeouts(report: Report, settings: Any) -> None:
    """Whether a per-call timeout applies, and to which tools."""
    default = settings.defaults.timeout
    if default is None:
        report.add(
            "Per-call timeout: every tool: none (the default: a slow tool is never a failure; OTEL_BREAKER_TIMEOUT, "
            "timeout= or a per-tool override switches one on)"
        )
    else:
        source = settings.sources.get("OTEL_BREAKER_TIMEOUT", "default")
        report.add(
            f"Per-call timeout: every tool: {default:g}s ({source}): a sync call that returns later counts as a "
            "failure, an async call is cancelled"
        )
    overrides = {tool: options["timeout"] for tool, options in settings.tools.items() if "timeout" in options}
    for tool, timeout in sorted(overrides.items()):
        report.add(f"  {tool}: {'none' if timeout is None else f'{timeout:g}s'} (OTEL_BREAKER_TOOLS)")


# -- frameworks -----------------------------------------------------------------------------------


def check_frameworks(report: Report, settings: Any) -> None:
    """Each supported framework once: installed ones with their patch points, the rest in one line."""
    from otel_breaker.instrumentation import ADAPTERS, load_adapter_class
    from otel_breaker.instrumentation.base import DidNotEnable

    requested = set(settings.frameworks) if settings.frameworks else None
    how = (
        f"OTEL_BREAKER_FRAMEWORKS selects: {', '.join(sorted(requested))}" if requested is not None else "auto-detected"
    )
    enabled = "" if settings.enabled else "; OTEL_BREAKER_ENABLED is off: they apply under opentelemetry-instrument"
    report.section(f"Frameworks ({how}{enabled}):")
    started = _started_status()
    absent: list[str] = []
    for name in ADAPTERS:
        asked = requested is not None and name in requested
        try:
            adapter = load_adapter_class(name)()
        except ImportError:
            absent.append(f"{name} (adapter not available)")
            if asked:
                report.problem(
                    f"OTEL_BREAKER_FRAMEWORKS asks for {name}, but its adapter is not available",
                    "reinstall otel-breaker",
                )
            continue
        version = adapter.installed_version()
        tested = f"tested {adapter.version_range}" if adapter.version_range else "no tested range"
        if version is None:
            absent.append(name)
            if report.verbose:
                report.add(f"  {name:<15} not installed ({adapter.distribution}; {tested})")
            if asked:
                report.problem(
                    f"OTEL_BREAKER_FRAMEWORKS asks for {name}, but {adapter.distribution} is not installed",
                    f"pip install {adapter.distribution}, or remove {name} from OTEL_BREAKER_FRAMEWORKS",
                )
            continue
        if requested is not None and name not in requested:
            report.add(f"  {name:<15} {adapter.distribution} {version}: not selected by OTEL_BREAKER_FRAMEWORKS")
            continue
        try:
            adapter.check_version()
            in_range = True
        except DidNotEnable as exc:
            in_range = False
            report.add(f"  {name:<15} {adapter.distribution} {version}: skipped: {exc}")
            if asked:  # asked for by name: an error, as the instrumentor treats it
                report.problem(
                    f"OTEL_BREAKER_FRAMEWORKS asks for {name}, but {adapter.distribution} {version} is outside "
                    f"the supported range {adapter.version_range}; its tools run unguarded",
                    f"pip install '{adapter.distribution}{adapter.version_range}'",
                )
        _report_targets(report, settings, name, adapter, version, tested, in_range, started.get(name))
    if absent and not report.verbose:
        report.add(*_wrapped("not installed: " + ", ".join(absent)))


def _report_targets(
    report: Report,
    settings: Any,
    name: str,
    adapter: Any,
    version: str,
    tested: str,
    in_range: bool,
    started: str | None,
) -> None:
    """An installed framework's line: its patch points (each one with --verbose)."""
    try:
        targets = adapter.describe_targets()
    except Exception as exc:
        report.add(f"  {name:<15} {adapter.distribution} {version} ({tested}): cannot list patch points: {exc}")
        return
    found = [where for where, status in targets if status == "found"]
    if in_range:
        active = "active" if settings.enabled else "active when enabled"
        here = f"; in this process: {started}" if started else ""
        report.add(
            f"  {name:<15} {adapter.distribution} {version} ({tested}): {len(found)} of {len(targets)} patch "
            f"points {active}{here}"
        )
    if report.verbose:
        for where, status in targets:
            if not in_range:
                verdict = "skipped: version outside the tested range"
            elif status == "found":
                verdict = "active" if settings.enabled else "active when enabled"
            else:
                verdict = f"skipped: {status}"
            report.add(f"      {where:<60} {verdict}")
    if in_range and targets and not found:
        report.problem(
            f"{name}: no patch point found in {adapter.distribution} {version}; its tools run unguarded",
            f"install a version in the tested range ({adapter.version_range})",
        )


def _started_status() -> dict[str, str]:
    """When the start-up hook runs in this very process: what it did per framework (else empty)."""
    watch = next((f for f in sys.meta_path if getattr(f, "otel_breaker_watch", False)), None)
    if watch is None or not watch.fired:
        return {}
    from otel_breaker.instrumentation import BreakerInstrumentor

    return BreakerInstrumentor().status()


def check_running_instrumentor(report: Report) -> None:
    """When the start-up hook runs in this very process and has done something: what, per framework."""
    watch = next((f for f in sys.meta_path if getattr(f, "otel_breaker_watch", False)), None)
    if watch is None:
        return
    if not watch.fired:
        report.add(
            "  start-up hook active in this process: waiting for the first import of a supported framework "
            "(nothing else is loaded until then)"
        )
        return
    status = _started_status()
    shown = {name: text for name, text in status.items() if not text.startswith("waiting")}
    report.add("  instrumented at start-up in this process:")
    for name, text in sorted(shown.items()):
        report.add(f"    {name:<15} {text}")
    if not shown:
        report.add("    (no framework)")


# -- export ---------------------------------------------------------------------------------------

_OTLP = re.compile(r"^OTLP (?P<protocol>\S+) to (?P<url>\S+)$")


@dataclass(frozen=True)
class Answer:
    """What an endpoint did when doctor connected: ``http`` (an HTTP/1.1 reply), ``other``
    (it accepted the connection, and did not reply in HTTP/1.1, as a gRPC server does),
    ``tls`` (accepted; not spoken to) or ``none`` (nothing answers; ``reason`` says why)."""

    kind: str
    reason: str = ""


def _speak(host: str, port: int, tls: bool) -> Answer:
    try:
        connection = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT)
    except socket.gaierror as exc:
        return Answer("none", f"{host} does not resolve: {exc.strerror}")
    except TimeoutError:
        return Answer("none", f"no answer within {CONNECT_TIMEOUT:g}s")
    except OSError as exc:
        return Answer("none", exc.strerror or type(exc).__name__)
    with connection:
        if tls:
            return Answer("tls")
        try:
            connection.sendall(f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
            head = connection.recv(16)
        except OSError:
            head = b""
    return Answer("http") if head.startswith(b"HTTP/1.") else Answer("other")


def probe_endpoint(url: str) -> Answer:
    """Connect to an OTLP endpoint (bounded: connect, first answer and name resolution)."""
    parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return Answer("none", "the port is not a number")
    host = parts.hostname or ""
    answers: list[Answer] = []

    def attempt() -> None:
        answers.append(_speak(host, port, parts.scheme == "https"))

    thread = threading.Thread(target=attempt, name="otel-breaker-doctor-probe", daemon=True)
    thread.start()
    thread.join(3 * CONNECT_TIMEOUT)
    return answers[0] if answers else Answer("none", f"no answer within {3 * CONNECT_TIMEOUT:g}s")


def _endpoint(url: str) -> str:
    """``scheme://host:port`` of an exporter's URL (the signal's path left out)."""
    parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    return f"{parts.scheme}://{parts.netloc}"


def check_endpoints(report: Report, plan: Any) -> None:
    """Each OTLP endpoint the set-up would send to: does it answer, and in that protocol?"""
    targets: dict[tuple[str, str], list[str]] = {}
    for signal in plan.signals:
        for exporter in signal.exporters:
            match = _OTLP.match(exporter.description)
            if match:
                key = (match.group("protocol"), _endpoint(match.group("url")))
                targets.setdefault(key, []).append(signal.signal)
    for (protocol, endpoint), signals in targets.items():
        who = signals[0] if len(signals) == 1 else f"{', '.join(signals[:-1])} and {signals[-1]}"
        answer = probe_endpoint(endpoint)
        port = urllib.parse.urlsplit(endpoint).port
        if answer.kind == "none":
            report.add(f"    {endpoint}: nothing answers ({answer.reason})")
            hint = ""
            if protocol == "grpc" and port == 4318:
                hint = (
                    "; 4318 is the usual OTLP/HTTP port: set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf if that is meant"
                )
            report.problem(
                f"nothing answers at {endpoint} ({answer.reason}): {who} would be lost, and each export waits "
                "out its timeout",
                f"start the collector, or correct OTEL_EXPORTER_OTLP_ENDPOINT{hint}",
            )
        elif protocol == "grpc" and answer.kind == "http":
            report.add(f"    {endpoint}: answers HTTP/1.1 (an OTLP/HTTP receiver), but {who} would be sent gRPC")
            report.problem(
                f"{who} use gRPC (OTEL_EXPORTER_OTLP_PROTOCOL is not http/protobuf) to {endpoint}, which answers "
                "HTTP/1.1 as an OTLP/HTTP receiver does: nothing arrives, and exit waits out the export timeout",
                "set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf, or point the endpoint at the gRPC port (4317)",
            )
        elif protocol != "grpc" and answer.kind == "other":
            report.add(f"    {endpoint}: answers, but not in HTTP/1.1 (as a gRPC receiver does)")
            report.problem(
                f"{who} use OTLP/HTTP ({protocol}) to {endpoint}, which does not answer HTTP/1.1 (a gRPC "
                "receiver, as on 4317?): nothing arrives",
                "set OTEL_EXPORTER_OTLP_PROTOCOL=grpc, or point the endpoint at the OTLP/HTTP port (4318)",
            )
        else:
            spoken = {"http": "HTTP/1.1", "other": "not HTTP/1.1, as a gRPC receiver", "tls": "TLS, not checked"}
            report.add(f"    {endpoint}: answers ({spoken[answer.kind]})")


_TRAILING_FIX = re.compile(r"; ((?:set|pip install|give|check|use|start|install) .+)$")


def _split_fix(detail: str) -> Problem:
    """A set-up problem as (what, fix): its text ends with the fix after a semicolon."""
    match = _TRAILING_FIX.search(detail)
    if match:
        return Problem(detail[: match.start()], match.group(1))
    return Problem(detail, "see docs/telemetry.md")


def check_telemetry(report: Report) -> None:
    from otel_breaker.sdk_setup import check_signals, plan_export

    report.section(
        "Export (zero-code, at the first import of a supported framework, when the program set no provider):"
    )
    plan = plan_export()
    checks = check_signals(plan)
    for check in checks:
        named = check.detail.startswith(check.signal)
        report.add("    " + (check.detail if named else f"{check.signal}: {check.detail}"))
        if check.state == "problem":
            found = _split_fix(check.detail)
            report.problem(found.text, found.fix)
    for problem in plan.problems:
        if not any(problem in check.detail for check in checks):
            found = _split_fix(problem)
            report.problem(found.text, found.fix)
    check_endpoints(report, plan)
    check_launcher(report, plan)
    shown = [var for var in OTEL_ENV if report.verbose or os.environ.get(var) is not None]
    if shown:
        report.add("  environment:" if report.verbose else "  set:")
    for var in shown:
        value = os.environ.get(var)
        text = bounded(_shown(var, value), 2 * MAX_CELL_CHARS) if value is not None else "(not set)"
        report.add(f"    {var:<40} {text}")
    check_packages(report)


def check_packages(report: Report) -> None:
    """The OpenTelemetry packages installed, and the instrumentor's entry point."""
    versions = {distribution: _version(distribution) for distribution, _role in SDK_PACKAGES}
    if report.verbose:
        report.add("  packages:")
        report.add(
            *_table(
                [
                    (distribution, versions[distribution] or "not installed", role)
                    for distribution, role in SDK_PACKAGES
                ],
                indent="    ",
            )
        )
    else:
        listed = ", ".join(
            f"{distribution.removeprefix('opentelemetry-')} {versions[distribution] or 'not installed'}"
            for distribution, _role in SDK_PACKAGES
        )
        report.add(*_wrapped("packages: " + listed))
    if versions["opentelemetry-sdk"] is None:
        report.problem(
            "opentelemetry-sdk is not installed: spans and metrics go nowhere", "pip install opentelemetry-sdk"
        )
    entry_points = {ep.name for ep in metadata.entry_points(group="opentelemetry_instrumentor")}
    registered = "otel_breaker" in entry_points
    report.add(
        "  instrumentor entry point otel_breaker: "
        + ("registered (opentelemetry-instrument loads it)" if registered else "NOT registered")
    )
    if not registered:
        report.problem("the otel_breaker instrumentor entry point is missing", "reinstall otel-breaker")


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
            "  opentelemetry-instrument: without opentelemetry-distro, otel-breaker sets the SDK up from the "
            "OTEL_* variables as above"
        )
    else:
        report.add(
            "  opentelemetry-instrument: without opentelemetry-distro and with no OTEL_*_EXPORTER or OTLP "
            "endpoint set, nothing is exported"
        )


# -- the shared store -----------------------------------------------------------------------------


def check_store(report: Report, settings: Any) -> None:
    """With a Redis store: can this user reach it and do what the breakers need (one line)?"""
    url = settings.store
    if not url or url == "memory":
        return
    try:
        from otel_breaker.store.redis import RedisStore, StoreError, mask_url
    except ImportError as exc:  # pragma: no cover - the redis extra is missing
        report.problem(f"OTEL_BREAKER_STORE names Redis, but {exc}", "pip install redis (the [redis] extra)")
        return
    report.section(f"Shared store: {bounded(mask_url(url), 2 * MAX_CELL_CHARS)}")
    try:
        store = RedisStore.from_url(url, socket_timeout=STORE_TIMEOUT)
    except StoreError as exc:
        report.problem(str(exc), "correct OTEL_BREAKER_STORE (the URL forms are in docs/redis.md)")
        return
    try:
        store.check()
        report.add(f"  answers; prefix {store.prefix!r}: every command, key and channel the breakers need is allowed")
    except StoreError as exc:
        report.add("  not usable (below)")
        report.problem(str(exc), "see docs/redis.md (its ACL section for a user of its own)")
    finally:
        store.close()


# -- the command ----------------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="check the configuration, frameworks, exporters, endpoints and store; each problem with its fix",
        description="Check otel-breaker here: the settings that differ from their defaults, which agent "
        "frameworks are installed and patched, what the zero-code set-up exports and whether each OTLP endpoint "
        "answers in the protocol it will be sent, and whether a Redis store allows what the breakers need. "
        "Each problem is listed once, with its fix. Exit code 1 when a problem is found.",
    )
    parser.add_argument(
        "--verbose",
        "--all",
        action="store_true",
        help="also every setting with its source, every patch point, every OpenTelemetry package and OTEL_* variable",
    )
    one_line_errors(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from otel_breaker import __version__

    report = Report(verbose=args.verbose)
    report.add(f"otel-breaker {__version__} on Python {sys.version.split()[0]} ({sys.executable})")
    settings = check_configuration(report)
    check_timeouts(report, settings)
    check_frameworks(report, settings)
    check_running_instrumentor(report)
    check_telemetry(report)
    check_store(report, settings)
    if report.problems:
        report.section(f"{len(report.problems)} problem(s) found:")
        for problem in report.problems:
            report.add(f"  PROBLEM: {problem.text}", f"    fix: {problem.fix}")
    else:
        report.section("No problems found.")
    print("\n".join(report.lines))
    return 1 if report.problems else 0
