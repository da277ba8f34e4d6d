"""Zero-code instrumentation: every tool call of every supported framework guarded.

``BreakerInstrumentor`` is an OpenTelemetry ``BaseInstrumentor`` (entry point
``otel_breaker``), so ``opentelemetry-instrument python app.py`` loads it and
``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=otel_breaker`` switches it off. Without
a launcher, ``OTEL_BREAKER_ENABLED=true`` does the same through the ``.pth``
start-up hook.

Adapters are listed by import string and loaded lazily: no framework is
imported by us. The switch's path (:mod:`.autostart`) registers the post-import
hooks through :data:`FRAMEWORKS` without loading ``BaseInstrumentor`` (its
dependency checks and semantic-convention helpers cost tens of milliseconds of
a framework's import); ``BreakerInstrumentor`` is loaded when first named.
A framework that is missing or outside its tested version range is skipped
quietly when auto-detected, and is an error when asked for by name
(``OTEL_BREAKER_FRAMEWORKS``).
"""

from __future__ import annotations

from typing import Any

from otel_breaker.instrumentation.frameworks import (  # noqa: F401 - the package's names
    ADAPTERS,
    FRAMEWORK_IMPORTS,
    FRAMEWORKS,
    Frameworks,
    findable,
    load_adapter_class,
    normalize_framework,
    settings_needed_now,
    target_modules,
)


def __getattr__(name: str) -> Any:
    """``BreakerInstrumentor`` (the entry point), ``DidNotEnable`` and ``FrameworkAdapter``, loaded on first use."""
    if name == "BreakerInstrumentor":
        from otel_breaker.instrumentation.instrumentor import BreakerInstrumentor

        return BreakerInstrumentor
    if name in ("DidNotEnable", "FrameworkAdapter"):
        from otel_breaker.instrumentation import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ADAPTERS", "FRAMEWORKS", "BreakerInstrumentor", "DidNotEnable", "FrameworkAdapter", "normalize_framework"]
