"""The framework catalogue (``otel_breaker/catalogue.py``) is the one list of frameworks.

The places that read it (the start-up hook, ``noxfile.py``) are checked to read it;
the copies written from it (the extras in ``pyproject.toml``, each test session's
``requirements.txt``, the tables of ``README.md`` and ``docs/frameworks.md``) are
checked to say what it says. A failure names the copy and the command that
rewrites it.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import runpy
import subprocess
import sys
import textwrap

import pytest
import tomllib

from otel_breaker import catalogue
from otel_breaker.catalogue import CATALOGUE

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: Extras that install no framework.
OTHER_EXTRAS = {"instruments-any", "instruments", "prometheus", "redis", "dev"}


def _copies_tool():
    spec = importlib.util.spec_from_file_location("catalogue_copies", ROOT / "tools" / "catalogue_copies.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


copies = _copies_tool()


def test_every_copy_says_what_the_catalogue_says():
    wrong = copies.disagreeing()
    assert not wrong, "\n".join(
        f"{name} disagrees with otel_breaker/catalogue.py: run `{copies.COMMAND}`" for name in wrong
    )


def test_the_extras_are_the_catalogue():
    """Read back as TOML, independently of the writer: one extra per framework, holding
    its tested requirement first; ``instruments-any`` holds every framework's requirement."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    framework_extras = {name: value for name, value in extras.items() if name not in OTHER_EXTRAS}
    assert framework_extras == {f.extra: list(f.extra_install) for f in CATALOGUE}
    assert extras["instruments-any"] == [framework.requirement for framework in CATALOGUE]


def test_each_test_session_installs_its_frameworks_tested_range():
    """A "tested" range is what the framework's test session installs: the session's
    requirements hold the extra's lines exactly, and no other range for those packages."""
    sessions = {path.parent.name for path in (ROOT / "tests" / "frameworks").glob("*/requirements.txt")}
    assert sessions == set(catalogue.TEST_SESSIONS), "a test session the catalogue does not know, or one missing"
    for framework in CATALOGUE:
        lines = (ROOT / "tests" / "frameworks" / framework.id / "requirements.txt").read_text(encoding="utf-8")
        lines = [line for line in lines.splitlines() if line and not line.startswith("#")]
        assert lines[: len(framework.extra_install)] == list(framework.extra_install), framework.id
        installed = {_distribution(line) for line in framework.extra_install}
        for line in lines[len(framework.extra_install) :]:
            if _distribution(line) in installed:  # the same package again, e.g. for one of its own extras
                assert not any(sign in line for sign in "<>=~!"), f"{framework.id}: a second range in {line!r}"


def _distribution(line: str) -> str:
    name = line
    for stop in "[<>=~!; ":
        name = name.split(stop, 1)[0]
    return name.lower().replace("_", "-")


def _fresh_interpreter(code: str, **env: str) -> list[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environment.update(PYTHONPATH=str(ROOT), **env)  # this checkout's hook and catalogue
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=environment, timeout=120
    )
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return result.stdout.splitlines()


def test_the_start_up_hook_watches_the_catalogues_modules():
    """Run as the ``.pth`` line runs it, in a fresh interpreter; reading the catalogue
    loads neither otel-breaker nor ``typing``."""
    watched, loaded = _fresh_interpreter(
        """
        import sys
        [watch] = [f for f in sys.meta_path if getattr(f, "otel_breaker_watch", False)]
        print(" ".join(sorted(type(watch).find_spec.__globals__["FRAMEWORK_MODULES"])))
        print(sorted(name for name in ("otel_breaker", "typing") if name in sys.modules))
        """,
        OTEL_BREAKER_ENABLED="true",
    )
    assert set(watched.split()) == {module for framework in CATALOGUE for module in framework.imports}
    [loaded_without_the_switch] = _fresh_interpreter(
        'import sys; print(sorted(name for name in ("otel_breaker", "typing") if name in sys.modules))'
    )
    assert loaded == loaded_without_the_switch and "otel_breaker" not in loaded


def test_the_catalogue_imports_nothing():
    """The start-up hook and nox run it by path: an import there would load in every process."""
    source = (ROOT / "otel_breaker" / "catalogue.py").read_text(encoding="utf-8")
    assert not [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    names = runpy.run_path(str(ROOT / "otel_breaker" / "catalogue.py"))
    assert [framework.id for framework in names["CATALOGUE"]] == list(catalogue.FRAMEWORK_IDS)


def test_nox_runs_one_session_per_catalogued_framework():
    pytest.importorskip("nox")
    noxfile = runpy.run_path(str(ROOT / "noxfile.py"))
    assert noxfile["FRAMEWORKS"] == list(catalogue.TEST_SESSIONS)
    assert set(noxfile["BENCHMARK_FRAMEWORKS"]) <= set(catalogue.FRAMEWORK_IDS)


def test_identifiers_adapters_and_aliases_are_one_to_one():
    assert len(catalogue.BY_ID) == len(CATALOGUE)
    assert len({framework.adapter for framework in CATALOGUE}) == len(CATALOGUE)
    assert not set(catalogue.ALIASES) & set(catalogue.FRAMEWORK_IDS)
    assert sum(len(framework.aliases) for framework in CATALOGUE) == len(catalogue.ALIASES)
    assert len({framework.title for framework in CATALOGUE}) == len(CATALOGUE)


def test_a_copy_edited_by_hand_is_named_with_the_command(tmp_path):
    """The check can fail, and says which copy and how to rewrite it."""
    for name, text in copies.expected_copies().items():
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    assert copies.disagreeing(tmp_path) == []

    langchain = tmp_path / "tests" / "frameworks" / "langchain" / "requirements.txt"
    langchain.write_text(langchain.read_text(encoding="utf-8").replace("langchain-core>=1.8", "langchain-core>=1.9"))
    readme = tmp_path / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8").replace("`pydantic-ai`", "`pydanticai`"), encoding="utf-8")
    assert copies.disagreeing(tmp_path) == ["README.md", "tests/frameworks/langchain/requirements.txt"]

    written = copies.write(tmp_path)
    assert sorted(written) == ["README.md", "tests/frameworks/langchain/requirements.txt"]
    assert copies.disagreeing(tmp_path) == []


def test_a_page_without_its_markers_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"README.md: the markers of the generated frameworks table are missing"):
        copies.replace_block("# no table here\n", "frameworks table", "the table", "README.md")
