"""The unmodified agent script is guarded without code changes: through
``OTEL_BREAKER_ENABLED=true`` (the .pth start-up hook) and through the
``opentelemetry-instrument`` launcher (our instrumentor entry point)."""

from __future__ import annotations

import pathlib

from zero_code import launcher, run_script, script_env

SCRIPT = pathlib.Path(__file__).with_name("agent_script.py")
UNAVAILABLE = "Tool 'inventory' is temporarily unavailable"


def _env(**extra: str) -> dict[str, str]:
    return script_env(AUTOGEN_DISABLE_RUNTIME_TRACING="true", **extra)


def _run(env: dict[str, str], launch: list[str] | None = None) -> tuple[dict, str]:
    report, stdout = run_script(SCRIPT, env, marker='{"autogen_report"', launch=launch)
    return report["autogen_report"], stdout


def _assert_guarded(report: dict) -> None:
    assert report["final"] == "done"
    assert report["body_runs"] == 2  # calls 3 and 4 were rejected without running the tool
    results = report["tool_results"]
    assert [r["is_error"] for r in results] == [True] * 4
    assert [r["content"] for r in results[:2]] == ["inventory service unreachable"] * 2
    assert all(UNAVAILABLE in r["content"] for r in results[2:])


def test_script_unguarded_baseline():
    report, _ = _run(_env(OTEL_BREAKER_FAILURE_THRESHOLD="2"))
    assert report["final"] == "done"
    assert report["body_runs"] == 4
    assert not any(UNAVAILABLE in r["content"] for r in report["tool_results"])


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
    # our 4 spans (autogen adds its own "execute_tool" span under ours for the calls that ran)
    assert stdout.count('"otel_breaker.guarded": true') == 4
    assert stdout.count('"otel_breaker.rejected": true') == 2
