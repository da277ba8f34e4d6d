"""The state gauge is in every metrics export, the last one at exit included, for
every breaker: also after the agent object that held it went away.

An unmodified Strands script runs with the switch on, exporting metrics over OTLP
to a real receiver on 127.0.0.1 every 100 ms and once more at exit.
"""

from __future__ import annotations

import pathlib

import pytest
from zero_code import run_script, script_env

HERE = pathlib.Path(__file__).parent
EXPORT = {
    "OTEL_TRACES_EXPORTER": "none",
    "OTEL_LOGS_EXPORTER": "none",
    "OTEL_METRICS_EXPORTER": "otlp",
    "OTEL_METRIC_EXPORT_INTERVAL": "100",
    "OTEL_BREAKER_ENABLED": "true",
}


def _states(export: dict, tool: str) -> dict[str, float]:
    return {
        attributes["otel_breaker.state"]: value
        for attributes, value in export.get("otel_breaker.state", [])
        if attributes.get("gen_ai.tool.name") == tool
    }


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_healthy_run_reports_closed_in_every_export(receiver, protocol):
    out, _ = run_script(HERE / "questions_script.py", script_env(**EXPORT, **receiver.endpoint(protocol)), marker="{")
    assert out["body_runs"] == 3
    exports = [e for e in receiver.metric_exports if "otel_breaker.calls" in e]
    assert exports, "no export after the first call"
    for export in exports:
        assert _states(export, "weather") == {"closed": 1, "open": 0, "half_open": 0}


def test_an_opened_breaker_is_reported_open_in_the_last_export(receiver):
    env = script_env(**EXPORT, **receiver.endpoint("http/protobuf"), OTEL_BREAKER_FAILURE_THRESHOLD="2")
    out, _ = run_script(HERE / "agent_script.py", env, marker="{")
    assert out["body_runs"] == 2
    exports = [e for e in receiver.metric_exports if "otel_breaker.calls" in e]
    assert all(_states(export, "weather") for export in exports)
    assert _states(exports[-1], "weather") == {"closed": 0, "open": 1, "half_open": 0}
    opened = [
        value
        for attributes, value in exports[-1]["otel_breaker.transitions"]
        if attributes.get("otel_breaker.to_state") == "open" and attributes.get("otel_breaker.from_state") == "closed"
    ]
    assert opened == [1]
