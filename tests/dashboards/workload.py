"""A workload that trips otel-breaker breakers and serves the metrics for Prometheus.

Used by ``test_prometheus_e2e.py``; runnable on its own too::

    python tests/dashboards/workload.py --port 9464

Two guarded tools share a fake clock (cooldowns pass by advancing it, never by sleeping):

* ``search_web`` always fails: two failures open its breaker, later calls are rejected, and
  every ``reopen`` (one at start-up, then one per command) lets the cooldown pass so the next
  call is a half-open probe that fails and opens the breaker again.
* ``lookup_weather`` always succeeds; its breaker stays closed.
* ``fetch_page`` succeeds until the ``trip`` command; then two failures open its breaker once.
* ``search_news`` runs behind the upstream ``search_api`` (``OTEL_BREAKER_UPSTREAMS``), whose host
  refuses connections: two transport failures open the upstream's breaker (``upstream:search_api``)
  at start-up, for the whole run; the tool's own breaker stays closed.

Metrics are exported with the OpenTelemetry SDK ``PrometheusMetricReader`` on
``prometheus_client``'s HTTP server. The script prints one JSON line per step on stdout
(first ``{"port": N, ...}``), reads commands from stdin (``reopen``, ``healthy``, ``trip``, ``status``),
and keeps serving metrics after stdin closes until it is killed.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import start_http_server

from otel_breaker import CircuitBreakerConfig, CircuitOpenError, guard, telemetry
from otel_breaker.config import Settings
from otel_breaker.registry import BreakerRegistry
from otel_breaker.tokens import Price, TokenEstimator

FLAKY = "search_web"
HEALTHY = "lookup_weather"
TRIPPED_ONCE = "fetch_page"
UPSTREAM = "search_api"
BEHIND_UPSTREAM = "search_news"
AGENT = "research_agent"
MODEL = "example-model"
RECOVERY_TIMEOUT = 30.0


class FakeClock:
    """Monotonic seconds that only move when told to."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def emit(**fields) -> None:
    print(json.dumps(fields, sort_keys=True), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="metrics port (0 = any free port)")
    parser.add_argument("--service-name", default="otel-breaker-e2e")
    args = parser.parse_args(argv)

    reader = PrometheusMetricReader()
    meter_provider = MeterProvider(
        metric_readers=[reader], resource=Resource.create({"service.name": args.service_name})
    )
    tracer_provider = TracerProvider(resource=meter_provider._sdk_config.resource)
    # A price table and one observed model round-trip for the flaky tool, so rejected calls
    # produce both token and USD estimates (the healthy tool is never rejected).
    estimator = TokenEstimator(prices={MODEL: Price(input=3e-6, output=15e-6)})
    estimator.observe(FLAKY, 1200, 300, MODEL)
    telemetry.configure(meter_provider=meter_provider, tracer_provider=tracer_provider, estimator=estimator)

    clock = FakeClock()
    config = CircuitBreakerConfig(
        failure_threshold=2,
        recovery_timeout=RECOVERY_TIMEOUT,
        success_threshold=1,
        timeout=None,
        graceful_degradation=False,
        enable_health_check=False,
    )

    @guard(FLAKY, config=config, clock=clock, agent_name=AGENT)
    def search_web(query: str) -> str:
        clock.advance(0.7)
        raise ConnectionError(f"search backend unreachable for {query!r}")

    @guard(HEALTHY, config=config, clock=clock, agent_name=AGENT)
    def lookup_weather(city: str) -> str:
        clock.advance(0.12)
        return f"sunny in {city}"

    page_fails = threading.Event()

    # A cooldown longer than the whole run: once tripped, this tool stays open (the shared
    # clock passing the flaky tool's cooldowns must not move it to half-open).
    @guard(TRIPPED_ONCE, config=config.with_changes(recovery_timeout=24 * 3600.0), clock=clock, agent_name=AGENT)
    def fetch_page(url: str) -> str:
        clock.advance(0.4)
        if page_fails.is_set():
            raise TimeoutError(f"{url} did not answer")
        return "<html></html>"

    # The upstream's breaker and its tool's come from a registry that knows the grouping.
    upstream_registry = BreakerRegistry(
        settings=Settings(
            defaults=config.with_changes(recovery_timeout=24 * 3600.0), upstreams={UPSTREAM: (BEHIND_UPSTREAM,)}
        ),
        clock=clock,
    )

    @guard(BEHIND_UPSTREAM, registry=upstream_registry)
    def search_news(query: str) -> str:
        clock.advance(0.2)
        raise ConnectionRefusedError(f"[Errno 111] Connection refused: news for {query!r}")

    def upstream_down() -> None:
        for _ in range(4):
            try:
                search_news("otel")
            except (ConnectionRefusedError, CircuitOpenError):
                pass

    counts = {"openings": 0, "rejected": 0, "failures": 0, "successes": 0}

    def state_of(fn) -> str:
        breaker = getattr(fn, "breaker", None)
        return str(getattr(breaker, "state", "unknown"))

    def count_openings(change) -> None:
        if str(change.to_state) == "open":
            counts["openings"] += 1

    search_web.breaker.on_state_change(count_openings)

    def call_flaky() -> None:
        try:
            search_web("circuit breakers")
        except CircuitOpenError:
            counts["rejected"] += 1
        except ConnectionError:
            counts["failures"] += 1

    def healthy(n: int) -> None:
        for i in range(n):
            lookup_weather(f"city-{i}")
            counts["successes"] += 1

    def trip() -> None:
        page_fails.set()
        for _ in range(2):
            try:
                fetch_page("https://example.invalid/")
            except TimeoutError:
                pass

    def reopen() -> None:
        # The cooldown passes; the next call is the half-open probe, which fails.
        clock.advance(RECOVERY_TIMEOUT + 1)
        call_flaky()
        for _ in range(3):
            call_flaky()

    server, _thread = start_http_server(args.port, addr="127.0.0.1")

    # Initial traffic: healthy calls, then two failures open the flaky tool's breaker, further
    # calls are rejected, and one failed probe opens it again. Both "to open" transition series
    # (from closed, from half_open) then exist before the first scrape.
    healthy(10)
    upstream_down()
    fetch_page("https://example.invalid/")
    for _ in range(2):
        call_flaky()
    for _ in range(5):
        call_flaky()
    reopen()
    emit(
        port=server.server_port,
        flaky=FLAKY,
        healthy=HEALTHY,
        tripped_once=TRIPPED_ONCE,
        upstream=UPSTREAM,
        behind_upstream=BEHIND_UPSTREAM,
        agent=AGENT,
        state=state_of(search_web),
        **counts,
    )

    commands = {"reopen": reopen, "healthy": lambda: healthy(3), "trip": trip, "status": lambda: None}
    for line in sys.stdin:
        command = line.strip()
        if not command:
            continue
        if command not in commands:
            emit(error=f"unknown command {command!r}")
            continue
        commands[command]()
        emit(command=command, state=state_of(search_web), tripped_once_state=state_of(fetch_page), **counts)

    threading.Event().wait()  # keep serving metrics until killed
    return 0


if __name__ == "__main__":
    sys.exit(main())
