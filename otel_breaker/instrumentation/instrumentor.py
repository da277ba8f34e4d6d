"""``BreakerInstrumentor``: the OpenTelemetry ``BaseInstrumentor`` of otel-breaker.

The entry point ``otel_breaker`` of ``opentelemetry_instrumentor`` names it, so
``opentelemetry-instrument`` loads it, and code can call ``instrument()`` and
``uninstrument()`` as with any contrib instrumentation. Which frameworks are
patched is kept in :data:`otel_breaker.instrumentation.FRAMEWORKS`, shared with
the ``OTEL_BREAKER_ENABLED`` switch, which does not load this module (importing
``BaseInstrumentor`` costs tens of milliseconds).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

from otel_breaker.instrumentation.base import FrameworkAdapter
from otel_breaker.instrumentation.frameworks import ADAPTERS, FRAMEWORKS, load_adapter_class


def requirements() -> dict[str, str]:
    """Adapter identifier -> tested requirement, for every registered adapter
    (imports our adapter modules, never a framework)."""
    from otel_breaker.instrumentation.spec import requirement_of

    return {name: requirement_of(load_adapter_class(name)) for name in ADAPTERS}


def instruments_any() -> list[str]:
    """What the instrumentor instruments, in the contrib ``_instruments_any``
    convention: any one of these installed is enough."""
    return list(dict.fromkeys(requirements().values()))


class BreakerInstrumentor(BaseInstrumentor):
    """Guards the tool calls of every supported agent framework."""

    def __init__(self) -> None:
        # BaseInstrumentor is a singleton: the switch may have started the frameworks already.
        if FRAMEWORKS.started_by_switch and not self._is_instrumented_by_opentelemetry:
            self._is_instrumented_by_opentelemetry = True

    def instrumentation_dependencies(self) -> Collection[str]:
        """Every framework's tested requirement, read from its adapter (the one
        source the pyproject ``instruments-any`` extra and doctor agree with).

        Any one of them is enough, the contrib ``_instruments_any`` convention:
        see :meth:`_check_dependency_conflicts`."""
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

        status_server.start_from_settings()  # OTEL_BREAKER_STATUS_ADDR, if set; never raises
        if not kwargs.get("lazy", False):
            from otel_breaker.instrumentation import autostart

            if autostart.launched_by_opentelemetry_instrument():
                autostart.after_launcher()  # no opentelemetry-distro: nothing else sets the SDK up
        tracer_provider = kwargs.get("tracer_provider")
        meter_provider = kwargs.get("meter_provider")
        if tracer_provider is not None or meter_provider is not None:
            telemetry.configure(tracer_provider, meter_provider)
        FRAMEWORKS.enable(
            kwargs.get("frameworks"), lazy=bool(kwargs.get("lazy", False)), lenient=bool(kwargs.get("lenient", False))
        )

    def _uninstrument(self, **kwargs: Any) -> None:
        FRAMEWORKS.disable()

    # -- views ------------------------------------------------------------------------------------

    def status(self) -> dict[str, str]:
        """Per framework: active (with patch points), waiting for import, or skipped and why."""
        return FRAMEWORKS.status()

    def adapters(self) -> dict[str, FrameworkAdapter]:
        return FRAMEWORKS.adapters()
