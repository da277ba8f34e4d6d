"""Where breaker state lives.

A store creates breakers. The in-memory store keeps each breaker's state in the
breaker itself (the fastest place); a shared store returns breakers whose
decisions go through a shared server. The registry only talks to this
interface, so the state machine never changes with the store.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Protocol

from otel_breaker.breaker import CircuitBreaker, CircuitBreakerConfig, Clock
from otel_breaker.identity import ToolKey
from otel_breaker.store.memory import MemoryStore

if TYPE_CHECKING:
    from otel_breaker.config import Settings


#: URL schemes of the Redis store: one node (or any Cluster node), Cluster, Sentinel.
REDIS_SCHEMES = (
    "redis://",
    "rediss://",
    "unix://",
    "redis+cluster://",
    "rediss+cluster://",
    "redis+sentinel://",
    "rediss+sentinel://",
)


class BreakerStore(Protocol):
    """Creates the breakers a registry hands out.

    ``identity`` is the tool's identity as the registry keys it (agent name when the
    scope uses it, tool name, where the tool runs): a shared store keys its state
    by exactly that, so every process running the same tool code under the same
    agent name shares one breaker, and same-named tools of different code never do.
    """

    name: str

    # A store written before ``identity`` existed (no such parameter) still works:
    # the registry passes it only to stores that take it.
    def create(
        self,
        tool: str,
        config: CircuitBreakerConfig,
        *,
        clock: Clock | None = None,
        agent_name: str | None = None,
        session_id: str | None = None,
        identity: ToolKey | None = None,
    ) -> CircuitBreaker: ...

    def close(self) -> None: ...


def store_from_url(url: str | None, settings: Settings | None = None) -> BreakerStore:
    """The store for an ``OTEL_BREAKER_STORE`` value (``memory`` or ``redis://...``).

    ``settings`` supplies the Redis prefix and password (default: the process settings).
    Building a Redis store imports redis-py but does not connect.
    """
    if not url or url == "memory":
        return MemoryStore()
    if url.startswith(REDIS_SCHEMES):
        from otel_breaker.store.redis import RedisStore

        if settings is None:
            return RedisStore.from_url(url)
        from urllib.parse import parse_qs, urlsplit

        prefix = parse_qs(urlsplit(url).query).get("prefix", [settings.redis_prefix])[0]
        return RedisStore.from_url(url, prefix=prefix, password=settings.redis_password)
    raise ValueError(
        f"OTEL_BREAKER_STORE={url!r}: expected 'memory' or a redis://, rediss://, unix://, "
        "redis+cluster:// or redis+sentinel:// URL"
    )


def _preload(url: str | None) -> None:
    """Import the Redis store (and redis-py) now, when the environment names one.

    The registry builds its store on the first tool call; importing redis-py
    there would make that call pay for the import (hundreds of milliseconds).
    """
    if url and url.strip().startswith(REDIS_SCHEMES):
        try:
            import otel_breaker.store.redis  # noqa: F401
        except Exception:  # redis-py missing: the store reports it when it is built
            pass


_preload(os.environ.get("OTEL_BREAKER_STORE"))

__all__ = ["BreakerStore", "store_from_url"]
