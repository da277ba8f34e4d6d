"""Where breaker telemetry goes: the tracer, meter and logger providers.

Explicit providers (``telemetry.configure``) win; otherwise the global ones,
once an SDK has set them. Whether any exists is asked on every tool call, so
it is a dict lookup in the API's provider slots (:func:`global_provider_slots`),
never a call into the API. Also here: the recording lock that keeps our SDK
records and span ends out of a fork.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import _logs as logs_api
from opentelemetry import context as context_api
from opentelemetry import metrics as metrics_api
from opentelemetry import trace as trace_api

from otel_breaker import semconv
from otel_breaker.loglines import logger

try:
    from otel_breaker._version import __version__
except ImportError:  # pragma: no cover
    __version__ = "0.0.0"


# -- OpenTelemetry's private internals: the only ones this package reads ---------------------
#
# Both functions below, and nothing else in otel-breaker, read names the OpenTelemetry API
# keeps private. Each stands in for a public call that exists but cannot serve:
#
# * ``opentelemetry.trace._TRACER_PROVIDER``, ``opentelemetry.metrics._internal._METER_PROVIDER``
#   and ``opentelemetry._logs._internal._LOGGER_PROVIDER`` (the ``_internal`` modules are where
#   the metrics and logs APIs keep theirs): the global provider slots. "Has an SDK set a
#   provider?" is asked on every tool call, and the public ``get_*_provider()`` answers with
#   a proxy after reading the environment, far too slow there; a slot is a dict lookup.
# * ``opentelemetry.context._SUPPRESS_INSTRUMENTATION_KEY``: the context key that suppresses
#   instrumentation, read only where opentelemetry-instrumentation (whose public
#   ``is_instrumentation_enabled`` reads the same key) is not installed.
#
# ``tests/test_log_events.py`` checks that the slots still exist and fill, so a renamed one
# fails a test rather than leaving telemetry quiet.


def global_provider_slots() -> tuple[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]]:
    """The OpenTelemetry API's global tracer, meter and logger provider slots.

    The slots are module globals that stay None until an SDK sets a provider (set
    once, never unset), so a lookup in the module's namespace answers. Should a
    future API rename them, each falls back to "always observe".
    """
    from opentelemetry._logs import _internal as logs_internal
    from opentelemetry.metrics import _internal as metrics_internal

    found = []
    for module, slot in (
        (trace_api, "_TRACER_PROVIDER"),
        (metrics_internal, "_METER_PROVIDER"),
        (logs_internal, "_LOGGER_PROVIDER"),
    ):
        names = vars(module)
        if slot in names:
            found.append(names)
        else:  # pragma: no cover - an API that moved its globals
            logger.debug("otel-breaker: %s.%s not found; assuming a provider is set", module.__name__, slot)
            found.append({slot: True})
    return found[0], found[1], found[2]


TRACE_GLOBALS, METRICS_GLOBALS, LOGS_GLOBALS = global_provider_slots()


def suppression_check() -> Callable[[], bool]:
    """``is_instrumentation_enabled`` of opentelemetry-instrumentation (the public
    test every contrib instrumentation honours), imported on first use: it is not
    installed with the API alone, and importing it costs tens of milliseconds."""
    try:
        from opentelemetry.instrumentation.utils import is_instrumentation_enabled
    except ImportError:  # the API alone: only the API's own key can suppress
        from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY

        def is_instrumentation_enabled() -> bool:
            return not context_api.get_value(_SUPPRESS_INSTRUMENTATION_KEY)

    return is_instrumentation_enabled


# -- the providers ----------------------------------------------------------------------------


class Providers:
    """The explicit tracer, meter and logger providers (None: the global one), and the
    tracer and event logger made from them.

    ``read_settings`` is called before the first tracer is made, so the options the
    settings give are in place before any span."""

    def __init__(self, read_settings: Callable[[], None]) -> None:
        self._read_settings = read_settings
        #: The explicit providers; None where the global one is used.
        self.tracer_provider: Any = None
        self.meter_provider: Any = None
        self.logger_provider: Any = None
        #: The tracer once made (by :meth:`tracer`), else None: read on every call.
        self.current_tracer: Any = None
        self._event_logger: Any = None
        # ``explicit`` lives in a slot the call path reads on every call (see watch_slots).
        self._explicit: dict[str, Any] = {"explicit": None}
        #: Whether instrumentation is not suppressed in the current context; the first
        #: call replaces itself with the real check (imported then, see suppression_check).
        self.instrumentation_enabled: Callable[[], bool] = self._first_instrumentation_check

    def _first_instrumentation_check(self) -> bool:
        self.instrumentation_enabled = suppression_check()
        return self.instrumentation_enabled()

    def use(self, tracer_provider: Any = None, meter_provider: Any = None, logger_provider: Any = None) -> None:
        """Use each provider given instead of the global one (None: leave it as it is)."""
        if tracer_provider is not None:
            self.tracer_provider = tracer_provider
            self.current_tracer = None
            self.explicit = True
        if meter_provider is not None:
            self.meter_provider = meter_provider
            self.explicit = True
        if logger_provider is not None:
            self.logger_provider = logger_provider
            self._event_logger = None
            self.explicit = True

    def forget(self) -> None:
        """Back to the global providers."""
        self.tracer_provider = None
        self.current_tracer = None
        self.meter_provider = None
        self.logger_provider = None
        self._event_logger = None
        self.explicit = False

    @property
    def explicit(self) -> bool:
        """True once explicit providers are configured; with no providers at all
        (and no global SDK) the call path skips telemetry entirely."""
        return self._explicit["explicit"] is not None

    @explicit.setter
    def explicit(self, value: bool) -> None:
        self._explicit["explicit"] = True if value else None

    def watch_slots(self) -> tuple[tuple[dict[str, Any], str], ...]:
        """Where a provider appears when one exists: the explicit one, then the global ones."""
        return (
            (self._explicit, "explicit"),
            (TRACE_GLOBALS, "_TRACER_PROVIDER"),
            (METRICS_GLOBALS, "_METER_PROVIDER"),
            (LOGS_GLOBALS, "_LOGGER_PROVIDER"),
        )

    def observing(self) -> bool:
        """Whether any tracer, meter or logger provider exists (explicit or global)."""
        return any(slot.get(name) is not None for slot, name in self.watch_slots())

    def tracer(self) -> Any:
        """The tracer, or None while no tracer provider is configured anywhere."""
        tracer = self.current_tracer
        if tracer is not None:
            return tracer
        provider = self.tracer_provider
        if provider is None:
            if TRACE_GLOBALS.get("_TRACER_PROVIDER", True) is None:
                return None
            provider = trace_api.get_tracer_provider()
        self._read_settings()
        self.current_tracer = provider.get_tracer(semconv.SCOPE_NAME, __version__, schema_url=semconv.SCHEMA_URL)
        return self.current_tracer

    def meter_provider_in_use(self) -> Any:
        """The explicit meter provider, else the global one, or None while none is set."""
        if self.meter_provider is not None:
            return self.meter_provider
        if METRICS_GLOBALS.get("_METER_PROVIDER", True) is None:
            return None
        return metrics_api.get_meter_provider()

    def logs_on(self) -> bool:
        """Whether log-based events have somewhere to go (cheap: two lookups)."""
        return self.logger_provider is not None or LOGS_GLOBALS.get("_LOGGER_PROVIDER") is not None

    def event_logger(self) -> Any:
        """The logger log-based events go to, or None while no logger provider exists."""
        logger_ = self._event_logger
        if logger_ is not None:
            return logger_
        provider = self.logger_provider
        if provider is None:
            if LOGS_GLOBALS.get("_LOGGER_PROVIDER", True) is None:
                return None
            provider = logs_api.get_logger_provider()
        self._event_logger = provider.get_logger(semconv.SCOPE_NAME, __version__, schema_url=semconv.SCHEMA_URL)
        return self._event_logger


# -- the recording lock -----------------------------------------------------------------------


class _Recording:
    """The lock every record into an SDK instrument of ours, and every end of a span of
    ours (which runs the span processors), is made under.

    The SDK's histogram takes a lock of its own (its aggregation's) on every record,
    and it does not re-create it in a forked child: a thread of the parent caught
    inside ``record`` at the fork leaves it held there, and the child's first tool
    call would wait on it forever. So the process holds this lock while it forks
    (``before``): no thread of ours is then inside the SDK's record, and the SDK's
    locks we could have taken are free in the child. Parent and child release it
    after the fork; the child gets a fresh one (the SDK's own export thread is the
    SDK's to make safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: Whether this process holds the lock for a fork in progress, so that it is taken
        #: once and released once. This module may be imported while a fork's ``before``
        #: handlers run (the package's waits for an import of ours another thread is
        #: making): handlers registered then miss that fork's ``before`` but get its
        #: ``after``. The package's ``before`` handler, which runs after this one, then
        #: takes the lock in its place (when this says it is not held), so the fork still
        #: happens with the lock held and the ``after`` handlers release it as usual.
        self.held_for_fork = False

    def before_fork(self) -> None:
        self.lock.acquire()
        self.held_for_fork = True

    def after_fork_in_parent(self) -> None:
        if self.held_for_fork:
            self.held_for_fork = False
            self.lock.release()

    def after_fork_in_child(self) -> None:
        self.lock = threading.Lock()
        self.held_for_fork = False


RECORDING = _Recording()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=RECORDING.before_fork,
        after_in_parent=RECORDING.after_fork_in_parent,
        after_in_child=RECORDING.after_fork_in_child,
    )
