"""Patching without ``wrapt``'s package: the wrappers behave as ``wrapt.FunctionWrapper``
would for every shape of patch point, and versions are read as ``importlib.metadata`` reads them."""

from __future__ import annotations

import asyncio
import inspect
from importlib import metadata

import pytest
import wrapt

from otel_breaker.instrumentation.patch import distribution_version, make_wrapper


def recorder(seen: list):
    def wrapper(wrapped, instance, args, kwargs):
        seen.append((instance, args, kwargs))
        return wrapped(*args, **kwargs)

    return wrapper


class Tool:
    def __init__(self, name: str) -> None:
        self.name = name

    def run(self, text: str, *, loud: bool = False) -> str:
        """Runs the tool."""
        return f"{self.name}:{text.upper() if loud else text}"

    async def arun(self, text: str) -> str:
        return f"{self.name}:a:{text}"

    @classmethod
    def make(cls, name: str) -> Tool:
        return cls(name)

    @staticmethod
    def helper(value: int) -> int:
        return value + 1

    def stream(self, count: int):
        yield from range(count)


def patch(owner, attribute, wrapper, *, on_class=True):
    original = owner.__dict__[attribute] if on_class else getattr(owner, attribute)
    replacement = make_wrapper(original, wrapper, on_class=on_class)
    setattr(owner, attribute, replacement)
    return original


@pytest.fixture
def tool_class():
    originals = {name: Tool.__dict__[name] for name in ("run", "arun", "make", "helper", "stream")}
    yield Tool
    for name, original in originals.items():
        setattr(Tool, name, original)


def test_a_method_gets_its_bound_original_and_instance_through_instance_and_class(tool_class):
    seen: list = []
    patch(tool_class, "run", recorder(seen))
    tool = tool_class("t")
    assert tool.run("x", loud=True) == "t:X"
    assert tool_class.run(tool, "y") == "t:y"
    assert seen == [(tool, ("x",), {"loud": True}), (tool, ("y",), {})]


def test_a_wrapped_method_keeps_name_doc_signature_and_kind(tool_class):
    patch(tool_class, "run", recorder([]))
    patch(tool_class, "arun", recorder([]))
    assert tool_class.run.__name__ == "run" and tool_class.run.__doc__ == "Runs the tool."
    assert str(inspect.signature(tool_class("t").run)) == "(text: 'str', *, loud: 'bool' = False) -> 'str'"
    assert inspect.iscoroutinefunction(tool_class.arun) and not inspect.iscoroutinefunction(tool_class.run)


def test_a_coroutine_method_is_awaited_through_the_wrapper(tool_class):
    seen: list = []

    def wrapper(wrapped, instance, args, kwargs):
        seen.append(instance)
        return wrapped(*args, **kwargs)

    patch(tool_class, "arun", wrapper)
    tool = tool_class("t")
    assert asyncio.run(tool.arun("x")) == "t:a:x"
    assert seen == [tool]


def test_class_and_static_methods_are_wrapped_as_wrapt_does(tool_class):
    seen: list = []
    patch(tool_class, "make", recorder(seen))
    patch(tool_class, "helper", recorder(seen))
    made = tool_class.make("m")
    assert made.name == "m" and made.helper(1) == 2 and tool_class.helper(2) == 3
    assert seen == [(tool_class, ("m",), {}), (None, (1,), {}), (None, (2,), {})]


def test_a_generator_keeps_a_wrapt_wrapper(tool_class):
    seen: list = []
    patch(tool_class, "stream", recorder(seen))
    assert isinstance(tool_class.__dict__["stream"], wrapt.FunctionWrapper)
    assert inspect.isgeneratorfunction(tool_class.stream)
    assert list(tool_class("t").stream(3)) == [0, 1, 2]


def test_a_module_function_gets_no_instance():
    import types

    module = types.ModuleType("toy")

    def search(query: str) -> str:
        return query * 2

    module.search = search
    seen: list = []
    patch(module, "search", recorder(seen), on_class=False)
    assert module.search("ab") == "abab" and module.search.__wrapped__ is search
    assert seen == [(None, ("ab",), {})]


@pytest.mark.parametrize("name", ["wrapt", "opentelemetry-api", "pytest", "hypothesis", "no-such-distribution-x"])
def test_versions_agree_with_importlib_metadata(name):
    try:
        expected = metadata.version(name)
    except metadata.PackageNotFoundError:
        expected = None
    assert distribution_version(name) == expected
    assert distribution_version(name.upper().replace("-", "_")) == expected
