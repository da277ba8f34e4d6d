"""Breakers shared by every worker through Redis (Redis 7+ or Valkey; Cluster through hash tags).

``OTEL_BREAKER_STORE=redis://host:6379/0`` (``rediss://`` for TLS) makes every
breaker one shared breaker per tool across all processes and hosts; in code,
``RedisStore(redis.Redis(...))`` or ``RedisStore(redis.asyncio.Redis(...))``.

How a decision is made:

* every decision (acquire, record, transition, manual control) is one Lua
  script run with EVALSHA (loaded again after NOSCRIPT), on the server's clock
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
``{prefix}:events`` and the other workers update their local state (and so the
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

import hashlib
import inspect
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Iterable
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from otel_breaker.breaker import (
    REJECTED,
    SHADOW,
    CircuitBreaker,
    CircuitBreakerConfig,
    Clock,
    State,
    StateChange,
)
from otel_breaker.classify import FAILURE, SUCCESS

logger = logging.getLogger("otel_breaker")

DEFAULT_PREFIX = "otel_breaker"
#: Socket (and connect) timeout of the clients the store builds, in seconds.
DEFAULT_SOCKET_TIMEOUT = 0.05
#: A probe lease lives this long when the breaker has no ``timeout``.
DEFAULT_LEASE_SECONDS = 60.0
#: Idle expiry of breaker keys, in seconds: by tool, per agent, per session.
TOOL_TTL = 30 * 86400.0
AGENT_TTL = 7 * 86400.0
SESSION_TTL = 3600.0
#: Seconds between attempts to use Redis again after it failed.
REJOIN_INTERVAL = 1.0

SCRIPT = resources.files("otel_breaker.store").joinpath("redis_script.lua").read_text(encoding="utf-8")
SCRIPT_SHA = hashlib.sha1(SCRIPT.encode("utf-8")).hexdigest()

_STATES = (State.CLOSED, State.OPEN, State.HALF_OPEN)
_CLOSED = State.CLOSED
_OPEN = State.OPEN
_HALF_OPEN = State.HALF_OPEN
_INF = math.inf
_URL_OPTIONS = ("per_agent", "cautious", "prefix")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class StoreError(ValueError):
    """The Redis store cannot be used: one line saying why."""


class _PendingPermit(int):
    """A closed-state permit whose outcome the shared breaker waits for (cautious admission)."""

    token: int


def _redis():
    try:
        import redis
    except ImportError:  # pragma: no cover - depends on the environment
        raise StoreError("the Redis store needs the redis package: pip install 'otel-breaker[redis]'") from None
    return redis


def _no_retry():
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return Retry(NoBackoff(), 0)


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def parse_url(url: str) -> tuple[str, dict[str, str]]:
    """Check a store URL; returns (URL for redis-py, our options from its query).

    Raises :class:`StoreError` naming what is wrong.
    """
    shown = mask_url(url)
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise StoreError(f"invalid Redis URL {shown!r}: {exc}") from None
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise StoreError(f"invalid Redis URL {shown!r}: the scheme must be redis://, rediss:// or unix://")
    if parts.scheme == "unix":
        if not parts.path:
            raise StoreError(f"invalid Redis URL {shown!r}: no socket path")
    else:
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
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in query if k in _URL_OPTIONS}
    for key in ("per_agent", "cautious"):
        value = ours.get(key)
        if value is not None and value.lower() not in _TRUE + _FALSE:
            raise StoreError(f"invalid Redis URL {shown!r}: {key}={value!r} must be true or false")
    rest = urlencode([(k, v) for k, v in query if k not in _URL_OPTIONS])
    return urlunsplit(parts._replace(query=rest)), ours


def describe_error(exc: BaseException, url: str | None = None) -> str:
    """One line saying what went wrong talking to Redis."""
    redis = _redis()
    where = f" at {mask_url(url)}" if url else ""
    text = str(exc) or type(exc).__name__
    lowered = text.lower()
    if isinstance(exc, StoreError):
        return text
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
    if isinstance(exc, redis.ConnectionError | OSError):
        return f"cannot reach Redis{where}: {text}"
    return f"Redis{where} failed: {text}"


def _is_async_client(client: Any) -> bool:
    try:
        from redis.asyncio import Redis as AsyncRedis
    except ImportError:  # pragma: no cover
        return False
    return isinstance(client, AsyncRedis)


def _sync_twin(aclient: Any) -> Any:
    """A sync client for the same server as an asyncio client (the guard's call path is sync)."""
    redis = _redis()
    pool = aclient.connection_pool
    kwargs = dict(pool.connection_kwargs)
    name = pool.connection_class.__name__
    if "Unix" in name:
        cls = redis.UnixDomainSocketConnection
    elif "SSL" in name:
        cls = redis.SSLConnection
    else:
        cls = redis.Connection
    accepted = set(inspect.signature(cls.__init__).parameters)
    for base in cls.__mro__[1:]:
        if "__init__" in vars(base):
            accepted |= set(inspect.signature(base.__init__).parameters)
    options = {k: v for k, v in kwargs.items() if k in accepted and k not in ("retry", "self", "kwargs")}
    options["retry"] = _no_retry()
    return redis.Redis(connection_pool=redis.ConnectionPool(connection_class=cls, **options))


def _escape(part: str) -> str:
    return part.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisCircuitBreaker(CircuitBreaker):
    """A breaker whose state lives in Redis; the local fields mirror the last reply.

    Telemetry and ``stats`` read the mirrored fields; lifetime counters count
    this process's calls (exported per process, summed by the backend).
    """

    def __init__(
        self,
        store: RedisStore,
        key: str,
        name: str,
        config: CircuitBreakerConfig | None = None,
        *,
        clock: Clock | None = None,
        agent_name: str | None = None,
        session_id: str | None = None,
        ttl: float = TOOL_TTL,
    ) -> None:
        super().__init__(name, config, clock=clock, agent_name=agent_name, session_id=session_id)
        self._store = store
        self.key = key
        self._keys = (key, key + ":leases", key + ":pending")
        self._ttl = ttl
        self._ver = -1
        # Shared state known closed, proven healthy, and watched for changes:
        # acquire needs no round-trip.
        self._free = False
        self._probe_busy = False
        self._window_totals: tuple[int, int] | None = None
        self._args = self._script_args()

    def __repr__(self) -> str:
        return f"<RedisCircuitBreaker {self.name!r} {self._state.value} key={self.key!r}>"

    @property
    def store(self) -> RedisStore:
        return self._store

    def _script_args(self) -> tuple[Any, ...]:
        c = self._config
        lease = c.timeout if c.timeout is not None else DEFAULT_LEASE_SECONDS
        return (
            self._store.channel,
            max(1, int(self._ttl * 1000)),
            c.failure_threshold,
            c.success_threshold,
            c.half_open_max_calls,
            max(1, int(lease * 1000)),
            int(c.recovery_timeout * 1000),
            repr(float(c.backoff_multiplier)),
            int(c.max_recovery_timeout * 1000),
            repr(float(c.failure_rate_threshold or 0.0)),
            c.minimum_calls,
            max(10, int(c.monitor_window * 1000)),
            1 if self._store.cautious else 0,
            self.name,
            self.agent_name or "",
            self.session_id or "",
        )

    def configure(self, config: CircuitBreakerConfig) -> None:
        super().configure(config)
        self._args = self._script_args()

    def close(self) -> None:
        """Stop following shared state changes (the registry calls this when it drops a breaker)."""
        self._store._forget(self)

    # -- applying replies ----------------------------------------------------

    def _sync(self, reply: list[Any], epoch: int) -> StateChange | None:
        """Mirror a script reply locally; returns the transition this worker caused."""
        store = self._store
        state = _STATES[reply[2]]
        with self._lock:
            now = self._clock()
            change = None
            if reply[8] >= 0:
                change = StateChange(self, _STATES[reply[8]], state, _text(reply[9]), now)
                if state is _OPEN:
                    self._opened_count += 1
            if reply[10] >= 0:
                self._window_totals = (reply[10], reply[11])
            if reply[7] >= self._ver:
                self._mirror(reply[7], reply[3], state, reply[4], reply[5], now)
                self._free = bool(reply[6]) and store.watching and epoch == store._watch_epoch
                self._probe_busy = state is _HALF_OPEN and reply[0] == -1
        return change

    def _mirror(self, ver: int, gen: int, state: State, retry_ms: int, consecutive: int, now: float) -> None:
        self._ver = ver
        self._generation = gen
        if state is not self._state:
            self._last_change = now
            self._state = state
            self._probe_leases.clear()
            self._probe_successes = 0
        self._consecutive = consecutive
        if state is _OPEN:
            self._open_until = _INF if retry_ms < 0 else now + retry_ms / 1000.0

    def _on_published(self, ver: int, gen: int, state: State, retry_ms: int, consecutive: int, free: bool) -> None:
        """Another worker changed the shared state: follow it, report nothing."""
        with self._lock:
            if ver > self._ver:
                self._mirror(ver, gen, state, retry_ms, consecutive, self._clock())
                self._free = free and self._store.watching
                self._probe_busy = False

    def _retry_after_locked(self, now: float) -> float:
        if self._state is _HALF_OPEN and self._probe_busy:
            return min(1.0, self._config.recovery_timeout)
        return super()._retry_after_locked(now)

    def recent_failure_rate(self) -> float | None:
        if not self._config.failure_rate_threshold:
            return None
        reply = self._remote("read")
        if reply is None:
            return super().recent_failure_rate()
        calls, failures = self._window_totals or (0, 0)
        return failures / calls if calls else 0.0

    # -- the two halves of a guarded call ----------------------------------

    def _acquire_local(self) -> int | tuple[int, int] | None:
        """The permit when no round-trip is needed, else None."""
        if self._free and self._state is _CLOSED:
            next(self._request_counter)
            return self._generation
        if (
            self._state is _OPEN
            and self._clock() < self._open_until
            and (self._open_until != _INF or self._store.watching)
        ):
            # open with a known retry-after (or forced open while changes are watched): no round-trip
            next(self._request_counter)
            next(self._rejected_open_counter)
            return SHADOW if self._observe else REJECTED
        return None

    def _acquire_reply(self, reply: list[Any], epoch: int) -> int | tuple[int, int]:
        next(self._request_counter)
        change = self._sync(reply, epoch)
        if change is not None:
            self._emit(change)
        result = reply[0]
        if result == 0:
            return reply[3]
        if result == 2:
            return (reply[3], reply[1])
        if result == 1:
            permit = _PendingPermit(reply[3])
            permit.token = reply[1]
            return permit
        if reply[2] == 1:
            next(self._rejected_open_counter)
        else:
            with self._lock:
                self._rejected_half_open += 1
        return SHADOW if self._observe else REJECTED

    def acquire(self) -> int | tuple[int, int]:
        permit = self._acquire_local()
        if permit is not None:
            return permit
        store = self._store
        if store.degraded and not store._try_again():
            return super().acquire()
        epoch = store._watch_epoch
        try:
            reply = store._eval(self._keys, "acquire", self._args)
        except Exception as exc:
            store._failed(exc)
            return super().acquire()
        store._answered()
        return self._acquire_reply(reply, epoch)

    async def aacquire(self) -> int | tuple[int, int]:
        """``acquire`` through the store's asyncio client (the same decisions)."""
        permit = self._acquire_local()
        if permit is not None:
            return permit
        store = self._store
        if store.degraded and not store._try_again():
            return super().acquire()
        epoch = store._watch_epoch
        try:
            reply = await store._aeval(self._keys, "acquire", self._args)
        except Exception as exc:
            store._failed(exc)
            return super().acquire()
        store._answered()
        return self._acquire_reply(reply, epoch)

    @staticmethod
    def _record_args(permit: int | tuple[int, int], outcome: int) -> tuple[Any, ...]:
        if isinstance(permit, tuple):
            return (permit[0], permit[1], outcome, "p")
        return (int(permit), getattr(permit, "token", 0), outcome, "c")

    def _record_reply(self, reply: list[Any], outcome: int, epoch: int) -> None:
        if outcome == SUCCESS:
            next(self._success_counter)
        else:
            with self._lock:
                if outcome == FAILURE:
                    self._failures += 1
                else:
                    self._ignored += 1
        change = self._sync(reply, epoch)
        if change is not None:
            self._emit(change)

    def record(self, permit: int | tuple[int, int], outcome: int) -> None:
        store = self._store
        if store.degraded and not store._try_again():
            return super().record(permit, outcome)
        epoch = store._watch_epoch
        try:
            reply = store._eval(self._keys, "record", self._args, self._record_args(permit, outcome))
        except Exception as exc:
            store._failed(exc)
            return super().record(permit, outcome)
        store._answered()
        self._record_reply(reply, outcome, epoch)

    async def arecord(self, permit: int | tuple[int, int], outcome: int) -> None:
        """``record`` through the store's asyncio client."""
        store = self._store
        if store.degraded and not store._try_again():
            return super().record(permit, outcome)
        epoch = store._watch_epoch
        try:
            reply = await store._aeval(self._keys, "record", self._args, self._record_args(permit, outcome))
        except Exception as exc:
            store._failed(exc)
            return super().record(permit, outcome)
        store._answered()
        self._record_reply(reply, outcome, epoch)

    # -- manual control ----------------------------------------------------

    def _remote(self, op: str, *extra: Any) -> list[Any] | None:
        """Run ``op`` in Redis and mirror the reply; None when Redis is unusable."""
        store = self._store
        if store.degraded and not store._try_again():
            return None
        epoch = store._watch_epoch
        try:
            reply = store._eval(self._keys, op, self._args, extra)
        except Exception as exc:
            store._failed(exc)
            return None
        store._answered()
        change = self._sync(reply, epoch)
        if change is not None:
            self._emit(change)
        return reply

    def refresh(self) -> State:
        """Read the shared state now (one round-trip) and return it."""
        self._remote("read")
        return self._state

    def force_open(self, duration: float | None = None) -> None:
        if self._remote("open", -1 if duration is None else int(duration * 1000)) is None:
            CircuitBreaker.force_open(self, duration)

    def force_close(self) -> None:
        if self._remote("close") is None:
            CircuitBreaker.force_close(self)

    def reset(self) -> None:
        with self._lock:
            self._baseline = (
                self._successes,
                self._failures,
                self._ignored,
                self._requests,
                self._rejected_open + self._rejected_half_open,
                self._opened_count,
            )
        if self._remote("reset") is None:
            CircuitBreaker.reset(self)

    def health_check_passed(self) -> bool:
        reply = self._remote("health")
        if reply is None:
            return CircuitBreaker.health_check_passed(self)
        return reply[0] == 1


class RedisStore:
    """Creates breakers whose state lives in one Redis, shared by every worker.

    ``client``: a ``redis.Redis`` or ``redis.asyncio.Redis``. Give it a short
    ``socket_timeout`` and no retries (``retry=Retry(NoBackoff(), 0)``), as
    :meth:`from_url` does: a retried script could count an outcome twice.
    """

    name = "redis"

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = DEFAULT_PREFIX,
        per_agent: bool = False,
        cautious: bool = True,
        rejoin_interval: float = REJOIN_INTERVAL,
        watch: bool = True,
        url: str | None = None,
    ) -> None:
        if not prefix or any(c in prefix for c in "{}*?[]\\"):
            raise StoreError(f"invalid Redis key prefix {prefix!r}: non-empty, without {{ }} * ? [ ] \\")
        self.prefix = prefix
        self.per_agent = per_agent
        self.cautious = cautious
        self.rejoin_interval = rejoin_interval
        self.url = url
        if _is_async_client(client):
            self.aclient = client
            self.client = _sync_twin(client)
        else:
            self.aclient = None
            self.client = client
        self.channel = f"{prefix}:events"
        #: Errors talking to Redis (exported as ``otel_breaker.store.errors``).
        self.error_count = 0
        #: True while Redis is unusable and breakers decide locally.
        self.degraded = False
        #: True while the change feed is subscribed (local closed-state admission needs it).
        self.watching = False
        self.last_error: str | None = None
        self._retry_at = 0.0
        self._lock = threading.Lock()
        self._watch_epoch = 0
        self._breakers: dict[str, weakref.WeakSet[RedisCircuitBreaker]] = {}
        self._watch = watch
        self._watcher: threading.Thread | None = None
        self._stop = threading.Event()
        self._closed = False
        _STORES.add(self)

    def __repr__(self) -> str:
        return f"<RedisStore {mask_url(self.url) if self.url else self.client!r} prefix={self.prefix!r}>"

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str | None = None,
        password: str | None = None,
        socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
        asyncio: bool = False,
        **options: Any,
    ) -> RedisStore:
        """A store for ``redis://[:password@]host:port/db`` (``rediss://`` TLS, ``unix://path``).

        Query options ``per_agent=true``, ``cautious=false`` and ``prefix=...``
        are the store's; the rest go to redis-py. ``prefix``/``password`` default
        to ``OTEL_BREAKER_REDIS_PREFIX``/``OTEL_BREAKER_REDIS_PASSWORD``. Nothing
        connects here: a Redis that is down at start-up is joined when it answers.
        """
        redis = _redis()
        clean, ours = parse_url(url)
        if prefix is None or password is None:
            from otel_breaker.config import get_settings

            settings = get_settings()
            if prefix is None:
                prefix = ours.get("prefix") or settings.redis_prefix or DEFAULT_PREFIX
            if password is None:
                password = settings.redis_password
        kwargs: dict[str, Any] = {
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": socket_timeout,
            "retry": _no_retry(),
        }
        if password is not None and urlsplit(url).password is None:
            kwargs["password"] = password
        if asyncio:
            import redis.asyncio

            factory = redis.asyncio.Redis
        else:
            factory = redis.Redis
        try:
            client = factory.from_url(clean, **kwargs)
        except (ValueError, TypeError) as exc:
            raise StoreError(f"invalid Redis URL {mask_url(url)!r}: {exc}") from None
        if "per_agent" in ours:
            options.setdefault("per_agent", ours["per_agent"].lower() in _TRUE)
        if "cautious" in ours:
            options.setdefault("cautious", ours["cautious"].lower() in _TRUE)
        return cls(client, prefix=prefix, url=url, **options)

    # -- breakers --------------------------------------------------------------

    def key_for(self, tool: str, agent_name: str | None = None, session_id: str | None = None) -> str:
        """The Redis key of a breaker (hash-tagged for Cluster)."""
        if session_id is not None:
            scope = f"s:{_escape(session_id)}:"
        elif agent_name and self.per_agent:
            scope = f"a:{_escape(agent_name)}:"
        else:
            scope = "t:"
        return "{" + f"{self.prefix}:{scope}{_escape(tool)}" + "}"

    def create(
        self,
        key: str,
        config: CircuitBreakerConfig,
        *,
        clock: Clock | None = None,
        agent_name: str | None = None,
        session_id: str | None = None,
    ) -> RedisCircuitBreaker:
        if session_id is not None:
            ttl = SESSION_TTL
        elif agent_name and self.per_agent:
            ttl = AGENT_TTL
        else:
            ttl = TOOL_TTL
        redis_key = self.key_for(key, agent_name, session_id)
        breaker = RedisCircuitBreaker(
            self, redis_key, key, config, clock=clock, agent_name=agent_name, session_id=session_id, ttl=ttl
        )
        with self._lock:
            self._breakers.setdefault(redis_key, weakref.WeakSet()).add(breaker)
        self._start_watching()
        return breaker

    def breakers(self) -> list[RedisCircuitBreaker]:
        with self._lock:
            return [b for group in self._breakers.values() for b in group]

    def _forget(self, breaker: RedisCircuitBreaker) -> None:
        with self._lock:
            group = self._breakers.get(breaker.key)
            if group is not None:
                group.discard(breaker)
                if not group:
                    del self._breakers[breaker.key]

    # -- talking to Redis ------------------------------------------------------------

    def _eval(self, keys: tuple[str, ...], op: str, args: Iterable[Any], extra: Iterable[Any] = ()) -> list[Any]:
        client = self.client
        try:
            return client.evalsha(SCRIPT_SHA, 3, *keys, op, *args, *extra)
        except Exception as exc:
            if not _is_noscript(exc):
                raise
        client.script_load(SCRIPT)
        return client.evalsha(SCRIPT_SHA, 3, *keys, op, *args, *extra)

    async def _aeval(self, keys: tuple[str, ...], op: str, args: Iterable[Any], extra: Iterable[Any] = ()) -> list[Any]:
        client = self.aclient
        if client is None:
            return self._eval(keys, op, args, extra)
        try:
            return await client.evalsha(SCRIPT_SHA, 3, *keys, op, *args, *extra)
        except Exception as exc:
            if not _is_noscript(exc):
                raise
        await client.script_load(SCRIPT)
        return await client.evalsha(SCRIPT_SHA, 3, *keys, op, *args, *extra)

    def check(self) -> None:
        """Connect, authenticate and run the script once; raises :class:`StoreError` saying what is wrong."""
        try:
            self.client.ping()
            self._eval(("{" + self.prefix + ":check}",) * 3, "ping", ())
        except Exception as exc:
            raise StoreError(describe_error(exc, self.url)) from None

    # -- outage handling -----------------------------------------------------------------

    def _failed(self, exc: BaseException) -> None:
        """A Redis call failed: decide locally until ``rejoin_interval`` has passed."""
        with self._lock:
            self.error_count += 1
            self._retry_at = time.monotonic() + self.rejoin_interval
            first = not self.degraded
            self.degraded = True
            self.last_error = describe_error(exc, self.url)
        if first:
            self._invalidate()
            logger.warning(
                "otel-breaker: %s; breakers decide per process until Redis answers again (retrying every %gs)",
                self.last_error,
                self.rejoin_interval,
            )
        else:
            logger.debug("otel-breaker: Redis store still unusable: %s", exc)

    def _try_again(self) -> bool:
        """While degraded: True for one caller per ``rejoin_interval`` (that call tries Redis)."""
        now = time.monotonic()
        if now < self._retry_at:
            return False
        with self._lock:
            if now < self._retry_at:
                return False
            self._retry_at = now + self.rejoin_interval
            return True

    def _answered(self) -> None:
        if self.degraded:
            with self._lock:
                was = self.degraded
                self.degraded = False
            if was:
                logger.warning("otel-breaker: Redis store answers again; breakers are shared again")

    def _invalidate(self) -> None:
        """Local closed-state admission is no longer safe: every breaker asks Redis next time."""
        for breaker in self.breakers():
            breaker._free = False

    # -- following other workers' changes ---------------------------------------------------

    def _start_watching(self) -> None:
        if not self._watch or self._watcher is not None or self._closed:
            return
        with self._lock:
            if self._watcher is not None:
                return
            self._watcher = threading.Thread(target=self._watch_loop, name="otel-breaker-redis-watch", daemon=True)
        self._watcher.start()

    def _after_fork(self) -> None:
        """In a forked child the change feed thread is gone: start over."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher = None
        self.watching = False
        self._watch_epoch += 1
        self._invalidate()
        if self._breakers and not self._closed:
            self._start_watching()

    def _set_watching(self, watching: bool) -> None:
        with self._lock:
            self._watch_epoch += 1
            self.watching = watching
        self._invalidate()

    def _watch_loop(self) -> None:
        while not self._stop.is_set():
            pubsub = None
            try:
                pubsub = self.client.pubsub()
                pubsub.subscribe(self.channel)
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=0.2)
                    if message is None:
                        continue
                    kind = message.get("type")
                    kind = _text(kind)
                    if kind == "subscribe":
                        self._set_watching(True)
                    elif kind == "message":
                        self._on_message(message["data"])
            except Exception as exc:
                if self.watching:
                    self._set_watching(False)
                    logger.debug("otel-breaker: Redis change feed lost: %s", exc)
                self._stop.wait(min(self.rejoin_interval, 1.0))
            finally:
                if pubsub is not None:
                    try:
                        pubsub.close()
                    except Exception:
                        pass
        if self.watching:
            self._set_watching(False)

    def _on_message(self, data: Any) -> None:
        try:
            ver, gen, st, retry, cf, free, key = _text(data).split("|", 6)
            group = self._breakers.get(key)
            if not group:
                return
            state = _STATES[int(st)]
            for breaker in list(group):
                breaker._on_published(int(ver), int(gen), state, int(retry), int(cf), free == "1")
        except Exception:
            logger.debug("otel-breaker: ignoring a malformed change message %r", data, exc_info=True)

    def close(self) -> None:
        """Stop following changes and release the connections."""
        self._closed = True
        self._stop.set()
        watcher = self._watcher
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join(timeout=2.0)
        try:
            self.client.close()
        except Exception:
            pass

    # -- administration (the command line) -----------------------------------------------

    def control(self, key: str, op: str, *extra: Any, tool: str = "", agent: str = "", session: str = "") -> None:
        """Run a manual operation (``open``/``close``/``reset``) on the breaker stored at ``key``."""
        breaker = RedisCircuitBreaker.__new__(RedisCircuitBreaker)
        CircuitBreaker.__init__(breaker, tool or key, None, agent_name=agent or None, session_id=session or None)
        breaker._store = self
        breaker.key = key
        breaker._keys = (key, key + ":leases", key + ":pending")
        breaker._ttl = SESSION_TTL if session else (AGENT_TTL if agent else TOOL_TTL)
        breaker._args = breaker._script_args()
        self._eval(breaker._keys, op, breaker._args, extra)

    def snapshot(self) -> list[dict[str, Any]]:
        """Every breaker in the store under this prefix, as plain values (for ``status``)."""
        client = self.client
        pattern = "{" + self.prefix + ":*}"
        keys = sorted({_text(k) for k in client.scan_iter(match=pattern, count=1000, _type="hash")})
        if not keys:
            return []
        seconds, micros = client.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.hgetall(key)
        rows = []
        for key, raw in zip(keys, pipe.execute(), strict=True):
            fields = {_text(k): _text(v) for k, v in raw.items()}
            if "st" not in fields:
                continue
            rows.append(_row(key, fields, now_ms))
        rows.sort(key=lambda r: (r["tool"], r["agent"] or "", r["session"] or ""))
        return rows


_STORES: weakref.WeakSet[RedisStore] = weakref.WeakSet()


def _reinit_after_fork() -> None:
    for store in list(_STORES):
        store._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)


def _row(key: str, fields: dict[str, str], now_ms: int) -> dict[str, Any]:
    state = _STATES[int(fields["st"])]
    open_until = int(float(fields.get("ou", "0")))
    retry_after: float | None = None
    if state is _OPEN:
        retry_after = None if open_until < 0 else max(0.0, (open_until - now_ms) / 1000.0)
    last_change = int(float(fields.get("lc", "0"))) or None
    return {
        "key": key,
        "tool": fields.get("tool", ""),
        "agent": fields.get("agent") or None,
        "session": fields.get("session") or None,
        "state": state.value,
        "consecutive_failures": int(fields.get("cf", "0")),
        "failures": int(fields.get("failures", "0")),
        "successes": int(fields.get("successes", "0")),
        "opened": int(fields.get("opened", "0")),
        "forced_open": state is _OPEN and open_until < 0,
        "retry_after_s": retry_after,
        "last_change_ms": last_change,
        "last_change_age_s": None if last_change is None else max(0.0, (now_ms - last_change) / 1000.0),
    }


def _is_noscript(exc: BaseException) -> bool:
    return type(exc).__name__ == "NoScriptError" or str(exc).startswith("NOSCRIPT")


__all__ = [
    "DEFAULT_PREFIX",
    "DEFAULT_SOCKET_TIMEOUT",
    "RedisCircuitBreaker",
    "RedisStore",
    "StoreError",
    "describe_error",
    "mask_url",
    "parse_url",
]
