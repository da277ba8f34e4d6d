"""The unmodified agent script is guarded without code changes: through
``OTEL_BREAKER_ENABLED=true`` (the .pth start-up hook) and through the
``opentelemetry-instrument`` launcher (our instrumentor entry point)."""

from __future__ import annotations

import pathlib

from zero_code import launcher, run_script, script_env

SCRIPT = pathlib.Path(__file__).with_name("agent_script.py")
UNAVAILABLE = "Tool 'inventory' is temporarily unavailable"
KINDS = ("tool_calling", "code")


def _env(**extra: str) -> dict[str, str]:
    return script_env(HF_HUB_OFFLINE="1", **extra)


def _run(env: dict[str, str], launch: list[str] | None = None) -> tuple[dict, str]:
    report, stdout = run_script(SCRIPT, env, marker='{"smolagents_report"', launch=launch)
    return report["smolagents_report"], stdout


def _assert_guarded(report: dict) -> None:
    for kind in KINDS:
        run = report[kind]
        assert run["final"] == "done", kind
        assert run["body_runs"] == 2, kind  # calls 3 and 4 were rejected without running the tool
        assert sum(UNAVAILABLE in text for text in run["model_saw"]) == 2, kind
        assert sum("inventory service unreachable" in text for text in run["model_saw"]) == 2, kind


def test_script_unguarded_baseline():
    report, _ = _run(_env(OTEL_BREAKER_FAILURE_THRESHOLD="2"))
    for kind in KINDS:
        assert report[kind]["final"] == "done"
        assert report[kind]["body_runs"] == 4
        assert not any(UNAVAILABLE in text for text in report[kind]["model_saw"])


def test_env_switch_guards_the_script():
    report, _ = _run(_env(OTEL_BREAKER_ENABLED="true", OTEL_BREAKER_FAILURE_THRESHOLD="2"))
    _assert_guarded(report)


def test_opentelemetry_instrument_guards_the_script():
    env = _env(
        OTEL_BREAKER_FAILURE_THRESHOLD="2",
        OTEL_TRACES_EXPORTER="console",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
    )
    report, stdout = _run(env, launch=launcher())
    _assert_guarded(report)
    assert stdout.count('"name": "execute_tool inventory"') == 8
    assert stdout.count('"otel_breaker.rejected": true') == 4
