"""Install lines in the README, the docs and the examples work today.

otel-breaker is not on the package index yet, so ``pip install "otel-breaker[mcp]"``,
``uvx --from "otel-breaker[mcp]"`` or ``pipx install otel-breaker`` fail for a reader who
copies them. Each install line installs from a clone (``pip install -e ".[mcp]"``); the
released form may be shown only marked as such ("once released: ..."), on its line or the
line next to it.
"""

from __future__ import annotations

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).parent.parent
FILES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "examples").glob("*.md")),
    *sorted((ROOT / "examples").glob("*.py")),
    *sorted((ROOT / "examples").glob("*.yaml")),
]
#: Installing the package by its name from an index (or uv/pipx's runners), with or without extras.
FROM_INDEX = re.compile(
    r"(pip3? install|pipx (install|run)|uvx( --from)?|uv (tool install|pip install|add))"
    r"""\s+["']?otel-breaker(\[|["'\s`]|$)"""
)
MARKED = re.compile(r"once (it is )?released|released form|once the release|once a release", re.IGNORECASE)


def unmarked_install_lines() -> list[str]:
    found = []
    for path in FILES:
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines):
            if not FROM_INDEX.search(line):
                continue
            nearby = lines[max(0, number - 1) : number + 2]
            if not any(MARKED.search(text) for text in nearby):
                found.append(f"{path.relative_to(ROOT)}:{number + 1}: {line.strip()}")
    return found


def test_every_install_line_works_from_a_clone_or_is_marked_as_the_released_form():
    assert unmarked_install_lines() == []


def test_the_check_finds_an_unmarked_line(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text(
        'Install:\n\n    uvx --from "otel-breaker[mcp]" otel-breaker mcp-proxy\n\nor later.\n', encoding="utf-8"
    )
    this = sys.modules[__name__]
    monkeypatch.setattr(this, "FILES", [page])
    monkeypatch.setattr(this, "ROOT", tmp_path)
    assert unmarked_install_lines() == ['page.md:3: uvx --from "otel-breaker[mcp]" otel-breaker mcp-proxy']
