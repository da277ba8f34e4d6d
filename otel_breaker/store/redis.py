"""Breakers shared by every worker through Redis (Redis 7+ or Valkey; one node, Cluster or Sentinel).

``OTEL_BREAKER_STORE=redis://host:6379/0`` (``rediss://`` for TLS) makes every
breaker one shared breaker per tool across all processes and hosts. The URL of
any Cluster node works (the store asks ``INFO cluster`` once and then uses
``RedisCluster``); ``redis+cluster://`` names a Cluster explicitly and
``redis+sentinel://host:26379/service`` follows Sentinel's primary. In code,
``RedisStore(redis.Redis(...))``, ``RedisStore(redis.cluster.RedisCluster(...))``
or an asyncio client.

The parts live in their own modules: ``redis_setup`` (URLs and clients),
``redis_storage`` (the storage a ``CircuitBreaker`` delegates to: the
script's calls and the local mirror), ``redis_store`` (the store), ``redis_feed``
(the change feed) and ``redis_admin`` (what the command line reads); this
module keeps the public names in one place.

How a decision is made:

* every decision (acquire, record, transition, manual control) is one Lua
  script run with EVALSHA (redis-py's ``register_script``, loaded again after
  NOSCRIPT), on the server's clock
  (``TIME``): the workers' clocks never take part, so clock skew between hosts
  does not matter. Each worker maps a reply's *remaining* cooldown onto its own
  monotonic clock;
* closed and proven healthy (the last outcome was a success): ``acquire`` is
  local and ``record`` is the one round-trip of a call;
* open with a known retry-after: calls are rejected locally, no round-trip,
  until that moment;
* half-open: exactly ``half_open_max_calls`` probes across all workers, each
  holding a lease that expires (``timeout``, else 60 s), so a worker that dies
  mid-probe cannot wedge the breaker;
* closed but not proven (new, reset, or in a failure streak): calls whose outcome
  is still pending count against ``failure_threshold`` (*cautious admission*),
  so ten workers retrying a dead tool reach it ``failure_threshold`` times, not
  once per worker. Turn off with ``cautious=False`` / ``?cautious=false``.

Each transition is reported (listeners, the transitions metric) once, by the
worker whose script made it; the script also publishes it on
``{prefix:events}`` and the other workers update their local state (and so the
state gauge) without reporting it again.

Redis failing never stops a tool call: on a connection error or timeout
(default socket timeout 50 ms, no client retries, so a script is never run
twice) the breaker decides with its local state machine, the store logs once,
counts ``error_count`` (the ``otel_breaker.store.errors`` metric) and tries Redis
again every ``rejoin_interval`` seconds; when Redis answers, its state wins.

Keys (all one breaker's keys share a hash tag, so Cluster keeps them in one slot):
``{prefix:t:tool}`` (shared by tool name), ``{prefix:a:agent:tool}`` (with
``per_agent=True``), ``{prefix:s:session:tool}`` (session scope), each with
``:leases`` and ``:pending`` sorted sets beside it; every key expires when idle.
"""

from __future__ import annotations

from otel_breaker.store.redis_setup import (
    DEFAULT_PREFIX,
    DEFAULT_SOCKET_TIMEOUT,
    StoreError,
    describe_error,
    mask_url,
    parse_url,
)
from otel_breaker.store.redis_storage import (
    AGENT_TTL,
    DEFAULT_LEASE_SECONDS,
    SESSION_TTL,
    TOOL_TTL,
    RedisStorage,
)
from otel_breaker.store.redis_store import REJOIN_INTERVAL, SCRIPT, RedisStore

__all__ = [
    "AGENT_TTL",
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_PREFIX",
    "DEFAULT_SOCKET_TIMEOUT",
    "REJOIN_INTERVAL",
    "SCRIPT",
    "SESSION_TTL",
    "TOOL_TTL",
    "RedisStorage",
    "RedisStore",
    "StoreError",
    "describe_error",
    "mask_url",
    "parse_url",
]
