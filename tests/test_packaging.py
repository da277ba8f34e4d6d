"""What the published package carries: the licence it declares, its type hints, a changelog."""

from __future__ import annotations

import email.parser
import importlib.util
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
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


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    """The wheel ``uv build`` makes of this checkout, built once for the tests that read it."""
    uv = shutil.which("uv") or str(pathlib.Path(sys.executable).parent / "uv")
    if not pathlib.Path(uv).exists():
        pytest.skip("uv is not installed (it builds the wheel)")
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run(
        [uv, "build", "--wheel", "--out-dir", str(out), str(ROOT)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    (built,) = out.glob("*.whl")
    return built


def test_the_wheel_ships_py_typed_and_the_licence(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "otel_breaker/py.typed" in names
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    assert "otel_breaker/semconv.py" in names


def test_the_wheels_extras_are_the_catalogue(wheel):
    """What ``pip install "otel-breaker[<extra>]"`` installs is the framework's tested range,
    as the catalogue says (the published metadata, not only ``pyproject.toml``)."""
    from packaging.requirements import Requirement

    from otel_breaker.catalogue import CATALOGUE

    def same(lines) -> set[tuple[str, object]]:  # the order of specifiers is the builder's
        return {(Requirement(line).name, Requirement(line).specifier) for line in lines}

    archive = zipfile.ZipFile(wheel)
    [metadata_name] = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
    metadata = email.parser.Parser().parsestr(archive.read(metadata_name).decode("utf-8"))
    extras = set(metadata.get_all("Provides-Extra"))
    by_extra: dict[str, list[str]] = {}
    for line in metadata.get_all("Requires-Dist"):
        requirement, _, marker = line.partition(";")
        found = re.search(r"extra == ['\"]([^'\"]+)['\"]", marker)
        if found:
            by_extra.setdefault(found.group(1), []).append(requirement)
    for framework in CATALOGUE:
        assert framework.extra in extras, framework.extra
        assert same(by_extra[framework.extra]) == same(framework.extra_install), framework.extra
    assert same(by_extra["instruments-any"]) == same(framework.requirement for framework in CATALOGUE)


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


def _install_lines(path: pathlib.Path) -> list[tuple[int, str]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found = re.compile(r"pip install [\"']?(\.|otel-breaker)")
    return [(number, line) for number, line in enumerate(lines) if found.search(line)]


@pytest.mark.parametrize("name", ["README.md", "examples/README.md"])
def test_the_install_line_that_works_from_a_clone_comes_first(name):
    """The package is not on the index yet: the first install line must work from a clone, and
    the index form is shown only marked as the released form."""
    path = ROOT / name
    lines = _install_lines(path)
    assert lines, name
    first_number, first = lines[0]
    assert 'pip install ".[' in first or "pip install . " in first or first.rstrip().endswith("pip install ."), first
    text = path.read_text(encoding="utf-8").splitlines()
    for number, line in lines:
        if "otel-breaker[" in line:
            assert number > first_number, line
            assert "released form" in line or "released form" in " ".join(text[max(0, number - 2) : number + 1]), line


def test_python_m_build_makes_a_wheel_and_an_sdist_that_twine_accepts(tmp_path):
    for module in ("build", "twine"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install '.[dev]')")
    command = [sys.executable, "-m", "build", "--outdir", str(tmp_path), str(ROOT)]
    built = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = tmp_path.glob("*.whl")
    (sdist,) = tmp_path.glob("*.tar.gz")
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
    assert any(name.endswith("/otel_breaker/semconv.py") for name in names)
    assert not any("/.venv/" in name or "/.nox/" in name or "import_linter_cache" in name for name in names)


def test_the_release_checklist_is_in_the_docs():
    assert "release.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    text = (ROOT / "docs" / "release.md").read_text(encoding="utf-8")
    for step in ("python -m build", "twine check", "CHANGELOG.md", "_version.py", "twine upload"):
        assert step in text, step
