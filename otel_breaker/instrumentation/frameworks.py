"""Which frameworks are patched, or waiting for their import: one registry per process.

:data:`FRAMEWORKS` is driven by both ways in, the switch (:mod:`.autostart`) and
``BreakerInstrumentor`` (:mod:`.instrumentor`), so instrumenting twice patches once. Kept
apart from the package's ``__init__``, which names the instrumentor: the instrumentor
imports this module, not the package, and no import runs in a circle.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from otel_breaker.catalogue import CATALOGUE
from otel_breaker.loglines import logger

if TYPE_CHECKING:
    from otel_breaker.instrumentation.base import FrameworkAdapter


#: identifier -> "module:Class" of its adapter, in the catalogue's order.
ADAPTERS: dict[str, str] = {framework.id: framework.adapter for framework in CATALOGUE}

#: With the switch, an auto-detected framework's adapter is loaded only when one of
#: its catalogue's ``imports`` is imported: importing LangChain does not load the
#: fifteen other adapters.
FRAMEWORK_IMPORTS: dict[str, tuple[str, ...]] = {framework.id: framework.imports for framework in CATALOGUE}


def settings_needed_now(environ: Mapping[str, str] | None = None) -> bool:
    """Whether starting needs the settings: a framework list or a status address asked
    for, or settings made in code. Otherwise they are read at the first tool call (and a
    bad value logged then), so importing a framework loads no configuration machinery:
    the defaults patch every framework and start no server."""
    env = os.environ if environ is None else environ
    asked = any(env.get(f"OTEL_BREAKER_{name}", "").strip() for name in ("FRAMEWORKS", "STATUS_ADDR"))
    return asked or "otel_breaker.config" in sys.modules


def normalize_framework(name: str) -> str:
    """The framework identifier for a user-written name (see :mod:`otel_breaker.config`),
    loading the settings only when a name is given: a framework's import does not."""
    from otel_breaker.config import normalize_framework as normalize

    return normalize(name)


def load_adapter_class(identifier: str) -> type[FrameworkAdapter]:
    module_name, _, class_name = ADAPTERS[identifier].partition(":")
    return getattr(importlib.import_module(module_name), class_name)


class Frameworks:
    """Which frameworks are patched (or waiting for their import), and why not when skipped.

    One per process (:data:`FRAMEWORKS`); ``BreakerInstrumentor`` and the switch
    both drive it, so instrumenting twice patches once."""

    def __init__(self) -> None:
        self._adapters: dict[str, FrameworkAdapter] = {}
        self._status: dict[str, str] = {}
        self._hooked: set[str] = set()
        self._lock = threading.RLock()
        self._lazy = False
        self._watching = False
        #: Set when the switch started it (``BreakerInstrumentor`` then reports itself instrumented).
        self.started_by_switch = False

    def after_fork_in_child(self) -> None:
        """A thread patching a framework (or hooking its import) at the fork holds this
        lock in the child forever (the child has only the forking thread), and the
        child's next instrument, uninstrument or framework import would wait on it: the
        child gets a fresh lock."""
        self._lock = threading.RLock()

    def enable(self, requested: Iterable[str] | None, *, lazy: bool, lenient: bool) -> None:
        """Patch (or, ``lazy``, hook the import of) the frameworks named, or every one
        installed; asking by name for one that is missing raises unless ``lenient``."""
        from otel_breaker.instrumentation.base import DidNotEnable

        explicit = requested is not None
        if requested is None and settings_needed_now():
            from otel_breaker.config import get_settings

            requested = get_settings().frameworks
            explicit = requested is not None
        names = [normalize_framework(n) for n in requested] if requested is not None else list(ADAPTERS)
        self._lazy = lazy
        errors = []
        for name in names:
            if lazy and not explicit:
                self._when_imported(name)
                continue
            try:
                self._enable(name, explicit=explicit)
            except DidNotEnable as exc:
                errors.append(f"{name}: {exc}")
        if errors and explicit and not lenient:
            raise DidNotEnable("; ".join(errors))
        for error in errors:
            logger.error("otel-breaker: framework %s", error)

    def _when_imported(self, name: str) -> None:
        """Load ``name``'s adapter (and hook its patch modules) once its framework is imported."""
        from otel_breaker.instrumentation.post_import import when_imported

        # A hook on a framework that is not installed costs nothing and never fires; whether
        # it is installed is asked only when the status is read (:meth:`status`), not at
        # start, where looking for twenty packages on the path costs milliseconds.
        tops = FRAMEWORK_IMPORTS.get(name, ())
        with self._lock:
            self._watching = True
            self._status.setdefault(name, "waiting for import")
            if name in self._adapters or f"{name}:*" in self._hooked:
                return
            self._hooked.add(f"{name}:*")

        def on_import(module: Any, name: str = name) -> None:
            if not self._watching:  # uninstrumented since
                return
            try:
                self._enable(name, explicit=False)
            except Exception:
                logger.exception("otel-breaker: enabling %s failed; its tools run unguarded", name)

        for top in tops:
            when_imported(top, on_import)

    def disable(self) -> None:
        with self._lock:
            for adapter in self._adapters.values():
                adapter.unpatch()
            self._adapters.clear()
            self._status.clear()
            self.started_by_switch = False
            self._watching = False

    # -- per framework ----------------------------------------------------------------------

    def _enable(self, name: str, explicit: bool) -> None:
        from otel_breaker.instrumentation.base import DidNotEnable

        with self._lock:
            if name in self._adapters:
                return
            try:
                adapter_class = load_adapter_class(name)
            except ImportError as exc:
                raise DidNotEnable(f"adapter failed to load: {exc}") from exc
            adapter = adapter_class()
            if adapter.installed_version() is None:
                self._status[name] = f"skipped: {adapter.distribution} is not installed"
                if explicit:
                    raise DidNotEnable(f"{adapter.distribution} is not installed")
                return
            self._adapters[name] = adapter
            if self._lazy:
                self._register_hooks(name, adapter)
                self._status[name] = "waiting for import"
            else:
                self._patch_now(name, adapter, explicit)

    def _patch_now(self, name: str, adapter: FrameworkAdapter, explicit: bool) -> None:
        from otel_breaker.instrumentation.base import DidNotEnable

        try:
            version = adapter.check_version()
        except DidNotEnable as exc:
            self._status[name] = f"skipped: {exc}"
            self._adapters.pop(name, None)
            logger.warning("otel-breaker: %s", exc)
            if explicit:
                raise
            return
        skipped = adapter.patch()
        patched = list(adapter.patched())
        self._status[name] = f"active ({adapter.distribution} {version}): {len(patched)} patch points" + (
            f"; skipped {len(skipped)}: {'; '.join(skipped)}" if skipped else ""
        )

    def _register_hooks(self, name: str, adapter: FrameworkAdapter) -> None:
        from otel_breaker.instrumentation.post_import import when_imported

        modules = sorted({target_module for target_module in target_modules(adapter)})
        for module_name in modules:
            key = f"{name}:{module_name}"
            if key in self._hooked:
                continue
            self._hooked.add(key)

            def on_import(module: Any, name: str = name, module_name: str = module_name) -> None:
                self._on_import(name, module_name)

            when_imported(module_name, on_import)

    def _on_import(self, name: str, module_name: str) -> None:
        with self._lock:
            adapter = self._adapters.get(name)
            if adapter is None:
                return
            from otel_breaker.instrumentation.base import DidNotEnable

            try:
                version = adapter.check_version()
            except DidNotEnable as exc:
                if not self._status.get(name, "").startswith("skipped"):
                    logger.warning("otel-breaker: %s", exc)
                self._status[name] = f"skipped: {exc}"
                return
            try:
                skipped = adapter.patch_module(module_name)
            except Exception:
                logger.exception("otel-breaker: patching %s failed; its tools run unguarded", name)
                return
            patched = list(adapter.patched())
            self._status[name] = f"active ({adapter.distribution} {version}): {len(patched)} patch points" + (
                f"; skipped: {'; '.join(skipped)}" if skipped else ""
            )

    # -- views ------------------------------------------------------------------------------------

    def status(self) -> dict[str, str]:
        """Per framework: active (with patch points), waiting for import, or skipped and why."""
        with self._lock:
            status = dict(self._status)
        for name, text in status.items():
            if text == "waiting for import" and not any(findable(top) for top in FRAMEWORK_IMPORTS.get(name, ())):
                status[name] = "skipped: not installed"
        return status

    def adapters(self) -> dict[str, FrameworkAdapter]:
        with self._lock:
            return dict(self._adapters)


def findable(module: str) -> bool:
    """Whether ``module`` is installed (its parent package is imported to look, never it)."""
    import importlib.util

    if module in sys.modules:
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def target_modules(adapter: FrameworkAdapter) -> Iterable[str]:
    """The modules whose import patches ``adapter``'s targets: those it names, and every
    module one of its targets lives in (a target outside the named ones would otherwise
    stay unpatched when the switch starts it, though an explicit instrument() patches it)."""
    return [*adapter.modules, *(target.module for target in adapter.targets())]


FRAMEWORKS = Frameworks()

if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=FRAMEWORKS.after_fork_in_child)
