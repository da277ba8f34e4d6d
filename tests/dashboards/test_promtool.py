"""The alert rules and the Prometheus config, checked by the real promtool."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from obs_helpers import ALERTS, ALERTS_TEST, PROMETHEUS_CONFIG, REPO

pytestmark = pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="`promtool` binary not found on PATH (install Prometheus, e.g. "
    "`apt-get install prometheus`, to run this test)",
)


def promtool(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(["promtool", *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"promtool {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_check_rules():
    out = promtool("check", "rules", str(ALERTS.relative_to(REPO)))
    assert "SUCCESS: 3 rules found" in out.stdout


def test_rule_unit_tests():
    out = promtool("test", "rules", str(ALERTS_TEST.relative_to(REPO)))
    assert "SUCCESS" in out.stdout


def test_check_prometheus_config():
    out = promtool("check", "config", str(PROMETHEUS_CONFIG.relative_to(REPO)))
    # The config must really load the alert rules, not just parse.
    assert "1 rule files found" in out.stdout
    assert "3 rules found" in out.stdout


def test_rule_unit_tests_can_fail(tmp_path):
    """A changed threshold must break the unit tests (they are not vacuous)."""
    rules = ALERTS.read_text(encoding="utf-8")
    assert ") >= 3" in rules
    (tmp_path / "alerts.yaml").write_text(rules.replace(") >= 3", ") >= 4"), encoding="utf-8")
    shutil.copy(ALERTS_TEST, tmp_path / "alerts.test.yaml")
    proc = subprocess.run(
        ["promtool", "test", "rules", "alerts.test.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0, proc.stdout
    assert "OtelBreakerFrequentOpenings" in proc.stdout + proc.stderr
