"""A framework's argument check as the model's mistake (CrewAI's ``ArgumentCheck``): on a small real module
whose tool validates the model's arguments before its body runs, patched as a framework would be."""

from __future__ import annotations

import importlib
import sys

import pytest

from otel_breaker import State, ToolCall
from otel_breaker.classify import MISTAKE
from otel_breaker.config import load_settings, set_settings
from otel_breaker.instrumentation.base import PatchTarget
from otel_breaker.instrumentation.crewai.arguments import ArgumentCheck
from otel_breaker.instrumentation.spec import SpecAdapter, tool_patch
from otel_breaker.registry import default_registry

FRAMEWORK_SOURCE = """
class Tool:
    def __init__(self, name, body):
        self.name, self.body, self.runs = name, body, 0

    def _validate(self, kwargs):
        if not isinstance(kwargs.get("x"), int):
            raise ValueError(f"x must be an integer, not {kwargs.get('x')!r}")
        return kwargs

    def run(self, **kwargs):
        kwargs = self._validate(kwargs)
        self.runs += 1
        return self.body(**kwargs)
"""

SEEN: list[Exception] = []
CHECK = ArgumentCheck("test_validator", then=SEEN.append)


class ValidatingToy(SpecAdapter):
    name, requires = "validatingtoy", "pytest>=1"
    patches = (tool_patch("validframework", "Tool.run", "sync"),)

    def targets(self):
        return [*super().targets(), PatchTarget("validframework", "Tool._validate", CHECK)]

    def describe(self, instance, args, kwargs):
        return ToolCall(instance.name, self.name, "toy", "toy", arguments=kwargs)

    def exception_hint(self, call, exc):
        return CHECK.exception_hint(exc)


@pytest.fixture
def framework(tmp_path, monkeypatch):
    (tmp_path / "validframework.py").write_text(FRAMEWORK_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("validframework", None)
    module = importlib.import_module("validframework")
    adapter = ValidatingToy()
    adapter.patch()
    SEEN.clear()
    yield module
    adapter.unpatch()
    sys.modules.pop("validframework", None)


def _down(x):
    raise ValueError("backend down")  # the same type as the check's: only the check's error is a mistake


def test_refused_arguments_never_count_for_the_breaker(framework):
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2"}))
    tool = framework.Tool("lookup", _down)
    for x in ("one", "two", "three"):
        with pytest.raises(ValueError, match="must be an integer"):
            tool.run(x=x)
    (breaker,) = default_registry().find("lookup")
    assert (tool.runs, breaker.stats.failure_count, breaker.state) == (0, 0, State.CLOSED)
    assert [str(e) for e in SEEN] == [f"x must be an integer, not {x!r}" for x in ("one", "two", "three")]
    for x in (1, 2):  # the body's own ValueError is a failure
        with pytest.raises(ValueError, match="backend down"):
            tool.run(x=x)
    assert (tool.runs, breaker.state) == (2, State.OPEN)


def test_the_hint_is_for_the_error_the_check_raised_only():
    check = ArgumentCheck("test_validator_alone", errors=(KeyError,))

    def refuse():
        raise KeyError("x")

    with pytest.raises(KeyError) as raised:
        check(refuse, None, (), {})
    assert check.exception_hint(raised.value) == MISTAKE
    assert check.exception_hint(KeyError("x")) is None  # an equal error, not the one raised
    with pytest.raises(TypeError):  # not one of its errors: passes through, not remembered
        check(lambda: int([]), None, (), {})
    assert check.exception_hint(raised.value) == MISTAKE
    assert check(lambda a, b=0: a + b, None, (1,), {"b": 2}) == 3
