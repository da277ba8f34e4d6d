"""The docs' "see it locally in one minute" recipe: its commands, run as written."""

from __future__ import annotations

import pathlib
import re
import shlex
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def recipe_commands() -> list[str]:
    readme = ROOT.joinpath("docs", "dashboards.md").read_text(encoding="utf-8")
    section = readme.split("### See it locally in one minute", 1)[1].split("\n#", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_the_recipe_shows_spans_log_events_and_metrics_on_the_console():
    commands = recipe_commands()
    assert commands == ["python examples/see_it_locally.py"]
    argv = shlex.split(commands[0])
    argv[0] = sys.executable
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.count('"name": "execute_tool flaky_search"') == 5
    assert out.count('"name": "agent step') == 5
    assert out.count('"event_name": "otel_breaker.state_change"') == 1
    assert out.count('"event_name": "otel_breaker.rejected"') == 2
    assert '"severity_text": "WARN"' in out
    for metric in ("otel_breaker.calls", "otel_breaker.calls.rejected", "otel_breaker.state"):
        assert f'"name": "{metric}"' in out, metric
    assert "Traceback" not in result.stderr
