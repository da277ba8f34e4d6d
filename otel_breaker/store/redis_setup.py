"""Reading a store URL and building the redis-py clients for it: one node, a Cluster or Sentinel.

Kept apart from the store so the store only ever sees "a client that runs the
script". Three deployments:

* ``redis://host:6379/0`` (``rediss://`` TLS, ``unix:///path``): one node. On
  first use the store asks the node ``INFO cluster``; a node with
  ``cluster_enabled:1`` is used through ``RedisCluster`` from then on, so the URL
  of any node of a cluster works.
* ``redis+cluster://host:7000[,host:7001...]`` (``rediss+cluster://`` TLS): a
  Cluster, named explicitly (no detection round trip).
* ``redis+sentinel://host:26379[,host:26380...]/service[/db]``: the primary that
  Sentinel names for ``service``, followed through fail-overs.

Nothing connects while a client is built here, except that a Cluster client
reads the slot map when it is built; that happens on first use, so a Redis that
is down at start-up is joined when it answers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from otel_breaker.sanitize import bounded
from otel_breaker.words import parse_switch

try:  # imported when a Redis store is configured, never during a tool call
    import redis
    import redis.asyncio
    import redis.asyncio.cluster
    import redis.cluster
    import redis.sentinel
    from redis.backoff import NoBackoff
    from redis.retry import Retry
except ImportError:  # pragma: no cover - depends on the environment
    redis = None  # type: ignore[assignment]

DEFAULT_PREFIX = "otel_breaker"
#: Socket (and connect) timeout of the clients the store builds, in seconds.
DEFAULT_SOCKET_TIMEOUT = 0.05
#: Sentinels are asked for the primary only when a connection is opened: a little more patience.
SENTINEL_MIN_TIMEOUT = 0.2

SINGLE = "single"
AUTO = "auto"
CLUSTER = "cluster"
SENTINEL = "sentinel"

_URL_OPTIONS = ("per_agent", "cautious", "prefix")
_SENTINEL_OPTIONS = ("sentinel_password", "sentinel_username")
_SCHEMES = {
    "redis": AUTO,
    "rediss": AUTO,
    "unix": SINGLE,
    "redis+cluster": CLUSTER,
    "rediss+cluster": CLUSTER,
    "redis+sentinel": SENTINEL,
    "rediss+sentinel": SENTINEL,
}


class StoreError(ValueError):
    """The Redis store cannot be used: one line saying why."""


def require_redis() -> Any:
    """The redis package, or a :class:`StoreError` saying how to install it."""
    if redis is None:
        raise StoreError("the Redis store needs the redis package: pip install redis (the [redis] extra)")
    return redis


def no_retry() -> Any:
    """No client-side retries: a retried script could count an outcome twice."""
    return Retry(NoBackoff(), 0)


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (also ``sentinel_password=``)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    userinfo, at, host = parts.netloc.rpartition("@")
    if at and ":" in userinfo:
        parts = parts._replace(netloc=f"{userinfo.split(':', 1)[0]}:***@{host}")
    if "password" in parts.query:
        query = [(k, "***" if "password" in k else v) for k, v in parse_qsl(parts.query, keep_blank_values=True)]
        parts = parts._replace(query=urlencode(query, safe="*"))
    return urlunsplit(parts)


@dataclass
class Target:
    """What a store URL names: the deployment, its hosts and credentials, and the store's own options."""

    mode: str
    url: str  # the URL for redis-py (single node / auto), our options removed
    hosts: list[tuple[str, int]] = field(default_factory=list)
    service: str = ""
    db: int = 0
    tls: bool = False
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None
    extra: dict[str, str] = field(default_factory=dict)  # other query options, for redis-py


def _hosts(netloc: str, shown: str, default_port: int) -> list[tuple[str, int]]:
    hosts = []
    for item in netloc.split(","):
        host, colon, port = item.strip().rpartition(":") if item.count(":") == 1 else (item.strip(), "", "")
        if not colon:
            host, port = item.strip(), str(default_port)
        if not host:
            raise StoreError(f"invalid Redis URL {shown!r}: no host (expected host:port)")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise StoreError(f"invalid Redis URL {shown!r}: the port must be a number from 1 to 65535")
        hosts.append((host, int(port)))
    return hosts


def parse_url(url: str) -> tuple[Target, dict[str, str]]:
    """Check a store URL; returns (what it names, our options from its query).

    Raises :class:`StoreError` naming what is wrong.
    """
    shown = mask_url(url)
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise StoreError(f"invalid Redis URL {shown!r}: {exc}") from None
    mode = _SCHEMES.get(parts.scheme)
    if mode is None:
        raise StoreError(
            f"invalid Redis URL {shown!r}: the scheme must be redis://, rediss://, unix://, "
            "redis+cluster:// or redis+sentinel://"
        )
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in query if k in _URL_OPTIONS}
    for key in ("per_agent", "cautious"):
        value = ours.get(key)
        if value is not None and parse_switch(value) is None:
            raise StoreError(f"invalid Redis URL {shown!r}: {key}={value!r} must be true or false")
    extra = {k: v for k, v in query if k not in _URL_OPTIONS and k not in _SENTINEL_OPTIONS}
    sentinel = {k: v for k, v in query if k in _SENTINEL_OPTIONS}
    target = Target(mode, "", tls=parts.scheme.startswith("rediss"), extra=extra)
    userinfo, at, netloc = parts.netloc.rpartition("@")
    if at:
        user, colon, password = userinfo.partition(":")
        target.username = unquote(user) or None
        target.password = unquote(password) if colon else None
    if mode == SINGLE:
        if not parts.path:
            raise StoreError(f"invalid Redis URL {shown!r}: no socket path")
    elif mode == AUTO:
        if not parts.hostname:
            raise StoreError(f"invalid Redis URL {shown!r}: no host (expected redis://host:6379/0)")
        try:
            port = parts.port
        except ValueError:
            raise StoreError(f"invalid Redis URL {shown!r}: the port must be a number from 1 to 65535") from None
        if port == 0:
            raise StoreError(f"invalid Redis URL {shown!r}: the port must be a number from 1 to 65535")
        db = parts.path.lstrip("/")
        if db and not db.isdigit():
            raise StoreError(f"invalid Redis URL {shown!r}: the database must be a number (redis://host:6379/0)")
        target.db = int(db or 0)
        target.hosts = [(parts.hostname, port or 6379)]
    elif mode == CLUSTER:
        target.hosts = _hosts(netloc, shown, 6379)
        if parts.path.strip("/") not in ("", "0"):
            raise StoreError(f"invalid Redis URL {shown!r}: a Redis Cluster has only database 0")
    else:
        target.hosts = _hosts(netloc, shown, 26379)
        path = [p for p in parts.path.split("/") if p]
        if not path:
            raise StoreError(
                f"invalid Redis URL {shown!r}: no service name (expected redis+sentinel://host:26379/mymaster)"
            )
        target.service = unquote(path[0])
        if len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
            raise StoreError(
                f"invalid Redis URL {shown!r}: expected redis+sentinel://host:26379/service/db with a numeric db"
            )
        target.db = int(path[1]) if len(path) == 2 else 0
        target.sentinel_username = sentinel.get("sentinel_username") or None
        target.sentinel_password = sentinel.get("sentinel_password") or None
    rest = urlencode([(k, v) for k, v in query if k not in _URL_OPTIONS and k not in _SENTINEL_OPTIONS])
    target.url = urlunsplit(parts._replace(query=rest))
    return target, ours


#: Longest Redis error text quoted in a line about missing permissions.
_MAX_REASON_CHARS = 160


def acl_grant(prefix: str, username: str | None) -> str:
    """The ``ACL SETUSER`` line that gives ``username`` what the shared breakers under ``prefix`` need."""
    return f"ACL SETUSER {username or '<user>'} ~{{{prefix}:* &{{{prefix}:* +@all"


def missing_permissions(prefix: str, refused: list[str], username: str | None, url: str | None = None) -> str:
    """One line naming each command the Redis user was refused (``"COMMAND target: error"``
    items), one reason, and the ACL line that grants what is missing."""
    where = f" at {mask_url(url)}" if url else ""
    user = f"Redis user {username!r}" if username else "the Redis user"
    commands = ", ".join(dict.fromkeys(item.partition(": ")[0].strip() for item in refused))
    reason = bounded(refused[0].partition(": ")[2], _MAX_REASON_CHARS)
    return (
        f"{user}{where} may not run {commands} ({reason}); the shared breakers need the keys and the channel "
        f"under {{{prefix}: {acl_grant(prefix, username)} (or the minimal set in docs/redis.md)"
    )


def describe_error(
    exc: BaseException, url: str | None = None, prefix: str | None = None, username: str | None = None
) -> str:
    """One line saying what went wrong talking to Redis."""
    where = f" at {mask_url(url)}" if url else ""
    text = str(exc) or type(exc).__name__
    lowered = text.lower()
    if isinstance(exc, StoreError) or redis is None:
        return text
    if is_permission_error(exc):
        command = _refused_command(text)
        return missing_permissions(prefix or DEFAULT_PREFIX, [f"{command}: {text}"], username, url)
    if isinstance(exc, redis.AuthenticationError) or any(
        word in lowered for word in ("wrongpass", "noauth", "invalid password", "authentication required")
    ):
        return (
            f"Redis{where} refused the credentials ({text}); set the password in the URL or OTEL_BREAKER_REDIS_PASSWORD"
        )
    if (
        isinstance(exc, redis.ResponseError)
        and "unknown command" in lowered
        and ("eval" in lowered or "script" in lowered)
    ):
        return (
            f"Redis{where} does not run Lua scripts ({text}); the shared breaker store needs EVAL/EVALSHA "
            "(Redis 7+ or Valkey with scripting enabled)"
        )
    if isinstance(exc, redis.TimeoutError):
        return f"Redis{where} did not answer in time ({text})"
    if isinstance(exc, redis.sentinel.MasterNotFoundError):
        return f"Sentinel{where} names no reachable primary ({text})"
    if isinstance(exc, redis.ConnectionError | OSError):
        return f"cannot reach Redis{where}: {text}"
    if isinstance(exc, redis.exceptions.RedisClusterException):
        return f"Redis Cluster{where} is not usable: {text}"
    return f"Redis{where} failed: {text}"


def is_permission_error(exc: BaseException) -> bool:
    """Redis refused a command, key or channel to this user (ACL ``NOPERM``)."""
    if redis is None:
        return False
    return isinstance(exc, redis.exceptions.NoPermissionError) or str(exc).lower().startswith("noperm")


def _refused_command(text: str) -> str:
    """The command a NOPERM error names ("... to run the 'evalsha' command"), else what it refers to."""
    _, quote, rest = text.partition("'")
    if quote and "command" in rest:
        return rest.partition("'")[0].upper()
    if "channel" in text:
        return "PUBLISH/SUBSCRIBE"
    return "a command on a key"


def is_async_client(client: Any) -> bool:
    return redis is not None and isinstance(client, redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster)


def is_cluster_client(client: Any) -> bool:
    return redis is not None and isinstance(client, redis.cluster.RedisCluster | redis.asyncio.cluster.RedisCluster)


def _connection_options(pool: Any) -> dict[str, Any]:
    """The options of a pool's connections that another client for the same server needs."""
    kwargs = dict(pool.connection_kwargs)
    keep = (
        "host",
        "port",
        "db",
        "path",
        "username",
        "password",
        "socket_timeout",
        "socket_connect_timeout",
        "ssl_keyfile",
        "ssl_certfile",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_data",
        "ssl_check_hostname",
    )
    options = {k: v for k, v in kwargs.items() if k in keep}
    name = pool.connection_class.__name__
    options["kind"] = "unix" if "Unix" in name else ("ssl" if "SSL" in name else "tcp")
    return options


def _sync_from_options(options: dict[str, Any]) -> Any:
    """A sync client for the server an asyncio client talks to (the guard's sync path needs one)."""
    options = dict(options)
    kind = options.pop("kind")
    if kind == "unix":
        cls = redis.UnixDomainSocketConnection
        options.pop("host", None)
        options.pop("port", None)
    elif kind == "ssl":
        cls = redis.SSLConnection
    else:
        cls = redis.Connection
        options = {k: v for k, v in options.items() if not k.startswith("ssl_")}
    if kind != "unix":
        options.pop("path", None)
    return redis.Redis(connection_pool=redis.ConnectionPool(connection_class=cls, retry=no_retry(), **options))


class Clients:
    """The client of one store: built, and the deployment detected, on first use (and an asyncio
    client, when the store was given one).

    ``sync()`` may connect (detection, a Cluster's slot map) and so raises what
    redis-py raises; the store treats that like any other Redis failure.
    """

    def __init__(
        self,
        *,
        target: Target | None = None,
        client: Any = None,
        socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
        password: str | None = None,
    ) -> None:
        require_redis()
        self.target = target
        self.socket_timeout = socket_timeout
        self._password = password
        self._lock = threading.Lock()
        self._given_async = None
        self._sync: Any = None
        self._built = False  # the Cluster/Sentinel client is ours (so it can be built again)
        self._options: dict[str, Any] | None = None  # host/credentials of a given client
        if client is not None:
            if is_async_client(client):
                self._given_async = client
                if is_cluster_client(client):
                    node = client.get_default_node() or next(iter(client.startup_nodes.values()))
                    self._options = {"host": node.host, "port": node.port, **_cluster_credentials(client)}
                    self.mode = CLUSTER
                else:
                    self._options = _connection_options(client.connection_pool)
                    self._sync = _sync_from_options(self._options)
                    self.mode = SINGLE if self._options["kind"] == "unix" else AUTO
            else:
                self._sync = client
                if is_cluster_client(client):
                    self.mode = CLUSTER
                elif isinstance(client, redis.Redis):
                    self._options = _connection_options(client.connection_pool)
                    if _is_sentinel(client):  # from Sentinel.master_for(): the feed follows fail-overs
                        self.mode = SENTINEL
                    else:
                        self.mode = SINGLE if self._options["kind"] == "unix" else AUTO
                else:
                    self.mode = SINGLE
        else:
            assert target is not None
            self.mode = target.mode
            if self.mode in (AUTO, SINGLE):
                self._sync = redis.Redis.from_url(target.url, **self._kwargs())

    # -- options -----------------------------------------------------------------------

    def _kwargs(self, sentinel: bool = False) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "socket_timeout": self.socket_timeout,
            "socket_connect_timeout": self.socket_timeout,
            "retry": no_retry(),
        }
        target = self.target
        if target is not None and target.password is None and self._password is not None:
            kwargs["password"] = self._password
        return kwargs

    def _cluster_kwargs(self) -> dict[str, Any]:
        """Options of a Cluster client (built from the URL or from a given single-node client)."""
        kwargs: dict[str, Any] = {
            "socket_timeout": self.socket_timeout,
            "socket_connect_timeout": self.socket_timeout,
            "retry": no_retry(),
        }
        if self._options is not None:
            options = self._options
            for key in ("username", "password", "ssl_keyfile", "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs"):
                if options.get(key) is not None:
                    kwargs[key] = options[key]
            if options.get("kind") == "ssl":
                kwargs["ssl"] = True
            for key in ("socket_timeout", "socket_connect_timeout"):
                if options.get(key) is not None:
                    kwargs[key] = options[key]
            return kwargs
        target = self.target
        assert target is not None
        if target.username:
            kwargs["username"] = target.username
        password = target.password if target.password is not None else self._password
        if password is not None:
            kwargs["password"] = password
        if target.tls:
            kwargs["ssl"] = True
        for key, value in target.extra.items():
            if key.startswith("ssl_"):
                kwargs[key] = value
        return kwargs

    @property
    def username(self) -> str | None:
        """The Redis user the store logs in as (None: ``default``), for messages."""
        if self._options is not None:
            return self._options.get("username")
        return self.target.username if self.target is not None else None

    def _startup(self) -> list[tuple[str, int]]:
        if self._options is not None:
            return [(self._options["host"], self._options["port"])]
        assert self.target is not None
        return self.target.hosts

    # -- the sync client ---------------------------------------------------------------

    def sync(self) -> Any:
        """The sync client; on first use detects a Cluster behind a plain URL (may connect, may raise)."""
        client = self._sync
        if client is not None and self.mode != AUTO:
            return client
        with self._lock:
            if self._sync is None or self.mode == AUTO:
                self._resolve()
            return self._sync

    def ready(self) -> Any:
        """The sync client if it is built and the deployment known (no I/O), else None."""
        return self._sync if self.mode != AUTO else None

    def _resolve(self) -> None:
        if self.mode == AUTO:
            try:
                info = self._sync.info("cluster")
            except redis.ResponseError:  # INFO not allowed for this user: a single node it is
                info = {}
            if int(info.get("cluster_enabled", 0) or 0) == 1:
                single, self._sync = self._sync, None
                self.mode = CLUSTER
                try:
                    single.close()
                except Exception:
                    pass
            else:
                self.mode = SINGLE
        if self._sync is None and self.mode == CLUSTER:
            nodes = [redis.cluster.ClusterNode(host, port) for host, port in self._startup()]
            self._sync = redis.cluster.RedisCluster(startup_nodes=nodes, **self._cluster_kwargs())
            self._built = True
        elif self._sync is None and self.mode == SENTINEL:
            self._sync = self._sentinel(redis.sentinel.Sentinel).master_for(
                self.target.service, redis_class=redis.Redis, **self._master_kwargs()
            )
            self._built = True

    def _sentinel(self, factory: Callable[..., Any]) -> Any:
        target = self.target
        assert target is not None
        timeout = max(self.socket_timeout, SENTINEL_MIN_TIMEOUT)
        sentinel_kwargs: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
        if target.sentinel_username:
            sentinel_kwargs["username"] = target.sentinel_username
        if target.sentinel_password:
            sentinel_kwargs["password"] = target.sentinel_password
        if target.tls:
            sentinel_kwargs["ssl"] = True
        return factory(target.hosts, sentinel_kwargs=sentinel_kwargs)

    def _master_kwargs(self) -> dict[str, Any]:
        target = self.target
        assert target is not None
        kwargs: dict[str, Any] = {
            "socket_timeout": self.socket_timeout,
            "socket_connect_timeout": self.socket_timeout,
            "db": target.db,
        }
        if target.username:
            kwargs["username"] = target.username
        password = target.password if target.password is not None else self._password
        if password is not None:
            kwargs["password"] = password
        if target.tls:
            kwargs["ssl"] = True
        return kwargs

    # -- a given asyncio client ---------------------------------------------------------

    @property
    def given_async(self) -> Any:
        """The asyncio client the store was given, while it fits the deployment (else None)."""
        client = self._given_async
        if client is None or (self.mode == CLUSTER and not is_cluster_client(client)):
            return None
        return client

    # -- life cycle ---------------------------------------------------------------------------

    def after_fork(self) -> None:
        """A forked child must not share a lock, or a client's inner locks, with its parent.

        A Cluster or Sentinel client the store built is dropped and built again on
        first use; redis-py's connection pools notice the new process id and open
        their own connections (never shutting down the parent's).
        """
        self._lock = threading.Lock()
        if self._built:
            self._sync = None

    def close(self) -> None:
        client = self._sync
        if client is not None:
            try:
                client.close()
            except Exception:
                pass


def _is_sentinel(client: Any) -> bool:
    return type(client.connection_pool).__name__.startswith("Sentinel")


def _cluster_credentials(client: Any) -> dict[str, Any]:
    kwargs = getattr(client, "connection_kwargs", {}) or {}
    return {k: kwargs[k] for k in ("username", "password") if kwargs.get(k) is not None}


__all__ = [
    "CLUSTER",
    "DEFAULT_PREFIX",
    "DEFAULT_SOCKET_TIMEOUT",
    "SENTINEL",
    "SINGLE",
    "Clients",
    "StoreError",
    "Target",
    "describe_error",
    "mask_url",
    "parse_url",
]
