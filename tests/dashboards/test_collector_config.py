"""The OpenTelemetry Collector configuration: parses, uses contrib components, wires up."""

from __future__ import annotations

import re

import pytest
import yaml
from obs_helpers import COLLECTOR_CONFIG, PROMETHEUS_CONFIG, REPO

# Components shipped in the OpenTelemetry Collector contrib distribution
# (otel/opentelemetry-collector-contrib) that this config may use.
ALLOWED = {
    "receivers": {"otlp", "prometheus", "hostmetrics"},
    "processors": {
        "batch",
        "memory_limiter",
        "resource",
        "resourcedetection",
        "attributes",
        "filter",
        "transform",
        "cumulativetodelta",
        "deltatocumulative",
    },
    "exporters": {"prometheus", "prometheusremotewrite", "debug", "otlp", "otlphttp"},
    "extensions": {"health_check", "pprof", "zpages"},
    "connectors": {"spanmetrics"},
}


@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.safe_load(COLLECTOR_CONFIG.read_text(encoding="utf-8"))


def _kind(component_id: str) -> str:
    """`otlp/secondary` -> `otlp`."""
    return component_id.split("/", 1)[0]


def test_components_are_contrib_components(config):
    for section, allowed in ALLOWED.items():
        for component_id in config.get(section) or {}:
            assert _kind(component_id) in allowed, f"{section}.{component_id} not in allow-list"
    unknown_sections = set(config) - set(ALLOWED) - {"service"}
    assert not unknown_sections


def test_pipelines_reference_defined_components(config):
    service = config["service"]
    for ext in service.get("extensions", []):
        assert ext in config["extensions"], ext
    pipelines = service["pipelines"]
    assert "metrics" in pipelines
    for name, pipeline in pipelines.items():
        assert pipeline["receivers"] and pipeline["exporters"], name
        for section in ("receivers", "processors", "exporters"):
            for component_id in pipeline.get(section, []):
                assert component_id in (config.get(section) or {}), f"{name}: {component_id}"
    used = {c for p in pipelines.values() for s in ("receivers", "processors", "exporters") for c in p.get(s, [])}
    for section in ("receivers", "processors", "exporters"):
        for component_id in config.get(section) or {}:
            assert component_id in used, f"{section}.{component_id} defined but unused"


def test_otlp_ports(config):
    protocols = config["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"] == "0.0.0.0:4317"
    assert protocols["http"]["endpoint"] == "0.0.0.0:4318"


def test_metrics_pipeline_exports_to_prometheus(config):
    metrics = config["service"]["pipelines"]["metrics"]
    assert metrics["receivers"] == ["otlp"]
    assert "batch" in metrics["processors"]
    # memory_limiter must come first, batch after it.
    if "memory_limiter" in metrics["processors"]:
        assert metrics["processors"][0] == "memory_limiter"
    assert "prometheus" in metrics["exporters"]
    exporter = config["exporters"]["prometheus"]
    assert exporter["endpoint"].endswith(":8889")
    assert exporter["resource_to_telemetry_conversion"]["enabled"] is True


def test_remote_write_alternative_documented():
    text = COLLECTOR_CONFIG.read_text(encoding="utf-8")
    assert "# prometheusremotewrite:" in text


def test_prometheus_scrapes_the_collector():
    prom = yaml.safe_load(PROMETHEUS_CONFIG.read_text(encoding="utf-8"))
    jobs = {job["job_name"]: job for job in prom["scrape_configs"]}
    collector = jobs["otel-collector"]
    assert collector["honor_labels"] is True, "job/instance from service.name would be renamed"
    targets = [t for sc in collector["static_configs"] for t in sc["targets"]]
    assert any(t.endswith(":8889") for t in targets)
    for rule_file in prom["rule_files"]:
        assert (PROMETHEUS_CONFIG.parent / rule_file).resolve().is_file(), rule_file


def test_compose_wires_configs():
    compose = yaml.safe_load((REPO / "examples" / "compose.yaml").read_text(encoding="utf-8"))
    services = compose["services"]
    assert services["otel-collector"]["image"].startswith("otel/opentelemetry-collector-contrib:")
    examples = REPO / "examples"
    for service in services.values():
        for volume in service.get("volumes", []):
            host = volume.split(":", 1)[0]
            assert (examples / host).resolve().exists(), f"compose mounts missing {host}"
    # prometheus.yml loads its rules relative to itself; the container keeps that layout.
    prom_volumes = dict(v.split(":")[:2] for v in services["prometheus"]["volumes"])
    assert prom_volumes["../collector/prometheus.yml"] == "/etc/prometheus/prometheus.yml"
    assert prom_volumes["../dashboards/prometheus/alerts.yaml"] == "/etc/dashboards/prometheus/alerts.yaml"


def _compose() -> dict:
    return yaml.safe_load((REPO / "examples" / "compose.yaml").read_text(encoding="utf-8"))


def test_traces_reach_the_trace_backend_of_the_stack(config):
    services = _compose()["services"]
    traces = config["service"]["pipelines"]["traces"]
    (exporter,) = traces["exporters"]
    assert _kind(exporter) == "otlp"
    host, port = config["exporters"][exporter]["endpoint"].rsplit(":", 1)
    assert host in services, f"{exporter} sends to {host}, not a service of the stack"
    assert services[host]["image"].startswith("jaegertracing/")
    assert port == "4317"
    assert "16686:16686" in services[host]["ports"]
    assert host in services["otel-collector"].get("depends_on", [])


def test_log_based_events_have_a_pipeline(config):
    logs = config["service"]["pipelines"]["logs"]
    assert logs["receivers"] == ["otlp"] and logs["exporters"]


def _missing_references(compose: dict) -> tuple[list[str], list[str]]:
    """(files the compose file references, those missing or not mounted)."""
    examples = REPO / "examples"
    referenced, problems = [], []
    for service in compose["services"].values():
        volumes = [v for v in service.get("volumes", []) if isinstance(v, str)]
        mounted = {v.split(":")[1]: v.split(":")[0] for v in volumes}
        referenced += [v.split(":", 1)[0] for v in volumes if v.startswith((".", "/"))]
        referenced += list(service.get("env_file", []) or [])
        for found in re.findall(r"--config(?:\.file)?=(\S+)", " ".join(map(str, service.get("command", [])))):
            if found not in mounted:
                problems.append(f"{found} is not mounted into the container")
    for section in ("configs", "secrets"):
        referenced += [item["file"] for item in (compose.get(section) or {}).values() if "file" in item]
    problems += [path for path in referenced if not (examples / path).resolve().exists()]
    return referenced, problems


def test_compose_references_only_files_that_exist():
    referenced, problems = _missing_references(_compose())
    assert len(referenced) >= 5
    assert problems == []


def test_compose_check_catches_a_missing_file():
    compose = _compose()
    compose["services"]["otel-collector"]["volumes"] = ["../collector/no-such-file.yaml:/etc/otelcol-contrib/x.yaml"]
    _referenced, problems = _missing_references(compose)
    assert "../collector/no-such-file.yaml" in problems
    assert "/etc/otelcol-contrib/config.yaml is not mounted into the container" in problems
