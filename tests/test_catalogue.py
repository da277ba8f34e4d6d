"""The framework catalogue is the one list of frameworks: the copies that cannot
import it (the start-up hook, the package extras) are checked against it here."""

from __future__ import annotations

import ast
import pathlib

import tomllib

from otel_breaker import catalogue
from otel_breaker.catalogue import CATALOGUE

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: Extras that install no framework.
OTHER_EXTRAS = {"instruments-any", "instruments", "prometheus", "redis", "dev"}


def _watched_by_the_start_up_hook() -> set[str]:
    """``_bootstrap.FRAMEWORK_MODULES``, read without running the hook (importing it installs it)."""
    tree = ast.parse((ROOT / "otel_breaker" / "_bootstrap.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == [
            "FRAMEWORK_MODULES"
        ]:
            assert isinstance(node.value, ast.Call)  # frozenset({...})
            return set(ast.literal_eval(node.value.args[0]))
    raise AssertionError("FRAMEWORK_MODULES not found in _bootstrap.py")


def test_the_start_up_hook_and_the_extras_are_the_catalogue():
    # The start-up hook watches exactly the modules the catalogue names.
    assert _watched_by_the_start_up_hook() == {module for framework in CATALOGUE for module in framework.imports}

    # One extra per framework, holding its requirement first, and nothing else.
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    framework_extras = {name: value for name, value in extras.items() if name not in OTHER_EXTRAS}
    assert framework_extras == {f.extra: [f.requirement, *f.extra_requirements] for f in CATALOGUE}

    # What the instrumentor instruments: any one framework's requirement.
    assert extras["instruments-any"] == [framework.requirement for framework in CATALOGUE]

    # Identifiers, adapters and aliases are one-to-one.
    assert len(catalogue.BY_ID) == len(CATALOGUE)
    assert len({framework.adapter for framework in CATALOGUE}) == len(CATALOGUE)
    assert not set(catalogue.ALIASES) & set(catalogue.FRAMEWORK_IDS)
    assert sum(len(framework.aliases) for framework in CATALOGUE) == len(catalogue.ALIASES)
