"""The default store: each breaker keeps its own state in process memory."""

from __future__ import annotations

from otel_breaker.breaker import CircuitBreaker, CircuitBreakerConfig, Clock
from otel_breaker.identity import ToolKey


class MemoryStore:
    """Per-process breakers; nothing shared, nothing to fail."""

    name = "memory"

    def create(
        self,
        tool: str,
        config: CircuitBreakerConfig,
        *,
        clock: Clock | None = None,
        agent_name: str | None = None,
        session_id: str | None = None,
        identity: ToolKey | None = None,
    ) -> CircuitBreaker:
        return CircuitBreaker(tool, config, clock=clock, agent_name=agent_name, session_id=session_id)

    def close(self) -> None:
        """Nothing to release."""
