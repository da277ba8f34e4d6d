"""The two things patching a framework at its import needs, kept light.

Adapters patch a framework while it is being imported, so whatever patching
loads is paid by that import. ``wrapt`` 2.x loads ``asyncio`` and
``importlib.metadata`` with its package, and ``importlib.metadata`` loads
``zipfile``, ``email`` and ``csv``: together tens of milliseconds for a
framework (LangChain's core) that needs none of them. So:

* :func:`make_wrapper` wraps a plain function, coroutine function, static or
  class method with an ordinary function calling
  ``wrapper(wrapped, instance, args, kwargs)`` exactly as
  ``wrapt.FunctionWrapper`` would (the bound method and its instance for a
  method, whether reached through an instance or the class). It keeps the
  original's name, docstring, signature (``__wrapped__``) and whether it is a
  coroutine function. Anything else (generators, callable objects, builtins)
  still gets a ``wrapt.FunctionWrapper``.
* :func:`distribution_version` reads the version from the name of the
  ``.dist-info`` (or ``.egg-info``) entry in the directories on ``sys.path``
  (what ``importlib.metadata.version`` finds first), and asks
  ``importlib.metadata`` only when ``sys.path`` holds an archive (a zip, an egg).
"""

from __future__ import annotations

import functools
import operator
import os
import re
import sys
from collections.abc import Callable
from types import FunctionType, MethodType
from typing import Any

Wrapper = Callable[[Any, Any, tuple, dict], Any]

_CO_COROUTINE = 0x80
_CO_GENERATOR = 0x20
_CO_ASYNC_GENERATOR = 0x200


def make_wrapper(original: Any, wrapper: Wrapper, *, on_class: bool) -> Any:
    """What replaces ``original`` (found in a class's ``__dict__`` when ``on_class``,
    else a module attribute) so that each call runs ``wrapper``."""
    if isinstance(original, staticmethod | classmethod):
        func = original.__func__
        if not _plain(func):
            return type(original)(_wrapt_wrapper(func, wrapper))
        if isinstance(original, staticmethod):
            return staticmethod(_function_wrapper(func, wrapper))
        return classmethod(_classmethod_wrapper(func, wrapper))
    if not _plain(original):
        return _wrapt_wrapper(original, wrapper)
    if on_class:
        return _method_wrapper(original, wrapper)
    return _function_wrapper(original, wrapper)


def _plain(func: Any) -> bool:
    """A Python function that is neither a generator nor an async generator."""
    if type(func) is not FunctionType:
        return False
    return not func.__code__.co_flags & (_CO_GENERATOR | _CO_ASYNC_GENERATOR)


def _is_coroutine(func: FunctionType) -> bool:
    return bool(func.__code__.co_flags & _CO_COROUTINE)


def _wrapt_wrapper(original: Any, wrapper: Wrapper) -> Any:
    import wrapt

    return wrapt.FunctionWrapper(original, wrapper)


def _function_wrapper(func: FunctionType, wrapper: Wrapper) -> Any:
    if _is_coroutine(func):

        async def call_async(*args: Any, **kwargs: Any) -> Any:
            return await wrapper(func, None, args, kwargs)

        return functools.wraps(func)(call_async)

    def call(*args: Any, **kwargs: Any) -> Any:
        return wrapper(func, None, args, kwargs)

    return functools.wraps(func)(call)


def _method_wrapper(func: FunctionType, wrapper: Wrapper) -> Any:
    if _is_coroutine(func):

        async def method_async(self: Any, /, *args: Any, **kwargs: Any) -> Any:
            return await wrapper(MethodType(func, self), self, args, kwargs)

        return functools.wraps(func)(method_async)

    def method(self: Any, /, *args: Any, **kwargs: Any) -> Any:
        return wrapper(MethodType(func, self), self, args, kwargs)

    return functools.wraps(func)(method)


def _classmethod_wrapper(func: FunctionType, wrapper: Wrapper) -> Any:
    if _is_coroutine(func):

        async def bound_async(cls: Any, /, *args: Any, **kwargs: Any) -> Any:
            return await wrapper(MethodType(func, cls), cls, args, kwargs)

        return functools.wraps(func)(bound_async)

    def bound(cls: Any, /, *args: Any, **kwargs: Any) -> Any:
        return wrapper(MethodType(func, cls), cls, args, kwargs)

    return functools.wraps(func)(bound)


# -- versions ------------------------------------------------------------------------------------

_index: dict[str, str] | None = None
_archives = False  # a sys.path entry that is a file (a zip, an egg): only importlib.metadata reads it


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _egg_info_version(path: str) -> str | None:
    try:
        with open(os.path.join(path, "PKG-INFO"), encoding="utf-8", errors="replace") as file:
            for line in file:
                if line.startswith("Version:"):
                    return line.partition(":")[2].strip() or None
                if not line.strip():
                    break
    except OSError:
        pass
    return None


def _dist_info_index() -> dict[str, str]:
    """Normalized project name -> version, from the ``.dist-info`` and ``.egg-info``
    entries of the directories on ``sys.path`` (the first of a name wins, as in
    ``importlib.metadata``)."""
    global _index, _archives
    if _index is None:
        index: dict[str, str] = {}
        for entry in sys.path:
            try:
                names = os.listdir(entry or ".")
            except NotADirectoryError:
                _archives = True
                continue
            except OSError:
                continue
            for name in names:
                stem, dot, suffix = name.rpartition(".")
                if not dot or suffix not in ("dist-info", "egg-info"):
                    continue
                project, _, version = stem.partition("-")
                if suffix == "dist-info" or not version:
                    project, _, version = stem.rpartition("-") if "-" in stem else (stem, "", "")
                else:  # name-version[-pyX.Y].egg-info
                    version = version.split("-py", 1)[0]
                if not version:
                    version = _egg_info_version(os.path.join(entry or ".", name)) or ""
                if project and version:
                    index.setdefault(_normalized(project), version)
        _index = index
    return _index


def distribution_version(distribution: str) -> str | None:
    """The installed version of ``distribution``, or None when it is not installed."""
    version = _dist_info_index().get(_normalized(distribution))
    if version is not None or not _archives:
        return version
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


_RELEASE = re.compile(r"\d+(?:\.\d+)*")
_CLAUSE = re.compile(r"(>=|<=|==|!=|<|>)(\d+(?:\.\d+)*)")
_COMPARE = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    ">": operator.gt,
}


def _release(text: str, width: int) -> tuple[int, ...]:
    parts = [int(part) for part in text.split(".")]
    return tuple(parts + [0] * (width - len(parts)))


def version_in_range(version: str, specifiers: str) -> bool:
    """Whether ``version`` satisfies the PEP 440 ``specifiers`` (``">=1.2,<2"``).

    A plain release (``1.15.2``) against clauses of plain releases, the shape of every
    tested range, is compared as numbers: ``packaging`` costs a framework's import
    milliseconds. Anything else (a pre-release, ``~=``, a wildcard) asks ``packaging``.
    """
    clauses = [_CLAUSE.fullmatch(part.replace(" ", "")) for part in specifiers.split(",") if part.strip()]
    if _RELEASE.fullmatch(version) and clauses and all(clauses):
        width = max(version.count("."), *(c.group(2).count(".") for c in clauses)) + 1  # type: ignore[union-attr]
        have = _release(version, width)
        return all(_COMPARE[c.group(1)](have, _release(c.group(2), width)) for c in clauses)  # type: ignore[union-attr]
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    return Version(version) in SpecifierSet(specifiers)
