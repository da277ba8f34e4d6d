"""The unmodified agent script is guarded without code changes: through
``OTEL_BREAKER_ENABLED=true`` (the .pth start-up hook) and through the
``opentelemetry-instrument`` launcher (our instrumentor entry point)."""

from __future__ import annotations

import pathlib

from zero_code import launcher, run_script, script_env

SCRIPT = pathlib.Path(__file__).with_name("agent_script.py")
UNAVAILABLE = "Tool 'Stock-inventory' is temporarily unavailable"
KERNEL_ERROR = "An error occurred while invoking the function Stock-inventory: inventory service unreachable"


def _run(env: dict[str, str], launch: list[str] | None = None) -> tuple[dict, str]:
    report, stdout = run_script(SCRIPT, env, marker='{"semantic_kernel_report"', launch=launch)
    return report["semantic_kernel_report"], stdout


def _assert_guarded(report: dict) -> None:
    assert report["final"] == "done"
    assert report["body_runs"] == 2  # calls 3 and 4 were rejected without running the function
    assert [UNAVAILABLE in text for text in report["model_saw"]] == [False, False, True, True]
    assert report["model_saw"][:2] == [KERNEL_ERROR] * 2


def test_script_unguarded_baseline():
    report, _ = _run(script_env(OTEL_BREAKER_FAILURE_THRESHOLD="2"))
    assert report["final"] == "done"
    assert report["body_runs"] == 4
    assert report["model_saw"] == [KERNEL_ERROR] * 4


def test_env_switch_guards_the_script():
    report, _ = _run(script_env(OTEL_BREAKER_ENABLED="true", OTEL_BREAKER_FAILURE_THRESHOLD="2"))
    _assert_guarded(report)


def test_opentelemetry_instrument_guards_the_script():
    env = script_env(
        OTEL_BREAKER_FAILURE_THRESHOLD="2",
        OTEL_TRACES_EXPORTER="console",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
    )
    report, stdout = _run(env, launch=launcher())
    _assert_guarded(report)
    # ours for all four calls, the kernel's own for the two that ran (not counted twice:
    # with a double count the breaker would have opened after the first call)
    assert stdout.count('"name": "execute_tool Stock-inventory"') == 6
    assert stdout.count('"otel_breaker.rejected": true') == 2
