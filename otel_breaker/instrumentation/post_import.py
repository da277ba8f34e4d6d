"""Run a callback right after a module is first imported (a post-import hook).

Patching a framework when it is imported needs one finder in front of the
import system that wraps the loader of the few modules asked for. ``wrapt``
has one, but importing ``wrapt`` 2.x loads ``asyncio`` and
``importlib.metadata`` (tens of milliseconds that a framework's import would
pay with the switch on), so this stdlib-only one is used: the same contract as
``wrapt.register_post_import_hook`` (a module already imported gets its hooks
at once; otherwise each hook runs once, after the module's code has run and
before its importer sees it).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

Hook = Callable[[ModuleType], Any]

_hooks: dict[str, list[Hook]] = {}
_lock = threading.RLock()
_finder: _PostImportFinder | None = None


def _reinit_after_fork() -> None:
    """A thread registering a hook, or importing a hooked module, at the fork holds this
    lock in the child forever (the child has only the forking thread), and the child's
    next import of a hooked module would wait on it: the child gets a fresh lock."""
    global _lock
    _lock = threading.RLock()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_reinit_after_fork)


def when_imported(name: str, hook: Hook) -> None:
    """Call ``hook(module)`` once ``name`` is imported (now, if it already is)."""
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            _hooks.setdefault(name, []).append(hook)
            _install()
    if module is not None:  # outside the lock: the hook may import (and register) in turn
        hook(module)


def _install() -> None:
    global _finder
    if _finder is None:
        _finder = _PostImportFinder()
        sys.meta_path.insert(0, _finder)


def _notify(module: ModuleType) -> None:
    with _lock:
        hooks = _hooks.pop(getattr(module, "__name__", ""), ())
    for hook in hooks:
        hook(module)


class _PostImportFinder:
    """Finds nothing itself: for a module with hooks it asks the rest of the import
    system for the spec and wraps the loader, so the hooks run after the module."""

    def __init__(self) -> None:
        self._finding: set[str] = set()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in _hooks or fullname in self._finding:
            return None
        self._finding.add(fullname)  # the nested search below must pass this finder
        try:
            from importlib.util import find_spec

            spec = find_spec(fullname)
        finally:
            self._finding.discard(fullname)
        loader = getattr(spec, "loader", None)
        if loader is not None and hasattr(loader, "exec_module") and not isinstance(loader, _NotifyingLoader):
            spec.loader = _NotifyingLoader(loader)
        return spec


class _NotifyingLoader:
    """The module's own loader, which runs the hooks once the module has executed.

    The module's ``__loader__`` and ``__spec__.loader`` are set back to the real
    loader before its code runs, so nothing the module (or a tool reading it)
    sees is ours."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)

    def create_module(self, spec: Any) -> Any:
        create = getattr(self.loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        if getattr(module, "__loader__", None) in (None, self):
            try:
                module.__loader__ = self.loader
            except AttributeError:
                pass
        spec = getattr(module, "__spec__", None)
        if spec is not None and getattr(spec, "loader", None) is self:
            spec.loader = self.loader
        self.loader.exec_module(module)
        _notify(module)
