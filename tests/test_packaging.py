"""What the published package carries: the licence it declares, its type hints, a changelog."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_licence_file_matches_the_declared_licence():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^license = "(.*)"$', pyproject, re.MULTILINE).group(1) == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a stub


def test_the_changelog_has_an_unreleased_section():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## [Unreleased]" in text
    assert "otel_breaker_cost_saved_total" in text


def test_the_wheel_ships_py_typed_and_the_licence(tmp_path):
    uv = shutil.which("uv") or str(pathlib.Path(sys.executable).parent / "uv")
    if not pathlib.Path(uv).exists():
        pytest.skip("uv is not installed (it builds the wheel)")
    result = subprocess.run(
        [uv, "build", "--wheel", "--out-dir", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "otel_breaker/py.typed" in names
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    assert "otel_breaker/semconv.py" in names


def test_test_runs_show_skip_reasons_and_only_our_deprecations(tmp_path):
    (tmp_path / "test_sample.py").write_text(
        "import warnings\n"
        "import pytest\n"
        "def test_third_party():\n"
        "    warnings.warn_explicit('old api', DeprecationWarning, 'lib.py', 1, module='somelib.core')\n"
        "def test_ours():\n"
        "    warnings.warn_explicit('our deprecation', DeprecationWarning, 'x.py', 1, module='otel_breaker.x')\n"
        "def test_skipped():\n"
        "    pytest.skip('the prometheus binary is missing')\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), str(tmp_path / "test_sample.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SKIPPED [1]" in result.stdout and "the prometheus binary is missing" in result.stdout
    assert "our deprecation" in result.stdout
    assert "old api" not in result.stdout
