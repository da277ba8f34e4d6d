"""Every Python example in the README runs as written."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

README = pathlib.Path(__file__).parent.parent / "README.md"
BLOCK = re.compile(r"(<!-- not run: [^>]*-->\n)?```python\n(.*?)```", re.DOTALL)


def examples() -> list[tuple[int, str]]:
    text = README.read_text(encoding="utf-8")
    found = []
    for match in BLOCK.finditer(text):
        if match.group(1):
            continue
        found.append((text[: match.start()].count("\n") + 1, match.group(2)))
    return found


def test_the_readme_has_examples():
    assert len(examples()) >= 10


@pytest.mark.parametrize(("line", "code"), examples(), ids=[f"line {line}" for line, _ in examples()])
def test_readme_example_runs(line, code, tmp_path):
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OTEL_")}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
    )
    assert result.returncode == 0, f"README example at line {line} failed:\n{result.stderr}"
