"""The default store: each breaker keeps its own state in process memory."""

from __future__ import annotations

from otel_breaker.breaker import CircuitBreaker, CircuitBreakerConfig, Clock


class MemoryStore:
    """Per-process breakers; nothing shared, nothing to fail."""

    name = "memory"

    def create(
        self,
        key: str,
        config: CircuitBreakerConfig,
        *,
        clock: Clock | None = None,
        agent_name: str | None = None,
        session_id: str | None = None,
    ) -> CircuitBreaker:
        return CircuitBreaker(key, config, clock=clock, agent_name=agent_name, session_id=session_id)

    def close(self) -> None:
        """Nothing to release."""
