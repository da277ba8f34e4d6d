"""What the command line sees of a store: every breaker under a prefix, and manual control.

On a Cluster the scan visits every primary (each holds its own slots); the
hashes are then read in one pipeline, which redis-py splits by node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from otel_breaker.breaker import CircuitBreaker, State
from otel_breaker.store.redis_figures import latency_ms, rejected
from otel_breaker.store.redis_keys import identity_of_key
from otel_breaker.store.redis_setup import is_cluster_client
from otel_breaker.store.redis_storage import AGENT_TTL, SESSION_TTL, STATES, TOOL_TTL, RedisStorage, text

if TYPE_CHECKING:
    from otel_breaker.store.redis_link import AdminStore


def control(
    store: AdminStore, key: str, op: str, *extra: Any, tool: str = "", agent: str = "", session: str = ""
) -> None:
    """Run a manual operation (``open``/``close``/``reset``) on the breaker stored at ``key``."""
    storage = RedisStorage(store, key, SESSION_TTL if session else (AGENT_TTL if agent else TOOL_TTL))
    # A breaker the store does not follow: it only supplies the script's arguments.
    storage.configure(CircuitBreaker(tool or key, None, agent_name=agent or None, session_id=session or None))
    store.run_script(storage.keys, op, storage.args, extra)


def scan_keys(client: Any, pattern: str) -> list[str]:
    """Every hash key matching ``pattern``; on a Cluster, from every primary."""
    if is_cluster_client(client):
        found: set[str] = set()
        for node in client.get_primaries():
            found.update(text(k) for k in client.scan_iter(match=pattern, count=1000, _type="hash", target_nodes=node))
        return sorted(found)
    return sorted({text(k) for k in client.scan_iter(match=pattern, count=1000, _type="hash")})


def snapshot(store: AdminStore) -> list[dict[str, Any]]:
    """Every breaker in the store under its prefix, as plain values (for ``status``)."""
    client = store.client
    keys = scan_keys(client, "{" + store.prefix + ":*}")
    if not keys:
        return []
    seconds, micros = client.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.hgetall(key)
    rows = []
    for key, raw in zip(keys, pipe.execute(), strict=True):
        fields = {text(k): text(v) for k, v in raw.items()}
        if "st" not in fields:
            continue
        rows.append(row(key, fields, now_ms))
    rows.sort(key=lambda r: (r["tool"], r["agent"] or "", r["session"] or ""))
    return rows


def row(key: str, fields: dict[str, str], now_ms: int) -> dict[str, Any]:
    state = STATES[int(fields["st"])]
    open_until = int(float(fields.get("ou", "0")))
    retry_after: float | None = None
    if state is State.OPEN:
        retry_after = None if open_until < 0 else max(0.0, (open_until - now_ms) / 1000.0)
    last_change = int(float(fields.get("lc", "0"))) or None
    identity = identity_of_key(key)
    p50_ms, p99_ms = latency_ms(fields, now_ms)
    return {
        "key": key,
        "tool": fields.get("tool", ""),
        "where": identity.where if identity is not None else None,
        "agent": fields.get("agent") or None,
        "session": fields.get("session") or None,
        "state": state.value,
        "consecutive_failures": int(fields.get("cf", "0")),
        "failures": int(fields.get("failures", "0")),
        "successes": int(fields.get("successes", "0")),
        "opened": int(fields.get("opened", "0")),
        "rejected": rejected(fields),
        "forced_open": state is State.OPEN and open_until < 0,
        "retry_after_s": retry_after,
        "last_change_ms": last_change,
        "last_change_age_s": None if last_change is None else max(0.0, (now_ms - last_change) / 1000.0),
        # What the workers reported: the fleet's calls of the last minute (redis_figures).
        "latency_p50_ms": p50_ms,
        "latency_p99_ms": p99_ms,
    }
