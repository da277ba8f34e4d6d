"""The metric series a dead tool really produces, scraped as Prometheus would scrape them.

Used by ``test_dead_tool_alerts.py``: an agent calls ``web_search`` (dead: every call raises)
and ``lookup_weather`` (healthy) every 20 simulated seconds for 20 minutes, through real
breakers (3 failures open, 30 s cooldown) and the real OpenTelemetry Prometheus exporter. Every
15 simulated seconds the exporter's text is read, the way a scrape reads it. Between a cooldown's
end and the next call (the probe) the state gauge reads ``half_open``: the samples an alert on
"open" alone misses. Time is a fake clock, so the run takes well under a second.

Prints one JSON document: ``{"interval": "15s", "series": {"name{labels}": [value or null, ...]}}``,
a value per scrape (null before the series first appears), ready for ``promtool test rules``.
"""

from __future__ import annotations

import json

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from otel_breaker import CircuitBreakerConfig, CircuitOpenError, guard, telemetry

DEAD = "web_search"
HEALTHY = "lookup_weather"
AGENT = "research_agent"
#: The labels a scrape adds (promtool input series carry them as Prometheus stores them).
SCRAPE_LABELS = {"job": "agent", "instance": "a:9464"}
METRICS = (
    "otel_breaker_state",
    "otel_breaker_transitions_total",
    "otel_breaker_calls_total",
    "otel_breaker_calls_rejected_total",
)
CALL_EVERY_S = 20
SCRAPE_EVERY_S = 15
RUN_S = 20 * 60


class FakeClock:
    """Monotonic seconds set by the loop below: cooldowns pass without sleeping."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def series_name(name: str, labels: dict[str, str]) -> str:
    """``name{k="v",...}`` in promtool's series notation, values escaped."""
    parts = []
    for key, value in sorted(labels.items()):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        parts.append(f'{key}="{escaped}"')
    return name + "{" + ",".join(parts) + "}"


def scrape() -> dict[str, float]:
    """One scrape of the exporter: otel-breaker's series and their values."""
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(generate_latest(REGISTRY).decode()):
        for sample in family.samples:
            if sample.name in METRICS:
                samples[series_name(sample.name, {**sample.labels, **SCRAPE_LABELS})] = sample.value
    return samples


def main() -> int:
    reader = PrometheusMetricReader()
    telemetry.configure(meter_provider=MeterProvider(metric_readers=[reader]))
    clock = FakeClock()
    config = CircuitBreakerConfig(
        failure_threshold=3,
        recovery_timeout=30.0,
        success_threshold=1,
        timeout=None,
        graceful_degradation=False,
        enable_health_check=False,
    )

    @guard(DEAD, config=config, clock=clock, agent_name=AGENT)
    def web_search(query: str) -> str:
        raise ConnectionError(f"search backend unreachable for {query!r}")

    @guard(HEALTHY, config=config, clock=clock, agent_name=AGENT)
    def lookup_weather(city: str) -> str:
        return f"sunny in {city}"

    scrapes: list[dict[str, float]] = []
    for second in range(RUN_S + 1):
        clock.now = 1000.0 + second
        if second % CALL_EVERY_S == 0:
            try:
                web_search("circuit breakers")
            except (ConnectionError, CircuitOpenError):
                pass
            lookup_weather("Lisbon")
        if second % SCRAPE_EVERY_S == 0:
            scrapes.append(scrape())
    names = sorted({name for samples in scrapes for name in samples})
    series = {name: [samples.get(name) for samples in scrapes] for name in names}
    print(json.dumps({"interval": f"{SCRAPE_EVERY_S}s", "series": series}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
