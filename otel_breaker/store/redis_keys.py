"""How a breaker's identity is spelled as a Redis key, and read back.

``{prefix:k:agent/tool/where}`` (``{prefix:s:session:k:agent/tool/where}`` in a
session): the whole key is one hash tag, so a Cluster keeps a breaker's keys in
one slot. The parts are escaped, so no tool, agent or origin name can make two
identities share a key.
"""

from __future__ import annotations

import hashlib

from otel_breaker.identity import ToolKey

#: Longest part of a key kept as written; a longer one keeps its head and a digest of the whole.
MAX_PART = 160


def _escape(part: str) -> str:
    return part.replace("%", "%25").replace("{", "%7B").replace("}", "%7D").replace("/", "%2F").replace(":", "%3A")


def _unescape(part: str) -> str:
    return part.replace("%3A", ":").replace("%2F", "/").replace("%7D", "}").replace("%7B", "{").replace("%25", "%")


def _bounded(part: str) -> str:
    """``part`` escaped, at most about :data:`MAX_PART` characters, still telling parts apart."""
    escaped = _escape(part)
    if len(escaped) <= MAX_PART:
        return escaped
    digest = hashlib.sha256(part.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{escaped[: MAX_PART - 18].rstrip('%')}#{digest}"


def breaker_key(prefix: str, key: ToolKey, session_id: str | None = None) -> str:
    """The Redis key of the breaker of ``key`` (in ``session_id`` when given): every part
    escaped and bounded, so no name, however long or strange, makes an unbounded key or
    lets two identities share one."""
    parts = "/".join(_bounded(part or "") for part in key)
    scope = "k:" if session_id is None else f"s:{_bounded(session_id)}:k:"
    return "{" + f"{prefix}:{scope}{parts}" + "}"


def channel_name(prefix: str) -> str:
    """The change feed's channel: ``{prefix:events}``, inside the keys' pattern ``{prefix:*``, so
    a Redis ACL user limited to the breakers' keys is given the channel by the same pattern
    (``~{prefix:* &{prefix:*``)."""
    return "{" + f"{prefix}:events" + "}"


def reported_key(redis_key: str, origin: str) -> str:
    """The key that remembers the last report of worker ``origin`` to the breaker at
    ``redis_key``: inside the breaker's hash tag (its slot on a Cluster, the keys'
    ACL pattern), so a report the worker sends again after a lost answer counts once."""
    return f"{redis_key}:reported:{origin}"


def access_keys(prefix: str) -> tuple[str, str, str]:
    """The keys the permission check and ``ping`` run on: a breaker's three, under the prefix."""
    key = "{" + f"{prefix}:check" + "}"
    return (key, key + ":leases", key + ":pending")


def identity_of_key(redis_key: str) -> ToolKey | None:
    """The :class:`ToolKey` a breaker's Redis key was made from (None for a key of another shape)."""
    inner = redis_key.strip("{}")
    _, marker, rest = inner.rpartition(":k:")
    parts = rest.split("/") if marker else []
    if len(parts) != 3:
        return None
    agent, tool, where = (_unescape(p) for p in parts)
    return ToolKey(agent or None, tool, where or None)
