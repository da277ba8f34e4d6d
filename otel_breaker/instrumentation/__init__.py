"""Zero-code instrumentation: every tool call of every supported framework guarded.

``BreakerInstrumentor`` is an OpenTelemetry ``BaseInstrumentor`` (entry point
``otel_breaker``), so ``opentelemetry-instrument python app.py`` loads it and
``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=otel_breaker`` switches it off. Without
a launcher, ``OTEL_BREAKER_ENABLED=true`` does the same through the ``.pth``
start-up hook.

Adapters are listed by import string and loaded lazily: no framework is
imported by us. A framework that is missing or outside its tested version
range is skipped quietly when auto-detected, and is an error when asked for by
name (``OTEL_BREAKER_FRAMEWORKS``).
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Collection, Iterable
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

from otel_breaker import config
from otel_breaker.instrumentation.base import DidNotEnable, FrameworkAdapter

logger = logging.getLogger("otel_breaker")

#: identifier -> "module:Class" of its adapter (one per ``config.FRAMEWORKS``).
ADAPTERS: dict[str, str] = {
    "langchain": "otel_breaker.instrumentation.langchain:LangChainAdapter",
    "openai_agents": "otel_breaker.instrumentation.openai_agents:OpenAIAgentsAdapter",
    "pydantic_ai": "otel_breaker.instrumentation.pydantic_ai:PydanticAIAdapter",
    "llama_index": "otel_breaker.instrumentation.llama_index:LlamaIndexAdapter",
    "smolagents": "otel_breaker.instrumentation.smolagents:SmolagentsAdapter",
    "crewai": "otel_breaker.instrumentation.crewai:CrewAIAdapter",
    "autogen": "otel_breaker.instrumentation.autogen:AutoGenAdapter",
    "praisonai": "otel_breaker.instrumentation.praisonai:PraisonAIAdapter",
    "mcp": "otel_breaker.instrumentation.mcp:MCPAdapter",
    "agno": "otel_breaker.instrumentation.agno:AgnoAdapter",
    "dspy": "otel_breaker.instrumentation.dspy:DSPyAdapter",
    "haystack": "otel_breaker.instrumentation.haystack:HaystackAdapter",
    "fastmcp": "otel_breaker.instrumentation.fastmcp:FastMCPAdapter",
    "google_adk": "otel_breaker.instrumentation.google_adk:GoogleADKAdapter",
    "strands": "otel_breaker.instrumentation.strands:StrandsAdapter",
    "agent_framework": "otel_breaker.instrumentation.agent_framework:AgentFrameworkAdapter",
    "semantic_kernel": "otel_breaker.instrumentation.semantic_kernel:SemanticKernelAdapter",
}


def normalize_framework(name: str) -> str:
    """The adapter identifier for a user-written framework name (ValueError naming the allowed ones)."""
    return config.normalize_framework(name)


def load_adapter_class(identifier: str) -> type[FrameworkAdapter]:
    module_name, _, class_name = ADAPTERS[identifier].partition(":")
    return getattr(importlib.import_module(module_name), class_name)


class BreakerInstrumentor(BaseInstrumentor):
    """Guards the tool calls of every supported agent framework."""

    def __init__(self) -> None:
        # BaseInstrumentor is a singleton; keep state across calls.
        if not hasattr(self, "_adapters"):
            self._adapters: dict[str, FrameworkAdapter] = {}
            self._status: dict[str, str] = {}
            self._hooked: set[str] = set()
            self._lock = threading.RLock()
            self._lazy = False

    def instrumentation_dependencies(self) -> Collection[str]:
        """Every framework's tested requirement, read from its adapter (the one
        source the pyproject ``instruments-any`` extra and doctor agree with).

        Any one of them is enough, the contrib ``_instruments_any`` convention:
        see :meth:`_check_dependency_conflicts`."""
        from otel_breaker.instrumentation.spec import instruments_any

        return tuple(instruments_any())

    def _check_dependency_conflicts(self) -> Any:
        """A conflict only when none of the frameworks is installed in its tested range.

        ``BaseInstrumentor`` reads ``instrumentation_dependencies()`` as "all
        required"; like contrib's ``_instruments_any`` instrumentations, ours needs
        one. A framework that is absent or out of range is then skipped by its own
        adapter, so instrumenting with only some frameworks installed works.
        """
        from opentelemetry.instrumentation.dependencies import get_dependency_conflicts

        requirements = self.instrumentation_dependencies()
        try:
            return get_dependency_conflicts((), requirements)
        except TypeError:  # opentelemetry-instrumentation before "instruments-any"
            conflicts = [get_dependency_conflicts([r]) for r in requirements]
            return None if any(c is None for c in conflicts) else next(iter(conflicts), None)

    def instrument(self, **kwargs: Any) -> Any:
        """``BaseInstrumentor.instrument``; frameworks named with ``frameworks=``
        skip the any-of check, since each is checked by name (a missing one raises
        :class:`DidNotEnable` saying which)."""
        if kwargs.get("frameworks") is not None:
            kwargs.setdefault("skip_dep_check", True)
        return super().instrument(**kwargs)

    # -- BaseInstrumentor ---------------------------------------------------------------

    def _instrument(self, **kwargs: Any) -> None:
        """Options: ``tracer_provider``, ``meter_provider``, ``frameworks`` (names;
        asking for a missing one raises), ``lazy`` (patch on import, the default
        when started from the environment)."""
        from otel_breaker import status_server, telemetry
        from otel_breaker.config import get_settings

        status_server.start_from_settings()  # OTEL_BREAKER_STATUS_ADDR, if set; never raises
        if not kwargs.get("lazy", False):
            from otel_breaker.instrumentation import autostart

            if autostart.launched_by_opentelemetry_instrument():
                autostart.after_launcher()  # no opentelemetry-distro: nothing else sets the SDK up
        tracer_provider = kwargs.get("tracer_provider")
        meter_provider = kwargs.get("meter_provider")
        if tracer_provider is not None or meter_provider is not None:
            telemetry.configure(tracer_provider, meter_provider)
        requested = kwargs.get("frameworks")
        explicit = requested is not None
        if requested is None:
            requested = get_settings().frameworks
            explicit = requested is not None
        names = [normalize_framework(n) for n in requested] if requested is not None else list(ADAPTERS)
        self._lazy = bool(kwargs.get("lazy", False))
        errors = []
        for name in names:
            try:
                self._enable(name, explicit=explicit)
            except DidNotEnable as exc:
                errors.append(f"{name}: {exc}")
        if errors and explicit and not kwargs.get("lenient", False):
            raise DidNotEnable("; ".join(errors))
        for error in errors:
            logger.error("otel-breaker: framework %s", error)

    def _uninstrument(self, **kwargs: Any) -> None:
        with self._lock:
            for adapter in self._adapters.values():
                adapter.unpatch()
            self._adapters.clear()
            self._status.clear()

    # -- per framework ----------------------------------------------------------------------

    def _enable(self, name: str, explicit: bool) -> None:
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
        import wrapt

        modules = sorted({target_module for target_module in _target_modules(adapter)})
        for module_name in modules:
            key = f"{name}:{module_name}"
            if key in self._hooked:
                continue
            self._hooked.add(key)

            def on_import(module: Any, name: str = name, module_name: str = module_name) -> None:
                self._on_import(name, module_name)

            wrapt.register_post_import_hook(on_import, module_name)

    def _on_import(self, name: str, module_name: str) -> None:
        with self._lock:
            adapter = self._adapters.get(name)
            if adapter is None:
                return
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
            return dict(self._status)

    def adapters(self) -> dict[str, FrameworkAdapter]:
        with self._lock:
            return dict(self._adapters)


def _target_modules(adapter: FrameworkAdapter) -> Iterable[str]:
    if adapter.modules:
        return adapter.modules
    return [target.module for target in adapter.targets()]


__all__ = ["ADAPTERS", "BreakerInstrumentor", "DidNotEnable", "FrameworkAdapter", "normalize_framework"]
