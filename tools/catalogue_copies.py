"""Write every copy of the framework catalogue from ``otel_breaker/catalogue.py``.

The catalogue is the one list of supported frameworks. The places that cannot
read it when they are used are written from it here:

* the framework extras and ``instruments-any`` in ``pyproject.toml``;
* ``tests/frameworks/<session>/requirements.txt``, what each test session installs;
* the framework table of ``README.md`` and the versions table of ``docs/frameworks.md``.

``python tools/catalogue_copies.py --write`` rewrites them; ``--check`` (the
default) lists the ones that disagree and exits 1. ``tests/test_catalogue.py``
runs the same comparison. Only the text between the ``BEGIN``/``END`` markers of
``pyproject.toml`` and the Markdown pages is written; a requirements file is
written whole.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import runpy
import sys
import textwrap
from collections.abc import Callable, Mapping
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
CATALOGUE_FILE = "otel_breaker/catalogue.py"
COMMAND = "python tools/catalogue_copies.py --write"


def begin_words(block: str) -> str:
    """The words that find the line opening the generated block ``block``."""
    return f"BEGIN {block}, generated from {CATALOGUE_FILE}"


def end_words(block: str) -> str:
    """The words that find the line closing it."""
    return f"END {block}"


def toml_markers(block: str) -> tuple[str, str]:
    return f"# {begin_words(block)} by `{COMMAND}`", f"# {end_words(block)}"


def markdown_markers(block: str) -> tuple[str, str]:
    return f"<!-- {begin_words(block)} by `{COMMAND}` -->", f"<!-- {end_words(block)} -->"


def load_catalogue() -> dict[str, Any]:
    """The catalogue's names, run by path: it imports nothing, and importing
    ``otel_breaker.catalogue`` would import the package (and OpenTelemetry)."""
    return runpy.run_path(str(ROOT / CATALOGUE_FILE))


def _toml_list(values: tuple[str, ...] | list[str]) -> str:
    return "[" + ", ".join(json.dumps(value) for value in values) + "]"


def pyproject_block(catalogue: Mapping[str, Any]) -> str:
    """The framework extras and ``instruments-any``, as ``pyproject.toml`` holds them."""
    begin, end = toml_markers("extras")
    lines = [
        begin,
        "# One extra per supported agent framework: the range its test session installs.",
        '# There is no "all": the frameworks\' own pins conflict (crewai needs mcp<2, the mcp extra is 2.x).',
    ]
    for framework in catalogue["CATALOGUE"]:
        lines.append(f"{framework.extra} = {_toml_list(framework.extra_install)}")
    lines += [
        "# What the instrumentor instruments, as OpenTelemetry's contrib instrumentations declare",
        "# it: any one of these frameworks is enough for opentelemetry-instrument to load it.",
        "instruments-any = [",
        *(f"    {json.dumps(framework.requirement)}," for framework in catalogue["CATALOGUE"]),
        "]",
        end,
    ]
    return "\n".join(lines)


def requirements_text(catalogue: Mapping[str, Any], session: str) -> str:
    """``tests/frameworks/<session>/requirements.txt``."""
    lines = [
        f"# Written from {CATALOGUE_FILE} by `{COMMAND}`: edit the catalogue, not this file.",
        *catalogue["session_requirements"](session),
    ]
    return "\n".join(lines) + "\n"


def _code(text: str) -> str:
    return f"`{text}`"


def readme_block(catalogue: Mapping[str, Any]) -> str:
    """The README's table: each framework, its extra and the tested range."""
    begin, end = markdown_markers("frameworks table")
    lines = [
        begin,
        "",
        "| Framework | Extra | Tested range (what the extra installs) |",
        "|---|---|---|",
    ]
    for framework in catalogue["CATALOGUE"]:
        tested = ", ".join(_code(line) for line in framework.extra_install)
        lines.append(f"| {framework.title} | `{framework.extra}` | {tested} |")
    lines += ["", end]
    return "\n".join(lines)


def docs_block(catalogue: Mapping[str, Any]) -> str:
    """``docs/frameworks.md``'s versions table: names, extras, ranges and the imports that start it."""
    begin, end = markdown_markers("versions table")
    lines = [
        begin,
        "",
        "| framework | `OTEL_BREAKER_FRAMEWORKS` name (also accepted) | extra | tested range (what the extra installs)"
        " | started by the import of |",
        "|---|---|---|---|---|",
    ]
    for framework in catalogue["CATALOGUE"]:
        names = _code(framework.id)
        if framework.aliases:
            names += " (" + ", ".join(_code(alias) for alias in framework.aliases) + ")"
        tested = ", ".join(_code(line) for line in framework.extra_install)
        modules = ", ".join(_code(module) for module in framework.imports)
        lines.append(f"| {framework.title} | {names} | `[{framework.extra}]` | {tested} | {modules} |")
    lines += ["", end]
    return "\n".join(lines)


def frameworks_sentence(catalogue: Mapping[str, Any]) -> str:
    """The opening sentence of the README and the documentation's home page that names them all."""
    begin, end = markdown_markers("frameworks sentence")
    titles = [framework.title for framework in catalogue["CATALOGUE"]]
    named = ", ".join(titles[:-1]) + " and " + titles[-1]
    sentence = f"Supported agent frameworks, each with a tested version range: {named}."
    return "\n".join([begin, "", *textwrap.wrap(sentence, width=100, break_on_hyphens=False), "", end])


def replace_block(text: str, name: str, block: str, where: str) -> str:
    """``text`` with the lines from the ``BEGIN`` marker of block ``name`` to its ``END``
    marker (both included) replaced by ``block``. A marker is found by its words, whatever
    its comment syntax."""
    begin = text.find(begin_words(name))
    end = text.find(end_words(name), begin)
    if begin < 0 or end < 0:
        raise ValueError(f"{where}: the markers of the generated {name} are missing ({begin_words(name)!r} ...)")
    start = text.rfind("\n", 0, begin) + 1
    stop = text.find("\n", end)
    return text[:start] + block + (text[stop:] if stop >= 0 else "\n")


#: The files that hold generated blocks: (file, block name, what writes it).
BLOCKS: tuple[tuple[str, str, Callable[[Mapping[str, Any]], str]], ...] = (
    ("pyproject.toml", "extras", pyproject_block),
    ("README.md", "frameworks sentence", frameworks_sentence),
    ("README.md", "frameworks table", readme_block),
    ("docs/index.md", "frameworks sentence", frameworks_sentence),
    ("docs/frameworks.md", "versions table", docs_block),
)


def expected_copies(root: pathlib.Path = ROOT, catalogue: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Relative path -> the text the file must have for it to agree with the catalogue."""
    if catalogue is None:
        catalogue = load_catalogue()
    copies: dict[str, str] = {}
    for name, block, make in BLOCKS:
        if name not in copies:
            copies[name] = (root / name).read_text(encoding="utf-8")
        copies[name] = replace_block(copies[name], block, make(catalogue), name)
    for session in catalogue["TEST_SESSIONS"]:
        copies[f"tests/frameworks/{session}/requirements.txt"] = requirements_text(catalogue, session)
    return copies


def disagreeing(root: pathlib.Path = ROOT, catalogue: Mapping[str, Any] | None = None) -> list[str]:
    """The copies that differ from what the catalogue makes (missing files included)."""
    wrong = []
    for name, text in expected_copies(root, catalogue).items():
        path = root / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            wrong.append(name)
    return wrong


def write(root: pathlib.Path = ROOT) -> list[str]:
    """Rewrite every copy that disagrees; returns their paths."""
    written = []
    for name, text in expected_copies(root).items():
        path = root / name
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(name)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the copies that disagree")
    arguments = parser.parse_args(argv)
    if arguments.write:
        for name in write():
            print(f"wrote {name}")
        return 0
    wrong = disagreeing()
    for name in wrong:
        print(f"{name} disagrees with {CATALOGUE_FILE}: run `{COMMAND}`")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
