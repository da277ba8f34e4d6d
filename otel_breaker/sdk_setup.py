"""Set up the OpenTelemetry SDK from the standard ``OTEL_*`` variables.

Used when otel-breaker is switched on by ``OTEL_BREAKER_ENABLED`` without the
``opentelemetry-instrument`` launcher and, by the first guarded call, the
program has set none of the global tracer, meter and logger providers itself.

The rule (:func:`plan_export`; ``otel-breaker doctor`` prints the same plan):

* Per signal (traces, metrics, logs) the exporters are the ones
  ``OTEL_{TRACES,METRICS,LOGS}_EXPORTER`` names (``none``: that signal is not
  exported), loaded through the ``opentelemetry_<signal>_exporter`` entry points
  exactly as ``opentelemetry-instrument`` loads them.
* A signal whose variable is unset is exported over OTLP when an OTLP endpoint
  is set for it (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
  ``OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT``), and not at all otherwise. Nothing
  asked for means nothing exported and no provider installed.
* ``otlp`` means gRPC unless ``OTEL_EXPORTER_OTLP_[<SIGNAL>_]PROTOCOL`` says
  ``http/protobuf``, as in ``opentelemetry-instrument``; never guessed from a port.
* ``OTEL_SDK_DISABLED=true`` sets nothing up.

The exporters are built with the SDK's public classes, so every other standard
variable (timeouts, headers, batch sizes, intervals, service name, sampler)
applies as the SDK reads it. Exporters created here are watched: a collector
that does not answer is reported in one warning line, exports pause instead of
retrying in a loop, and at exit the providers get a bounded time to flush
(:data:`EXIT_BUDGET` seconds, or the user's ``OTEL_EXPORTER_OTLP_TIMEOUT``),
so a dead collector never holds the program.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from otel_breaker.sdk_exporters import CollectorWatch, WatchedExporter, export_results, logs_sdk, quiet_shutdown

logger = logging.getLogger("otel_breaker")

SIGNALS = ("traces", "metrics", "logs")
OTLP_NAMES = ("otlp", "otlp_proto_grpc", "otlp_proto_http")
_DEFAULT_ENDPOINTS = {"otlp_proto_grpc": "http://localhost:4317", "otlp_proto_http": "http://localhost:4318"}

#: Seconds the providers created here get to flush at exit when the user set no
#: OTLP timeout: the program exits within this (plus interpreter teardown)
#: however unreachable the collector is.
EXIT_BUDGET = 4.0


# -- the rule ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exporter:
    """One exporter of one signal: its entry-point name and what it sends where."""

    signal: str
    entry_point: str
    description: str


@dataclass(frozen=True)
class SignalPlan:
    signal: str
    exporters: tuple[Exporter, ...]
    reason: str


@dataclass(frozen=True)
class ExportPlan:
    """What the zero-code set-up exports, per signal, and the problems found."""

    signals: tuple[SignalPlan, ...]
    problems: tuple[str, ...] = ()
    disabled: bool = False

    @property
    def active(self) -> bool:
        return any(plan.exporters for plan in self.signals)

    def exporters(self, signal: str) -> tuple[Exporter, ...]:
        return next((plan.exporters for plan in self.signals if plan.signal == signal), ())


def _entry_point_names(signal: str) -> set[str]:
    from importlib.metadata import entry_points

    return {ep.name for ep in entry_points(group=f"opentelemetry_{signal}_exporter")}


def _otlp_endpoint(env: Mapping[str, str], signal: str, entry_point: str) -> str:
    specific = env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT", "").strip()
    if specific:
        return specific
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or _DEFAULT_ENDPOINTS[entry_point]
    if entry_point == "otlp_proto_http":
        return base.rstrip("/") + f"/v1/{signal}"
    return base


def _resolve_otlp(env: Mapping[str, str], signal: str, name: str) -> str:
    """The entry point ``otlp`` stands for, from the protocol variables (as the SDK resolves it)."""
    protocol = (
        env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL", "").strip()
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip()
    )
    if not protocol:
        return "otlp_proto_grpc" if name == "otlp" else name
    if protocol == "grpc":
        return "otlp_proto_grpc"
    if protocol == "http/protobuf":
        return "otlp_proto_http"
    raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: expected grpc or http/protobuf")


def plan_export(environ: Mapping[str, str] | None = None, *, force_otlp: bool = False) -> ExportPlan:
    """The exporters the zero-code set-up creates for ``environ`` (default ``os.environ``).

    ``force_otlp``: OTLP for every signal whatever ``OTEL_*_EXPORTER`` says
    (``otel-breaker demo --otlp``).
    """
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return ExportPlan(tuple(SignalPlan(s, (), "OTEL_SDK_DISABLED=true") for s in SIGNALS), disabled=True)
    problems: list[str] = []
    plans = []
    any_endpoint = bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip())
    for signal in SIGNALS:
        var = f"OTEL_{signal.upper()}_EXPORTER"
        raw = env.get(var, "").strip()
        endpoint_var = f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"
        if force_otlp:
            names, reason = ["otlp"], "--otlp"
        elif raw:
            names = [n.strip() for n in raw.split(",") if n.strip() and n.strip().lower() != "none"]
            reason = f"{var}={raw}"
        elif any_endpoint or env.get(endpoint_var, "").strip():
            names = ["otlp"]
            reason = f"{'OTEL_EXPORTER_OTLP_ENDPOINT' if any_endpoint else endpoint_var} is set"
        else:
            names, reason = [], f"nothing asked for: neither {var} nor an OTLP endpoint is set"
        available = _entry_point_names(signal) if names else set()
        exporters = []
        for name in names:
            try:
                entry_point = _resolve_otlp(env, signal, name) if name in OTLP_NAMES else name
            except ValueError as exc:
                problems.append(f"{signal}: {exc}; not exported")
                continue
            if entry_point not in available:
                fix = f"; pip install {exporter_package(entry_point)}"
                problems.append(
                    f"{signal} not exported: {var}={raw or name} names no installed exporter {entry_point!r} "
                    f"(available: {', '.join(sorted(available)) or 'none'}){fix}"
                )
                continue
            if entry_point in _DEFAULT_ENDPOINTS:
                protocol = "grpc" if entry_point == "otlp_proto_grpc" else "http/protobuf"
                text = f"OTLP {protocol} to {_otlp_endpoint(env, signal, entry_point)}"
            else:
                text = entry_point
            exporters.append(Exporter(signal, entry_point, text))
        plans.append(SignalPlan(signal, tuple(exporters), reason))
    return ExportPlan(tuple(plans), tuple(problems))


def load_exporter(exporter: Exporter, watch: CollectorWatch) -> Any:
    """Instantiate one planned exporter through its entry point, watched.

    A metric "exporter" that is a whole reader (Prometheus) is returned as it is.
    """
    from importlib.metadata import entry_points

    (entry_point,) = [
        ep for ep in entry_points(group=f"opentelemetry_{exporter.signal}_exporter") if ep.name == exporter.entry_point
    ]
    cls = entry_point.load()
    if exporter.signal == "metrics":
        from opentelemetry.sdk.metrics.export import MetricReader

        if isinstance(cls, type) and issubclass(cls, MetricReader):
            return cls()
    success, failure = export_results(exporter.signal)
    return WatchedExporter(cls(), watch, exporter.description, success, failure)


def providers_set_by_program() -> list[str]:
    """The signals whose global provider the program (or a launcher) already set."""
    from opentelemetry import metrics, trace

    set_ = []
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        set_.append("traces")
    if type(metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider":
        set_.append("metrics")
    try:
        logs = logs_sdk()
        if not isinstance(logs.get_logger_provider(), logs.ProxyLoggerProvider):
            set_.append("logs")
    except ImportError:
        pass
    return set_


# -- building and installing the providers ------------------------------------------------------


@dataclass
class SdkSetup:
    """The providers one set-up created and installed, and their exit."""

    plan: ExportPlan
    watch: CollectorWatch
    providers: dict[str, Any] = field(default_factory=dict)
    #: Signals that could not be set up, with the one line that said why.
    failed: dict[str, str] = field(default_factory=dict)

    def shutdown(self, budget: float | None = None) -> bool:
        """Flush and shut every provider down in parallel, waiting at most ``budget``
        seconds (default: :func:`exit_budget`). True when all finished in time."""
        where = ", ".join(sorted({e.description for p in self.plan.signals for e in p.exporters}))
        budget = exit_budget() if budget is None else budget
        return shutdown_within(list(self.providers.values()), budget, self.watch, where)


def exit_budget(environ: Mapping[str, str] | None = None) -> float:
    """Seconds to wait for the flush at exit: :data:`EXIT_BUDGET`, or longer when
    the user set an OTLP timeout (seconds, as the Python exporters read it)."""
    env = os.environ if environ is None else environ
    longest = 0.0
    for var in ("OTEL_EXPORTER_OTLP_TIMEOUT", *(f"OTEL_EXPORTER_OTLP_{s.upper()}_TIMEOUT" for s in SIGNALS)):
        try:
            longest = max(longest, float(env.get(var, "") or 0))
        except ValueError:
            continue
    return max(EXIT_BUDGET, longest + 1.0) if longest else EXIT_BUDGET


def shutdown_within(
    providers: list[Any], budget: float, watch: CollectorWatch | None = None, where: str = "the collector"
) -> bool:
    """Shut providers down in parallel daemon threads; give up after ``budget`` seconds.

    A collector that does not answer can hold an exporter's shutdown for its
    whole retry timeout; the program must not wait for that.
    """
    if watch is not None:
        watch.closing = True
    threads = []
    for provider in providers:
        thread = threading.Thread(target=quiet_shutdown, args=(provider,), name="otel-breaker-shutdown", daemon=True)
        thread.start()
        threads.append(thread)
    deadline = time.monotonic() + budget
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    finished = not any(thread.is_alive() for thread in threads)
    if not finished and watch is not None and not watch.warned:
        watch.failed(where, f"did not finish within {budget:g}s at exit", at_exit=True)
    return finished


#: The package that provides each exporter entry point, for the fix a missing one names.
EXPORTER_PACKAGES = {
    "otlp_proto_grpc": "opentelemetry-exporter-otlp-proto-grpc",
    "otlp_proto_http": "opentelemetry-exporter-otlp-proto-http",
    "prometheus": "opentelemetry-exporter-prometheus",
    "console": "opentelemetry-sdk",
}


def exporter_package(entry_point: str) -> str:
    """The package that provides an exporter entry point (by the contrib naming for unknown ones)."""
    return EXPORTER_PACKAGES.get(entry_point) or f"opentelemetry-exporter-{entry_point.split('_')[0]}"


#: Where the Prometheus exporter listens unless told otherwise (its own defaults).
PROMETHEUS_DEFAULT_HOST = "localhost"
PROMETHEUS_DEFAULT_PORT = 9464


def prometheus_address(environ: Mapping[str, str] | None = None) -> tuple[str, int]:
    """The host and port the Prometheus exporter binds, as it reads them."""
    env = os.environ if environ is None else environ
    host = env.get("OTEL_EXPORTER_PROMETHEUS_HOST", "").strip() or PROMETHEUS_DEFAULT_HOST
    try:
        port = int(env.get("OTEL_EXPORTER_PROMETHEUS_PORT", "").strip() or PROMETHEUS_DEFAULT_PORT)
    except ValueError:
        port = PROMETHEUS_DEFAULT_PORT
    return host, port


def exporter_ports(plan: ExportPlan, environ: Mapping[str, str] | None = None) -> dict[int, str]:
    """Local ports the planned exporters listen on, by port: the exporter's name and its variable."""
    ports = {}
    for exporter in plan.exporters("metrics"):
        if exporter.entry_point == "prometheus":
            host, port = prometheus_address(environ)
            ports[port] = f"the Prometheus exporter ({host}:{port}, OTEL_EXPORTER_PROMETHEUS_PORT)"
    return ports


def signal_failure_fix(signal: str, exporters: tuple[Exporter, ...], exc: BaseException) -> str:
    """One line naming the signal that could not be set up, why, and what to change."""
    names = ", ".join(e.entry_point for e in exporters) or "none"
    detail = f"{type(exc).__name__}: {str(exc)[:200]}"
    if isinstance(exc, OSError) and any(e.entry_point == "prometheus" for e in exporters):
        host, port = prometheus_address()
        holder = ""
        status_addr = os.environ.get("OTEL_BREAKER_STATUS_ADDR", "").strip()
        if status_addr.rpartition(":")[2] == str(port):
            holder = f" (OTEL_BREAKER_STATUS_ADDR={status_addr} uses it)"
        fix = (
            f"the Prometheus exporter could not listen on {host}:{port}{holder}; "
            "set OTEL_EXPORTER_PROMETHEUS_PORT to a free port or free that one"
        )
    elif isinstance(exc, ImportError):
        packages = sorted({exporter_package(e.entry_point) for e in exporters})
        fix = f"an exporter package is missing or broken; pip install {' '.join(packages)}"
    elif isinstance(exc, ValueError):
        fix = f"check OTEL_{signal.upper()}_EXPORTER and the OTEL_EXPORTER_* settings of {names}"
    else:
        fix = f"check the settings of the {names} exporter"
    return f"otel-breaker: {signal} not exported ({names}): {fix} [{detail}]; the other signals are unaffected"


def _install_traces(setup: SdkSetup, resource: Any, exporters: tuple[Exporter, ...]) -> Any:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    processors = [BatchSpanProcessor(load_exporter(exporter, setup.watch)) for exporter in exporters]
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    for processor in processors:
        provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    return provider


def _install_metrics(setup: SdkSetup, resource: Any, exporters: tuple[Exporter, ...]) -> Any:
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader

    readers = []
    try:
        for exporter in exporters:
            loaded = load_exporter(exporter, setup.watch)
            readers.append(loaded if isinstance(loaded, MetricReader) else PeriodicExportingMetricReader(loaded))
    except BaseException:
        for reader in readers:  # a periodic reader already started its thread
            quiet_shutdown(reader)
        raise
    provider = MeterProvider(metric_readers=readers, resource=resource, shutdown_on_exit=False)
    metrics.set_meter_provider(provider)
    return provider


def _install_logs(setup: SdkSetup, resource: Any, exporters: tuple[Exporter, ...]) -> Any:
    logs = logs_sdk()
    processors = [logs.BatchLogRecordProcessor(load_exporter(exporter, setup.watch)) for exporter in exporters]
    provider = logs.LoggerProvider(resource=resource, shutdown_on_exit=False)
    for processor in processors:
        provider.add_log_record_processor(processor)
    logs.set_logger_provider(provider)
    return provider


_INSTALLERS = {"traces": _install_traces, "metrics": _install_metrics, "logs": _install_logs}

#: The outcome of the last set-up in this process, per signal (``doctor`` and tests read it).
LAST_SETUP: SdkSetup | None = None


def configure_sdk_from_env(environ: Mapping[str, str] | None = None, *, skip: Collection[str] = ()) -> SdkSetup | None:
    """Install SDK providers exporting as :func:`plan_export` says; None when nothing is asked for.

    Each signal is set up on its own: one that fails (a port in use, a missing
    exporter package, a bad setting) is one warning line naming the signal and
    the fix, and the others are installed as planned. ``skip``: signals whose
    provider the program already set.
    """
    global LAST_SETUP
    plan = plan_export(environ)
    for problem in plan.problems:
        logger.warning("otel-breaker: %s", problem)
    if not plan.active:
        logger.debug("otel-breaker: no OpenTelemetry export asked for; no SDK set up")
        return None
    import atexit

    from opentelemetry.sdk.resources import Resource

    resource = Resource.create()
    setup = SdkSetup(plan, CollectorWatch())
    for signal in SIGNALS:
        exporters = plan.exporters(signal)
        if not exporters or signal in skip:
            continue
        try:
            setup.providers[signal] = _INSTALLERS[signal](setup, resource, exporters)
        except Exception as exc:
            setup.failed[signal] = signal_failure_fix(signal, exporters, exc)
            logger.warning("%s", setup.failed[signal])
    LAST_SETUP = setup
    if not setup.providers:
        return setup
    atexit.register(setup.shutdown)
    logger.info(
        "otel-breaker: OpenTelemetry SDK set up from OTEL_* variables: %s",
        "; ".join(
            f"{e.signal}: {e.description}" for p in plan.signals if p.signal in setup.providers for e in p.exporters
        ),
    )
    return setup


# -- what doctor reports per signal -----------------------------------------------------------


@dataclass(frozen=True)
class SignalCheck:
    """One signal's state as the set-up would find it here: ``exported``, ``off`` or ``problem``."""

    signal: str
    state: str
    detail: str


def _port_taken(host: str, port: int) -> bool:
    import socket

    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def check_signals(plan: ExportPlan, environ: Mapping[str, str] | None = None) -> list[SignalCheck]:
    """Per signal, what the set-up would do, trying what can fail before a program runs:
    each exporter's package loads (a broken or mismatched one is named), and a port an
    exporter listens on is free and not the status endpoint's."""
    env = os.environ if environ is None else environ
    checks = []
    status_addr = env.get("OTEL_BREAKER_STATUS_ADDR", "").strip()
    for signal_plan in plan.signals:
        signal = signal_plan.signal
        if not signal_plan.exporters:
            problem = next((p for p in plan.problems if p.startswith(f"{signal} not exported")), None)
            if problem:
                checks.append(SignalCheck(signal, "problem", problem))
            else:
                checks.append(SignalCheck(signal, "off", f"not exported ({signal_plan.reason})"))
            continue
        problems = []
        for exporter in signal_plan.exporters:
            try:
                from importlib.metadata import entry_points

                (entry_point,) = [
                    ep
                    for ep in entry_points(group=f"opentelemetry_{signal}_exporter")
                    if ep.name == exporter.entry_point
                ]
                entry_point.load()
            except Exception as exc:
                problems.append(signal_failure_fix(signal, (exporter,), exc).removeprefix("otel-breaker: "))
                continue
            if exporter.entry_point == "prometheus":
                host, port = prometheus_address(env)
                if status_addr.rpartition(":")[2] == str(port):
                    problems.append(
                        f"{signal} not exported: the Prometheus exporter's port {port} is also "
                        f"OTEL_BREAKER_STATUS_ADDR={status_addr}; set OTEL_EXPORTER_PROMETHEUS_PORT or "
                        "OTEL_BREAKER_STATUS_ADDR to another"
                    )
                elif _port_taken(host, port):
                    problems.append(
                        f"{signal} not exported: the Prometheus exporter's port {host}:{port} is in use here; "
                        "set OTEL_EXPORTER_PROMETHEUS_PORT to a free port"
                    )
        where = "; ".join(e.description for e in signal_plan.exporters)
        if problems:
            checks.append(SignalCheck(signal, "problem", "; ".join(problems)))
        else:
            checks.append(SignalCheck(signal, "exported", f"{where} ({signal_plan.reason})"))
    return checks
