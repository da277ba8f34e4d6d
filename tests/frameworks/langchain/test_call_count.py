"""How many Python functions of otel-breaker one warm LangChain ``tool.invoke`` runs.

A count of calls is a speed measure that a busy machine does not blur: each
function call costs tens of nanoseconds whatever else runs, and a count that
creeps up shows where before a benchmark can. The goals (docs/performance.md):
at most 35 calls of ours per tool call with no OpenTelemetry SDK, at most 45
with one.

Each case runs in a fresh interpreter (this file, run as a script): the global
OpenTelemetry providers can be set once per process and never unset, so "no
SDK" must never follow "an SDK" in the same process. otel-breaker is switched
on the documented zero-code way, ``OTEL_BREAKER_ENABLED=true``; the SDK case
sets its providers in code before importing the framework, as the README asks
of a program that sets its own. The fifth call is counted, after four that
warm every cache, with the garbage collector off so no finaliser of ours runs
inside the count by chance.
"""

from __future__ import annotations

import collections
import gc
import importlib.util
import json
import os
import subprocess
import sys

import pytest

# Not importorskip: run as a script, this module must not import the framework before its providers are set.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("langchain_core") is None, reason="needs langchain-core")

#: The most otel-breaker calls one warm tool call may make, per case.
GOALS = {"no_sdk": 35, "sdk": 45}
#: Calls made before the counted one: the first builds the breaker and caches the tool's identity.
WARM_CALLS = 4
REPORT_MARKER = "CALL-COUNT "


def package_directory() -> str:
    """otel_breaker's directory, found without importing the package (the switch must import it)."""
    spec = importlib.util.find_spec("otel_breaker")
    return os.path.dirname(spec.origin) + os.sep


def set_global_sdk() -> object:
    """A tracer provider (spans kept in memory) and a meter provider with an
    in-memory reader, set as the global providers; the span exporter."""
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
    return exporter


def count_one_call(call, directory: str) -> collections.Counter:
    """``file:function -> calls`` of every Python function under ``directory`` that ``call()`` runs."""
    counted: collections.Counter = collections.Counter()

    def profile(frame, event, arg):
        if event == "call":
            code = frame.f_code
            if code.co_filename.startswith(directory):
                counted[f"{code.co_filename[len(directory) :]}:{code.co_qualname}"] += 1

    gc.collect()
    gc.disable()
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
        gc.enable()
    return counted


def measure(case: str) -> dict:
    """Run in the child: the counted functions of the call after :data:`WARM_CALLS`, and proof that it was guarded."""
    exporter = set_global_sdk() if case == "sdk" else None
    from langchain_core.tools import tool

    @tool
    def lookup(city: str) -> str:
        """Look up a city."""
        return city

    def invoke() -> None:
        assert lookup.invoke({"city": "Oslo"}) == "Oslo"

    for _ in range(WARM_CALLS):
        invoke()
    counted = count_one_call(invoke, package_directory())
    from otel_breaker.registry import default_registry

    spans = [] if exporter is None else exporter.get_finished_spans()
    return {
        "functions": dict(counted),
        "breakers": len(default_registry().find("lookup")),
        "tool_spans": sum(span.name == "execute_tool lookup" for span in spans),
    }


def run_case(case: str) -> dict:
    """:func:`measure` in a fresh interpreter with the switch on and no ``OTEL_*`` variable but it."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    env["OTEL_BREAKER_ENABLED"] = "true"
    done = subprocess.run(
        [sys.executable, __file__, case], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith(REPORT_MARKER)]
    assert lines, f"no report in:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return json.loads(lines[-1].removeprefix(REPORT_MARKER))


def table(functions: dict[str, int]) -> str:
    """The counted functions, most called first: what to make cheaper."""
    ordered = sorted(functions.items(), key=lambda item: (-item[1], item[0]))
    return "\n".join(f"  {count:3d}  {name}" for name, count in ordered)


@pytest.mark.parametrize("case", sorted(GOALS))
def test_calls_of_ours_per_warm_tool_call(case):
    report = run_case(case)
    assert report["breakers"] == 1, "the tool call was not guarded: no breaker for 'lookup'"
    if case == "sdk":
        assert report["tool_spans"] == WARM_CALLS + 1, "the tool calls were not traced"
    total = sum(report["functions"].values())
    print(f"{case}: {total} calls\n{table(report['functions'])}")
    assert total <= GOALS[case], (
        f"{case}: one warm tool.invoke makes {total} calls into otel_breaker (goal <= {GOALS[case]}):\n"
        f"{table(report['functions'])}"
    )


if __name__ == "__main__":
    print(REPORT_MARKER + json.dumps(measure(sys.argv[1])))
