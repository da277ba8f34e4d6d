"""otel-breaker: per-tool circuit breakers for AI agents, visible in OpenTelemetry.

Every tool call passes a per-tool breaker: after repeated failures it opens and
later calls are rejected at once, without running the tool, with a message the
agent loop understands; after a cooldown one probe tests recovery.
"""

import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

from otel_breaker import loglines  # noqa: F401 - every line of our log bounded from the package's import on
from otel_breaker._version import __version__

if TYPE_CHECKING:
    from otel_breaker.breaker import (
        PRESETS,
        BreakerStats,
        CircuitBreaker,
        CircuitBreakerConfig,
        CircuitOpenError,
        State,
        StateChange,
    )
    from otel_breaker.call_steps import OutcomeUnknownError
    from otel_breaker.classify import ApprovalDeniedError, PermissionDeniedError
    from otel_breaker.config import ConfigError, load_settings
    from otel_breaker.degrade import Rejection, set_escalation
    from otel_breaker.effects import register_tool_effects
    from otel_breaker.guards import Guard, ToolTimeoutError, guard
    from otel_breaker.identity import ToolKey, code_origin
    from otel_breaker.loops import RepeatedCallError, ToolLoopError
    from otel_breaker.registry import (
        BreakerRegistry,
        breaker_scope,
        get_circuit_breaker,
        release,
        reset_all_circuit_breakers,
    )
    from otel_breaker.retry_hint import register_retry_hint, unregister_retry_hint
    from otel_breaker.run_budget import RunBudgetError
    from otel_breaker.runs import run
    from otel_breaker.toolcall import ToolCall, agent_scope

# The other public names, each loaded from its module on first use: ``OTEL_BREAKER_ENABLED``
# imports this package when a framework is imported, and a framework's import must
# not pay for what no tool call needs (health checks, rejection texts, fallbacks).
_LAZY = {
    **dict.fromkeys(("Guard", "ToolTimeoutError", "guard"), "otel_breaker.guards"),
    **dict.fromkeys(
        ("PRESETS", "BreakerStats", "CircuitBreaker", "CircuitBreakerConfig", "CircuitOpenError", "State"),
        "otel_breaker.breaker",
    ),
    "StateChange": "otel_breaker.breaker",
    "OutcomeUnknownError": "otel_breaker.call_steps",
    "register_tool_effects": "otel_breaker.effects",
    "ApprovalDeniedError": "otel_breaker.classify",
    "PermissionDeniedError": "otel_breaker.classify",
    "ConfigError": "otel_breaker.config",
    "load_settings": "otel_breaker.config",
    "Rejection": "otel_breaker.degrade",
    "set_escalation": "otel_breaker.degrade",
    **dict.fromkeys(
        ("BreakerRegistry", "breaker_scope", "get_circuit_breaker", "release", "reset_all_circuit_breakers"),
        "otel_breaker.registry",
    ),
    "ToolCall": "otel_breaker.toolcall",
    "agent_scope": "otel_breaker.toolcall",
    "ToolLoopError": "otel_breaker.loops",
    "RepeatedCallError": "otel_breaker.loops",
    "run": "otel_breaker.runs",
    "RunBudgetError": "otel_breaker.run_budget",
    "register_retry_hint": "otel_breaker.retry_hint",
    "unregister_retry_hint": "otel_breaker.retry_hint",
    "ToolKey": "otel_breaker.identity",
    "code_origin": "otel_breaker.identity",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'otel_breaker' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


#: The module whose import loads the whole call path (the guard, the call path and its steps).
_CALL_PATH = "otel_breaker.guards"


def _finish_our_imports_before_fork() -> None:
    """Load the call path, and wait for every module of ours another thread is importing,
    in the forking thread.

    A module another thread is importing at the fork stays half-imported in the child,
    its import lock held forever by a thread the child does not have, and the child's
    first use of it waits on that lock. A breaker's calls import nothing, but a
    framework's adapter loads the call path at the framework's first tool call, in
    whatever thread makes it (a framework's import must not pay for it). That import
    holds its module lock while it finds and compiles the module, before the module
    shows in ``sys.modules``: a scan of ``sys.modules`` alone misses it, and a thread may
    also start it after any scan. Importing the call path here closes both gaps: it
    waits for a thread's import of it to end (whatever stage it is at), or makes the
    import itself; once it is loaded, no call imports it again. Importing a module
    another thread is importing waits for that import to end; one the forking thread
    itself is importing is handed back at once."""
    try:
        importlib.import_module(_CALL_PATH)
    except Exception:  # the fork goes ahead whatever happened here
        pass
    for name, module in list(sys.modules.items()):
        if not name.startswith("otel_breaker") or module is None:
            continue
        if getattr(getattr(module, "__spec__", None), "_initializing", False):
            try:
                importlib.import_module(name)
            except Exception:  # the fork goes ahead whatever happened here
                pass
    _hold_recording_for_fork()


def _hold_recording_for_fork() -> None:
    """Take the telemetry's recording lock for the fork if its own handler did not.

    Its module may have been imported just now, by the call path's import above or by a
    thread's import waited for: a handler registered while a fork's ``before`` handlers
    run is not run for that fork (its ``after`` handlers are). The threads that waited
    for that import are making calls by now, perhaps inside the SDK's locks, which this
    lock keeps them out of while the process forks."""
    providers = sys.modules.get("otel_breaker.telemetry.providers")
    recording = getattr(providers, "RECORDING", None)
    if recording is not None and not recording.held_for_fork:
        recording.before_fork()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(before=_finish_our_imports_before_fork)


__all__ = [
    "PRESETS",
    "ApprovalDeniedError",
    "BreakerRegistry",
    "BreakerStats",
    "CircuitBreaker",
    "CircuitBreakerConfig",
    "CircuitOpenError",
    "ConfigError",
    "Guard",
    "OutcomeUnknownError",
    "PermissionDeniedError",
    "Rejection",
    "RepeatedCallError",
    "RunBudgetError",
    "State",
    "StateChange",
    "ToolCall",
    "ToolKey",
    "ToolLoopError",
    "ToolTimeoutError",
    "__version__",
    "agent_scope",
    "breaker_scope",
    "code_origin",
    "get_circuit_breaker",
    "guard",
    "load_settings",
    "register_retry_hint",
    "register_tool_effects",
    "release",
    "reset_all_circuit_breakers",
    "run",
    "set_escalation",
    "unregister_retry_hint",
]
