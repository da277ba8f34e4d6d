"""Every Python example in the README and the documentation site runs as written."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(<!-- not run: [^>]*-->\n)?```python\n(.*?)```", re.DOTALL)


def examples() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            if match.group(1):
                continue
            line = text[: match.start()].count("\n") + 1
            found.append((f"{page.relative_to(ROOT)}:{line}", match.group(2)))
    return found


def test_the_docs_have_examples():
    # the README alone held 20 python blocks (18 run) before the references moved to docs/; none may be lost
    assert len(examples()) >= 18
    assert sum(text.count("```python") for text in (p.read_text(encoding="utf-8") for p in PAGES)) >= 20


@pytest.mark.parametrize(("where", "code"), examples(), ids=[where for where, _ in examples()])
def test_docs_example_runs(where, code, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
    )
    assert result.returncode == 0, f"example at {where} failed:\n{result.stderr}"
