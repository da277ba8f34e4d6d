"""The shared adapter machinery, on a small real module patched as a framework would be."""

from __future__ import annotations

import importlib
import logging
import subprocess
import sys
import textwrap

import pytest
import wrapt

from otel_breaker import CircuitBreakerConfig, State, ToolCall, get_circuit_breaker
from otel_breaker.guards import IGNORED_RESULT
from otel_breaker.instrumentation import ADAPTERS, BreakerInstrumentor, normalize_framework
from otel_breaker.instrumentation.base import DidNotEnable, FrameworkAdapter, PatchTarget, note, noted

FRAMEWORK_SOURCE = """
class Tool:
    def __init__(self, name, body):
        self.name = name
        self.body = body

    def run(self, *args):
        return self.body(*args)

    @staticmethod
    def helper(x):
        return x
"""


@pytest.fixture
def toyframework(tmp_path, monkeypatch):
    (tmp_path / "toyframework.py").write_text(FRAMEWORK_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("toyframework", None)
    module = importlib.import_module("toyframework")
    yield module
    sys.modules.pop("toyframework", None)


class ToyAdapter(FrameworkAdapter):
    name = "toy"
    distribution = "pytest"  # any installed distribution serves for the version check
    version_range = ">=1"

    def targets(self):
        return [
            PatchTarget("toyframework", "Tool.run", self._run),
            PatchTarget("toyframework", "Tool.helper", self._helper),
        ]

    def _run(self, wrapped, instance, args, kwargs):
        return self.run_sync(ToolCall(instance.name, framework="toy"), wrapped, args, kwargs)

    def _helper(self, wrapped, instance, args, kwargs):
        return wrapped(*args, **kwargs)

    def result_error(self, call, result):
        if result == "denied":
            return IGNORED_RESULT
        return "tool_error" if str(result).startswith("ERROR") else None

    def rejection(self, call, info):
        return f"REJECTED: {info.message}"


def test_patch_guards_calls_and_unpatch_restores_exactly(toyframework):
    original = toyframework.Tool.__dict__["run"]
    adapter = ToyAdapter()
    assert adapter.patch() == []
    get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=2))
    tool = toyframework.Tool("search", lambda: "ERROR: backend down")
    assert tool.run() == "ERROR: backend down"
    assert tool.run() == "ERROR: backend down"
    assert tool.run().startswith("REJECTED: Tool 'search' is temporarily unavailable")
    assert toyframework.Tool.helper(3) == 3  # staticmethods stay staticmethods
    adapter.unpatch()
    assert toyframework.Tool.__dict__["run"] is original
    assert isinstance(toyframework.Tool.__dict__["helper"], staticmethod)


def test_unpatch_tolerates_a_wrapper_added_after_ours(toyframework):
    adapter = ToyAdapter()
    adapter.patch()
    seen = []

    def other_instrumentation(wrapped, instance, args, kwargs):
        seen.append(instance.name)
        return wrapped(*args, **kwargs)

    wrapt.wrap_function_wrapper(toyframework, "Tool.run", other_instrumentation)
    adapter.unpatch()
    get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=1)).force_open()
    tool = toyframework.Tool("search", lambda: "fine")
    assert tool.run() == "fine"  # ours is now a pass-through; theirs still works
    assert seen == ["search"]


def test_one_logical_call_is_counted_once_when_layers_nest(toyframework):
    adapter = ToyAdapter()
    adapter.patch()
    try:
        inner = toyframework.Tool("search", lambda: "inner result")
        outer = toyframework.Tool("search", lambda: inner.run())
        assert outer.run() == "inner result"
        assert get_circuit_breaker("search").stats.success_count == 1
    finally:
        adapter.unpatch()


def test_a_failure_only_a_nested_layer_sees_counts_for_the_outer_call(toyframework):
    class OuterSDK(FrameworkAdapter):
        """An agent SDK that turns the nested tool's error result into plain text."""

        def result_error(self, call, result):
            return None

    adapter = ToyAdapter()
    adapter.patch()
    try:
        get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=2))
        nested = toyframework.Tool("search", lambda: "ERROR: quota")
        outer = OuterSDK()
        for _ in range(2):
            assert outer.run_sync(ToolCall("search"), lambda: f"text: {nested.run()}", (), {}) == "text: ERROR: quota"
        assert get_circuit_breaker("search").state is State.OPEN
    finally:
        adapter.unpatch()


def test_ignored_results_count_neither_way(toyframework):
    adapter = ToyAdapter()
    adapter.patch()
    try:
        breaker = get_circuit_breaker("transfer", CircuitBreakerConfig(failure_threshold=1, success_threshold=1))
        breaker.force_open(duration=0.0)
        assert toyframework.Tool("transfer", lambda: "denied").run() == "denied"
        assert breaker.state is State.HALF_OPEN and breaker.stats.ignored_count == 1
    finally:
        adapter.unpatch()


def test_version_outside_the_tested_range_is_skipped_with_a_reason():
    class Future(ToyAdapter):
        version_range = ">=999"

    with pytest.raises(DidNotEnable, match="outside the tested range"):
        Future().check_version()

    class Missing(ToyAdapter):
        distribution = "no-such-distribution-xyz"

    with pytest.raises(DidNotEnable, match="not installed"):
        Missing().check_version()


def test_describe_targets_reports_what_exists(toyframework):
    class Partial(ToyAdapter):
        def targets(self):
            return [*super().targets(), PatchTarget("toyframework", "Tool.gone", self._run)]

    rows = dict(Partial().describe_targets())
    assert rows["toyframework:Tool.run"] == "found"
    assert rows["toyframework:Tool.gone"] == "not found in this version"


def test_every_listed_framework_has_an_adapter_class():
    for identifier in ADAPTERS:
        module_name, _, class_name = ADAPTERS[identifier].partition(":")
        adapter_class = getattr(importlib.import_module(module_name), class_name)
        assert issubclass(adapter_class, FrameworkAdapter)
        assert adapter_class.name and adapter_class.distribution and adapter_class.version_range


def test_framework_names_are_normalised():
    assert normalize_framework("openai-agents") == "openai_agents"
    assert normalize_framework("LangGraph") == "langchain"
    with pytest.raises(ValueError, match="unknown framework 'no-such-framework'"):
        normalize_framework("no-such-framework")


def test_asking_for_a_missing_framework_by_name_is_an_error(caplog):
    instrumentor = BreakerInstrumentor()
    missing = [name for name, path in ADAPTERS.items() if not _installed(path)]
    if not missing:
        pytest.skip("every framework is installed here")
    with pytest.raises(DidNotEnable, match="not installed"):
        instrumentor.instrument(frameworks=[missing[0]])
    # Nothing half-done: the instrumentor is not marked instrumented and holds no adapter.
    assert not instrumentor.is_instrumented_by_opentelemetry
    assert missing[0] not in instrumentor.adapters()
    # auto-detection (as the start-up hook runs it) is quiet about the same framework
    with caplog.at_level(logging.WARNING, logger="otel_breaker"):
        instrumentor.instrument(skip_dep_check=True)
    assert instrumentor.is_instrumented_by_opentelemetry
    assert instrumentor.status()[missing[0]].startswith("skipped")
    instrumentor.uninstrument()
    assert missing[0] not in caplog.text


def test_dependencies_are_the_adapters_requirements_any_one_enough(caplog):
    """``instrumentation_dependencies()`` lists every adapter's requirement; the
    instrumentor, like the launcher reading the ``instruments-any`` extra, needs one."""
    from importlib.metadata import distribution

    from opentelemetry.instrumentation.dependencies import get_dist_dependency_conflicts

    from otel_breaker.instrumentation.instrumentor import requirements

    instrumentor = BreakerInstrumentor()
    assert sorted(instrumentor.instrumentation_dependencies()) == sorted(set(requirements().values()))
    usable = any(_usable(path) for path in ADAPTERS.values())
    assert (instrumentor._check_dependency_conflicts() is None) == usable
    assert (get_dist_dependency_conflicts(distribution("otel-breaker")) is None) == usable
    if usable:
        pytest.skip("a framework is installed here: the frameworks' sessions test this")
    # No framework here: a plain instrument() reports it and patches nothing, as contrib instrumentors do.
    with caplog.at_level(logging.ERROR):
        assert instrumentor.instrument() is None
    assert not instrumentor.is_instrumented_by_opentelemetry
    assert "semantic-kernel>=1.45,<2" in caplog.text  # the conflict names what would do


def _usable(path: str) -> bool:
    module_name, _, class_name = path.partition(":")
    try:
        getattr(importlib.import_module(module_name), class_name)().check_version()
    except DidNotEnable:
        return False
    return True


def _installed(path: str) -> bool:
    module_name, _, class_name = path.partition(":")
    adapter = getattr(importlib.import_module(module_name), class_name)()
    return adapter.installed_version() is not None


def run_python(code: str, **env) -> subprocess.CompletedProcess:
    import os

    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=environment, timeout=120
    )


def test_the_startup_hook_does_nothing_when_not_enabled():
    result = run_python(
        """
        import sys
        assert "otel_breaker" not in sys.modules, "the .pth hook imported the package"
        print("clean")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "clean"


def test_the_instrumentor_is_an_opentelemetry_entry_point():
    from importlib.metadata import entry_points

    (entry,) = [e for e in entry_points(group="opentelemetry_instrumentor") if e.name == "otel_breaker"]
    assert entry.load() is BreakerInstrumentor


@pytest.mark.parametrize(
    "specifiers", [">=2.68,<3", ">=0.24,<0.25", "==1.2", "!=1.2.0,>=1", ">1.2,<=1.4", "~=1.2", ">=1.0a1"]
)
@pytest.mark.parametrize(
    "version", ["2.68", "2.78.0", "3.0.0", "2.67.9", "0.24.1", "0.25", "1.2", "1.2.1", "1.4.1", "1.2rc1"]
)
def test_version_ranges_read_as_packaging_reads_them(version, specifiers):
    """The numeric fast path (no ``packaging`` at a framework's import) agrees with PEP 440."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    from otel_breaker.instrumentation.patch import version_in_range

    assert version_in_range(version, specifiers) is (Version(version) in SpecifierSet(specifiers))


def test_notes_belong_to_the_guarded_call_in_progress(toyframework):
    """An adapter notes what the framework showed of a call elsewhere; its checks read the first note of a key."""
    seen = []

    class Noting(ToyAdapter):
        def result_error(self, call, result):
            seen.append((noted("failure"), noted("other")))
            return None

    adapter = Noting()
    adapter.patch()
    try:
        tool = toyframework.Tool("noting", lambda: note("failure", "ValueError") and note("failure", "later"))
        assert tool.run() is True
    finally:
        adapter.unpatch()
    assert seen and set(seen) == {(("failure", "ValueError"), None)}
    assert not note("failure", "outside") and noted("failure") is None  # no guarded call: nothing kept
