"""What a tool *is*, independent of the Python objects that carry it.

A breaker follows a tool, not an object: a service that builds a new agent (and
new framework tool objects) for every request must find the same breaker each
time, and every worker process must find the same key, so a shared store can
hold it. Two different tools that happen to share a name must never share one.

So a tool's key is ``(agent name, tool name, where it runs)``
(:class:`ToolKey`). "Where it runs" is the MCP server or toolset the adapter
names (``ToolCall.source``) when there is one; otherwise the *code origin* of
the callable behind the tool (:func:`origin_of`): ``module:qualname`` of the
user's function, or of the class of a class-based tool. Both are the same in
every process that runs the same code, and neither depends on ``id()``.

Rules for callables whose code identity is not plain (documented in the Python
API reference):

* ``functools.partial`` and decorator chains (``__wrapped__``) are unwrapped to
  the function inside; a bound method is its function;
* a lambda adds where it starts (``module:<lambda>@12:8``: line, and column where
  the interpreter records it), so two lambdas in one module differ;
* a builtin or C callable uses its ``__module__``/``__qualname__`` (e.g.
  ``builtins:len``);
* a callable object (an instance with ``__call__``) uses its class;
* a framework's own wrapper function is looked through: a callable held in its
  closure or in a tool object's ``func``/``function``/``coroutine``-style
  attribute is the origin when it comes from outside the framework.

The origin is computed once per tool object (a small cache keyed by the
object's id and checked through a weak reference), never on every call. A tool
object that cannot be weakly referenced is read again on each call (a few
attribute reads); nothing here ever raises.
"""

from __future__ import annotations

import functools
import inspect
import types
import weakref
from typing import Any, NamedTuple

#: Attributes under which framework tool objects keep the user's callable, in the order tried.
CALLABLE_ATTRIBUTES = (
    "func",
    "function",
    "fn",
    "_func",
    "_function",
    "coroutine",
    "entrypoint",
    "callable",
    "_callable",
    "method",
    "_method",
    "_fn",
    "_async_fn",
    "call_func",
    "_tool_func",
    "tool_func",
    "function_callable",
    "forward",
    "on_invoke_tool",
    "_invoke_tool_impl",
)
#: Attributes under which a framework's tool wrapper keeps the tool it wraps (callable or not).
HOLDER_ATTRIBUTES = ("source_tool", "wrapped", "tool", "_tool", "original_tool")
#: How deep a tool object is searched for the user's callable.
MAX_DEPTH = 4
#: Longest origin kept (a deep qualname is cut in the middle, with its length, so it stays distinct).
MAX_ORIGIN = 200


#: Callables implemented in C (builtins, slot wrappers, method descriptors): named by module and qualname.
_C_CALLABLES = (
    types.BuiltinFunctionType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.MethodWrapperType,
    types.ClassMethodDescriptorType,
)


class ToolKey(NamedTuple):
    """The identity a breaker is keyed by: the same in every process running the same code."""

    agent: str | None
    """The agent name, when the scope keys by agent and the framework gives one."""
    tool: str
    where: str | None
    """The MCP server, toolset or upstream the tool runs behind, else its code origin."""


def code_origin(target: Any, framework_package: str | None = None) -> str | None:
    """``module:qualname`` of the code behind ``target`` (see the module rules); None
    when nothing about it can be read. Never raises."""
    try:
        return _origin(target, framework_package, 0, set())
    except Exception:
        return None


def _origin(target: Any, framework: str | None, depth: int, seen: set[int]) -> str | None:
    if target is None or depth > MAX_DEPTH or id(target) in seen:
        return None
    seen.add(id(target))
    if inspect.ismethod(target) and framework is not None and _belongs(target.__func__, framework):
        # A framework method bound to the object that holds the user's callable.
        return _origin(target.__self__, framework, depth + 1, seen)
    target = _unwrap(target)
    if inspect.isfunction(target) or isinstance(target, _C_CALLABLES):
        if framework is not None and _belongs(target, framework):
            # The framework's own wrapper: the user's callable is in its closure, if anywhere.
            for cell in getattr(target, "__closure__", None) or ():
                try:
                    inner = cell.cell_contents
                except ValueError:
                    continue
                if callable(inner):
                    found = _origin(inner, framework, depth + 1, seen)
                    if found is not None:
                        return found
            return None
        return _name_of(target)
    if isinstance(target, type):
        return None if framework is not None and _belongs(target, framework) else _name_of(target)
    for attribute in CALLABLE_ATTRIBUTES:
        try:
            inner = getattr(target, attribute, None)
        except Exception:
            continue
        if inner is not None and inner is not target and callable(inner):
            found = _origin(inner, framework, depth + 1, seen)
            if found is not None:
                return found
    if framework is not None and _belongs(type(target), framework):
        for attribute in HOLDER_ATTRIBUTES:
            try:
                inner = getattr(target, attribute, None)
            except Exception:
                continue
            if inner is not None and inner is not target:
                found = _origin(inner, framework, depth + 1, seen)
                if found is not None:
                    return found
    kind = type(target)
    if framework is not None and _belongs(kind, framework):
        return None
    return _name_of(kind)


def _unwrap(target: Any) -> Any:
    for _ in range(16):
        if isinstance(target, functools.partial):
            target = target.func
        elif isinstance(target, staticmethod | classmethod) or inspect.ismethod(target):
            target = target.__func__
        else:
            wrapped = getattr(target, "__wrapped__", None) if inspect.isfunction(target) else None
            if wrapped is None or not callable(wrapped):
                return target
            target = wrapped
    return target


def _belongs(target: Any, package: str) -> bool:
    module = getattr(target, "__module__", None) or ""
    return module == package or module.startswith(package + ".")


def _name_of(target: Any) -> str | None:
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    if not isinstance(qualname, str) or not qualname:
        return None
    if not isinstance(module, str) or not module:
        module = "?"
    origin = f"{module}:{qualname}"
    if "<lambda>" in qualname:
        origin += _position(getattr(target, "__code__", None))
    if len(origin) > MAX_ORIGIN:
        keep = (MAX_ORIGIN - 12) // 2
        origin = f"{origin[:keep]}…{len(origin)}…{origin[-keep:]}"
    return origin


def _position(code: Any) -> str:
    """``@line`` (``@line:column`` where the interpreter records columns) of a code object."""
    line = getattr(code, "co_firstlineno", None)
    if not isinstance(line, int):
        return ""
    try:
        # Python 3.11+: the column of the body's first expression (the first instruction,
        # a RESUME, records none), so two lambdas on one line differ too.
        for _, _, column, end in code.co_positions():
            if isinstance(column, int) and isinstance(end, int) and end > column:
                return f"@{line}:{column}"
    except Exception:
        pass
    return f"@{line}"


# -- once per tool object ------------------------------------------------------------------

_cache: dict[int, tuple[Any, str | None]] = {}


def origin_of(tool: Any, framework_package: str | None = None) -> str | None:
    """:func:`code_origin` of a framework's tool object, computed once per object.

    ``framework_package`` (``"langchain_core"``): callables and classes from that
    package are the framework's own, not the tool's code, and are looked through.
    """
    key = id(tool)
    entry = _cache.get(key)
    if entry is not None and entry[0]() is tool:
        return entry[1]
    origin = code_origin(tool, framework_package)
    try:
        ref = weakref.ref(tool, functools.partial(_forget, key))
    except TypeError:
        return origin  # not weakly referenceable: read again next time
    _cache[key] = (ref, origin)
    return origin


def _forget(key: int, ref: Any) -> None:
    entry = _cache.get(key)
    if entry is not None and entry[0] is ref:
        _cache.pop(key, None)
