"""otel-breaker: per-tool circuit breakers for AI agents, visible in OpenTelemetry.

Every tool call passes a per-tool breaker: after repeated failures it opens and
later calls are rejected at once, without running the tool, with a message the
agent loop understands; after a cooldown one probe tests recovery.
"""

from otel_breaker import health as _health
from otel_breaker._version import __version__
from otel_breaker.breaker import (
    PRESETS,
    BreakerStats,
    CircuitBreaker,
    CircuitBreakerConfig,
    CircuitOpenError,
    State,
    StateChange,
)
from otel_breaker.classify import ApprovalDeniedError, PermissionDeniedError
from otel_breaker.config import ConfigError, load_settings
from otel_breaker.degrade import Rejection, set_escalation
from otel_breaker.guard import Guard, ToolTimeoutError, guard
from otel_breaker.loops import ToolLoopError
from otel_breaker.registry import (
    BreakerRegistry,
    breaker_scope,
    get_circuit_breaker,
    release,
    reset_all_circuit_breakers,
)
from otel_breaker.retry_hint import register_retry_hint, unregister_retry_hint
from otel_breaker.toolcall import ToolCall

_health.install()  # a breaker that opens gets its configured health check

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
    "PermissionDeniedError",
    "Rejection",
    "State",
    "StateChange",
    "ToolCall",
    "ToolLoopError",
    "ToolTimeoutError",
    "__version__",
    "breaker_scope",
    "get_circuit_breaker",
    "guard",
    "load_settings",
    "register_retry_hint",
    "release",
    "reset_all_circuit_breakers",
    "set_escalation",
    "unregister_retry_hint",
]
