"""Print the speed goals of the call path as a Markdown table, measured in one run.

Each goal compares one of our benchmarks with a baseline from the same run
(``benchmarks/test_core.py`` and ``benchmarks/test_framework.py``): a peer
breaker, a hand-written span, a plain framework call. Timings on a shared
machine wander between runs, so only figures of one run are ever compared.
The verdict uses the ratio of the medians; the ratio of the minimums stands
beside it (the least noisy figure, when the machine is busy).

    python tools/benchmark_table.py                  # runs the benchmarks, then prints the table
    python tools/benchmark_table.py --json run.json  # reads a run saved with --benchmark-json
    python tools/benchmark_table.py --save run.json  # runs them and keeps the JSON
    python tools/benchmark_table.py -- -x            # anything after -- goes to pytest

The exit code is pytest's: not 0 when a benchmark failed, though the table is printed.

Run it with the interpreter of an environment holding the peers and LangChain
(``nox -s benchmarks`` installs the same): the benchmarks run under the
interpreter that runs this script. A case whose package is missing is skipped
by its benchmark, and its row says "not measured" with pytest's reason, read
from the JUnit XML report written beside the JSON one (``run.xml`` for
``run.json``; a JSON report read alone gives no reason).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCHMARK_FILES = ("benchmarks/test_core.py", "benchmarks/test_framework.py")
NOT_MEASURED = "not measured"
#: The longest reason quoted in a cell (an exception's first line, a skip's message).
REASON_LENGTH = 110


@dataclass(frozen=True)
class Goal:
    """One row: our benchmark against a baseline of the same run.

    With ``added_us`` false, the goal is the ratio ours/baseline at most ``limit``;
    with it true, the time added to the baseline, in microseconds, at most ``limit``.
    Cases are named ``<file>::<test>``."""

    path: str
    ours: str
    baseline: str
    limit: float
    added_us: bool = False

    def goal_text(self) -> str:
        if self.added_us:
            return f"<= +{self.limit:g} us"
        return f"<= {self.limit:g}x"


GOALS = (
    Goal(
        "`breaker.call`, closed, vs circuitbreaker",
        "test_core.py::test_otel_breaker_call",
        "test_core.py::test_circuitbreaker",
        0.5,
    ),
    Goal(
        "`@guard`, closed, vs circuitbreaker",
        "test_core.py::test_otel_breaker_guard_registry",
        "test_core.py::test_circuitbreaker",
        0.6,
    ),
    Goal(
        "rejection, `breaker.call`, vs circuitbreaker's rejection",
        "test_core.py::test_otel_breaker_rejection",
        "test_core.py::test_circuitbreaker_rejection",
        0.5,
    ),
    Goal(
        "rejection, `@guard`, vs circuitbreaker's rejection",
        "test_core.py::test_otel_breaker_guard_rejection",
        "test_core.py::test_circuitbreaker_rejection",
        0.5,
    ),
    Goal(
        "async `@guard` vs aiobreaker",
        "test_core.py::test_async_otel_breaker_guard",
        "test_core.py::test_async_aiobreaker",
        0.6,
    ),
    Goal(
        "LangChain `tool.invoke` with tracing vs a hand-written span + record",
        "test_framework.py::test_guarded_langchain_invoke",
        "test_framework.py::test_floor_hand_written_span_and_record",
        1.03,
    ),
    Goal(
        "LangChain `invoke`, no SDK, vs plain invoke",
        "test_framework.py::test_guarded_invoke_no_sdk",
        "test_framework.py::test_plain_invoke_no_sdk",
        5.0,
        added_us=True,
    ),
)


@dataclass(frozen=True)
class Timing:
    """One benchmark's median and minimum, in seconds."""

    median: float
    minimum: float


def case_name(benchmark: dict[str, Any]) -> str:
    """``<file>::<test>`` of one pytest-benchmark entry, whatever directory pytest ran from."""
    file_part = benchmark["fullname"].split("::")[0]
    return f"{pathlib.PurePosixPath(file_part).name}::{benchmark['name']}"


def read_timings(report: dict[str, Any]) -> dict[str, Timing]:
    """Every case of a pytest-benchmark JSON report."""
    return {
        case_name(benchmark): Timing(benchmark["stats"]["median"], benchmark["stats"]["min"])
        for benchmark in report.get("benchmarks", [])
    }


def collection_reason(text: str) -> str:
    """The reason in a file's collection report: a skip's words (pytest writes the tuple
    ``(path, line, "Skipped: ...")``), else the report's last line (an error's exception)."""
    marker = "Skipped: "
    if marker in text:
        words = text.split(marker, 1)[1].strip().removesuffix(")")
        return words[:-1] if words.endswith(("'", '"')) else words
    lines = text.strip().splitlines()
    return lines[-1].removeprefix("E").strip() if lines else ""  # pytest marks an exception's lines "E   "


def read_reasons(junit_path: pathlib.Path) -> dict[str, str]:
    """Why a case has no timing, from pytest's JUnit XML report: ``<file>::<test>``
    of a failed or skipped test, or ``<file>`` of a file skipped or broken whole
    (a framework that is not installed), -> pytest's message."""
    if not junit_path.exists():
        return {}
    reasons = {}
    for testcase in ElementTree.parse(junit_path).iter("testcase"):
        for outcome in ("failure", "error", "skipped"):
            found = testcase.find(outcome)
            if found is None:
                continue
            classname = testcase.get("classname", "")
            if classname:  # one test: its message names the exception or the skip
                key = f"{classname.rsplit('.', 1)[-1]}.py::{testcase.get('name')}"
                message = found.get("message", "")
            else:  # a whole file at collection: the message is generic, the text says why
                key = f"{testcase.get('name', '').rsplit('.', 1)[-1]}.py"
                message = collection_reason(found.text or found.get("message", ""))
            first_line = next(iter(message.strip().splitlines()), "no message")
            reasons[key] = f"{outcome}: {first_line}"
    return reasons


def cell_text(reason: str) -> str:
    """A reason fit for a table cell: no column separator, cut short."""
    return reason.replace("|", "/")[:REASON_LENGTH]


def missing_text(cases: tuple[str, ...], reasons: dict[str, str]) -> str:
    """The "not measured" cell, with pytest's reason for the first of ``cases`` that has one."""
    for case in cases:
        reason = reasons.get(case) or reasons.get(case.split("::")[0])
        if reason:
            return f"{NOT_MEASURED} ({cell_text(reason)})"
    return NOT_MEASURED


def measured_cell(goal: Goal, timings: dict[str, Timing], reasons: dict[str, str]) -> tuple[str, str]:
    """The measured figure (median, with the minimum beside it) and the verdict of one row."""
    ours = timings.get(goal.ours)
    baseline = timings.get(goal.baseline)
    if ours is None or baseline is None:
        unmeasured = tuple(case for case in (goal.ours, goal.baseline) if case not in timings)
        return missing_text(unmeasured, reasons), NOT_MEASURED
    if goal.added_us:
        by_median = (ours.median - baseline.median) * 1e6
        by_minimum = (ours.minimum - baseline.minimum) * 1e6
        text = f"{by_median:+.1f} us (min {by_minimum:+.1f} us)"
    else:
        by_median = ours.median / baseline.median
        by_minimum = ours.minimum / baseline.minimum
        text = f"{by_median:.2f}x (min {by_minimum:.2f}x)"
    verdict = "met" if by_median <= goal.limit else "not met"
    # A test can fail after its timing (a check on what the timed call did): the figure may not compare like with like.
    for case in (goal.ours, goal.baseline):
        if case in reasons:
            text += f"; but `{case.split('::')[1]}` ended in {cell_text(reasons[case])}"
    return text, verdict


def render(timings: dict[str, Timing], reasons: dict[str, str], report: dict[str, Any]) -> str:
    """The goals table, then the raw figures it was computed from."""
    lines = [
        "| path | measured: median (min) | goal | verdict |",
        "|---|---|---|---|",
    ]
    for goal in GOALS:
        measured, verdict = measured_cell(goal, timings, reasons)
        lines.append(f"| {goal.path} | {measured} | {goal.goal_text()} | {verdict} |")
    lines += ["", "| case | median | min |", "|---|---:|---:|"]
    cases = dict.fromkeys(name for goal in GOALS for name in (goal.ours, goal.baseline))
    for name in cases:
        timing = timings.get(name)
        if timing is None:
            lines.append(f"| `{name}` | {missing_text((name,), reasons)} | |")
        else:
            lines.append(f"| `{name}` | {timing.median * 1e6:.3f} us | {timing.minimum * 1e6:.3f} us |")
    machine = report.get("machine_info", {})
    lines += [
        "",
        f"One run of {report.get('datetime', 'an unknown date')} on {machine.get('node', 'an unknown machine')}, "
        f"Python {machine.get('python_version', '?')}; the verdict reads the ratio of medians.",
    ]
    return "\n".join(lines)


def junit_path_of(json_path: pathlib.Path) -> pathlib.Path:
    """Where the JUnit XML report of a run lies: beside its JSON report."""
    return json_path.with_suffix(".xml")


def run_benchmarks(json_path: pathlib.Path, extra_arguments: list[str]) -> int:
    """Both benchmark files in one pytest run under this interpreter; pytest's exit code.

    A failed benchmark still leaves the others in the report, so a failure is
    reported on stderr and the table is printed from what was measured."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        *BENCHMARK_FILES,
        "-q",
        "-p",
        "no:cacheprovider",
        f"--benchmark-json={json_path}",
        f"--junitxml={junit_path_of(json_path)}",
        # A file that fails to import leaves the other one measured (its rows say why).
        "--continue-on-collection-errors",
        "--benchmark-columns=min,median,mean,ops",
        *extra_arguments,
    ]
    done = subprocess.run(command, cwd=ROOT, stdout=sys.stderr, check=False)
    if done.returncode != 0:
        print(f"pytest exited with {done.returncode}: see its output above", file=sys.stderr)
    return done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=pathlib.Path, help="read this --benchmark-json report instead of running")
    parser.add_argument("--save", type=pathlib.Path, help="keep the report of the run here")
    parser.add_argument("pytest_arguments", nargs="*", help="passed to pytest after --")
    arguments = parser.parse_args(argv)
    exit_code = 0
    if arguments.json is not None:
        json_path = arguments.json
    else:
        json_path = arguments.save or pathlib.Path(tempfile.mkdtemp()) / "benchmarks.json"
        exit_code = run_benchmarks(json_path.resolve(), arguments.pytest_arguments)
    junit_path = junit_path_of(json_path)
    if not json_path.exists() and not junit_path.exists():
        print(f"no benchmark report at {json_path}", file=sys.stderr)
        return exit_code or 1
    # No JSON but a JUnit report: nothing ran far enough to be timed; the rows say why.
    report = json.loads(json_path.read_text()) if json_path.exists() else {}
    print(render(read_timings(report), read_reasons(junit_path), report))
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
