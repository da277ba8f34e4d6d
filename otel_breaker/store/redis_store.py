"""The Redis store: creates shared breakers, runs their script, and handles Redis failing."""

from __future__ import annotations

import atexit
import os
import secrets
import threading
import time
import weakref
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import Any

import otel_breaker.store.redis_admin as redis_admin
from otel_breaker.breaker import CircuitBreaker, CircuitBreakerConfig, Clock
from otel_breaker.config import get_settings
from otel_breaker.identity import ToolKey
from otel_breaker.loglines import logger
from otel_breaker.store.redis_feed import ChangeFeed
from otel_breaker.store.redis_keys import access_keys, breaker_key, channel_name
from otel_breaker.store.redis_report import REPORT_INTERVAL, Reporter
from otel_breaker.store.redis_setup import (
    DEFAULT_PREFIX,
    DEFAULT_SOCKET_TIMEOUT,
    Clients,
    StoreError,
    describe_error,
    is_permission_error,
    mask_url,
    missing_permissions,
    parse_url,
    require_redis,
)
from otel_breaker.store.redis_storage import AGENT_TTL, SESSION_TTL, TOOL_TTL, RedisStorage, text
from otel_breaker.store.redis_thread import run_blocking, running_asyncio
from otel_breaker.words import parse_switch

#: Seconds between attempts to use Redis again after it failed.
REJOIN_INTERVAL = 1.0

SCRIPT = resources.files("otel_breaker.store").joinpath("redis_script.lua").read_text(encoding="utf-8")


class RedisStore:
    """Creates breakers whose state lives in one Redis deployment, shared by every worker.

    ``client``: a ``redis.Redis``, ``redis.asyncio.Redis``, ``redis.cluster.RedisCluster``
    or ``redis.asyncio.cluster.RedisCluster`` (a plain client pointed at a Cluster
    node is switched to a Cluster client on first use). Give it a short
    ``socket_timeout`` and no retries (``retry=Retry(NoBackoff(), 0)``), as
    :meth:`from_url` does: a retried script could count an outcome twice.
    """

    name = "redis"

    def __init__(
        self,
        client: Any = None,
        *,
        prefix: str = DEFAULT_PREFIX,
        per_agent: bool = False,
        cautious: bool = True,
        rejoin_interval: float = REJOIN_INTERVAL,
        watch: bool = True,
        url: str | None = None,
        clients: Clients | None = None,
        report_interval: float | None = REPORT_INTERVAL,
    ) -> None:
        if not prefix or any(c in prefix for c in "{}*?[]\\"):
            raise StoreError(f"invalid Redis key prefix {prefix!r}: non-empty, without {{ }} * ? [ ] \\")
        if clients is None:
            if client is None:
                raise StoreError("RedisStore needs a redis client (or use RedisStore.from_url)")
            clients = Clients(client=client)
        self._clients = clients
        self.prefix = prefix
        self.per_agent = per_agent
        self.cautious = cautious
        self.rejoin_interval = rejoin_interval
        self.url = url
        # Named like the keys ({prefix:...}), so one ACL pattern covers both: `~{prefix:* &{prefix:*`.
        self.channel = channel_name(prefix)
        #: This store's id on the change feed (new in a forked child): its own changes are not followed.
        self.origin = secrets.token_hex(6)
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
        self._breakers: dict[str, weakref.WeakSet[CircuitBreaker]] = {}
        self._watch = watch
        self._feed = ChangeFeed(self)
        self._reporter = Reporter(self, report_interval) if report_interval else None
        self._script: Any = None
        self._ascript: Any = None
        self._closed = False
        _STORES.add(self)

    def __repr__(self) -> str:
        return f"<RedisStore {mask_url(self.url) if self.url else self._clients.mode} prefix={self.prefix!r}>"

    @property
    def client(self) -> Any:
        """The sync client (a ``RedisCluster`` on a Cluster); the first access may connect. The change
        feed subscribes, the reports' pipeline and the command line's scan run, through it."""
        return self._clients.sync()

    @property
    def mode(self) -> str:
        """``single``, ``cluster`` or ``sentinel`` (``auto`` until a plain URL's server was asked)."""
        return self._clients.mode

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
        """A store for a URL: ``redis://[:password@]host:port/db`` (``rediss://`` TLS, ``unix://path``),
        ``redis+cluster://host:port[,host:port]`` or ``redis+sentinel://host:26379[,...]/service[/db]``.

        Query options ``per_agent=true``, ``cautious=false`` and ``prefix=...``
        are the store's; ``sentinel_password``/``sentinel_username`` are the
        Sentinels' credentials; the rest go to redis-py. ``prefix``/``password``
        default to ``OTEL_BREAKER_REDIS_PREFIX``/``OTEL_BREAKER_REDIS_PASSWORD``.
        Nothing connects here: a Redis that is down at start-up is joined when it
        answers. Async calls run the client in a small shared thread pool, never
        in the event loop; ``asyncio`` is accepted for compatibility and changes nothing.
        """
        require_redis()
        target, ours = parse_url(url)
        if prefix is None or password is None:
            settings = get_settings()
            if prefix is None:
                prefix = ours.get("prefix") or settings.redis_prefix or DEFAULT_PREFIX
            if password is None:
                password = settings.redis_password
        try:
            clients = Clients(target=target, socket_timeout=socket_timeout, password=password)
        except (ValueError, TypeError) as exc:
            raise StoreError(f"invalid Redis URL {mask_url(url)!r}: {exc}") from None
        if "per_agent" in ours:
            options.setdefault("per_agent", parse_switch(ours["per_agent"]) is True)
        if "cautious" in ours:
            options.setdefault("cautious", parse_switch(ours["cautious"]) is True)
        return cls(prefix=prefix, url=url, clients=clients, **options)

    # -- breakers --------------------------------------------------------------

    def key_for(self, tool: str | ToolKey, agent_name: str | None = None, session_id: str | None = None) -> str:
        """The Redis key of a breaker: ``{prefix:k:agent/tool/where}``, or
        ``{prefix:s:session:agent/tool/where}`` in a session (one hash tag per
        breaker, so a Cluster keeps its keys in one slot).

        ``tool`` is the registry's :class:`ToolKey`; a bare name stands for
        ``ToolKey(agent_name, name, None)``. Nothing process-local is in it, so every
        worker running the same tool code under the same agent name finds it."""
        key = tool if isinstance(tool, tuple) else ToolKey(agent_name, tool, None)
        return breaker_key(self.prefix, key, session_id)

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
        if identity is None:  # made directly, not through a registry: keyed by name (and agent with per_agent)
            identity = ToolKey(agent_name if self.per_agent else None, tool, None)
        if session_id is not None:
            ttl = SESSION_TTL
        elif identity.agent:
            ttl = AGENT_TTL
        else:
            ttl = TOOL_TTL
        redis_key = self.key_for(identity, session_id=session_id)
        storage = RedisStorage(self, redis_key, ttl)
        breaker = CircuitBreaker(
            tool, config, clock=clock, agent_name=agent_name, session_id=session_id, storage=storage
        )
        with self._lock:
            self._breakers.setdefault(redis_key, weakref.WeakSet()).add(breaker)
        self._start_watching()
        self._start_reporting()
        return breaker

    def breakers(self) -> list[CircuitBreaker]:
        with self._lock:
            return [b for group in self._breakers.values() for b in group]

    def breakers_at(self, key: str) -> list[CircuitBreaker]:
        """This process's breakers whose state lives at ``key``: the change feed applies a
        message naming that key to each of them."""
        with self._lock:
            group = self._breakers.get(key)
            return list(group) if group else []

    def forget(self, breaker: CircuitBreaker) -> None:
        """Stop following ``breaker``: its storage calls this when the registry drops it."""
        key = breaker.storage.key  # type: ignore[union-attr]
        if self._reporter is not None:
            self._reporter.forget(breaker)  # what it counted since the last report is still reported
        with self._lock:
            group = self._breakers.get(key)
            if group is not None:
                group.discard(breaker)
                if not group:
                    del self._breakers[key]

    # -- talking to Redis ------------------------------------------------------------

    @property
    def ready_client(self) -> Any:
        """The sync client if it is built and the deployment known, else None; never connects.
        The change feed reads a Cluster's slot map again through it after a node failed,
        without opening a connection of its own to ask."""
        return self._clients.ready()

    def sync_script(self) -> Any:
        """The script on the sync client (the workers' reports run it by its SHA in a pipeline).

        The first time on a client (the store's first connection, and again after a fork or a
        rebuilt Cluster client), the Redis user's permissions are checked: a user refused the
        channel or a command would otherwise share nothing from the first opening on, with an
        error naming neither."""
        client = self._clients.sync()
        script = self._script
        if script is None or script.registered_client is not client:
            script = client.register_script(SCRIPT)
            self._require_access(script)
            self._script = script
        return script

    def _require_access(self, script: Any) -> None:
        """Raise :class:`StoreError` naming every command the Redis user may not run here."""
        reply = script(access_keys(self.prefix), ("access", f"{self.origin}@{self.channel}"))
        refused = [text(line) for line in reply or ()]
        if self._watch:
            try:
                self._feed.check_subscribe()
            except Exception as exc:
                if not is_permission_error(exc):
                    raise
                refused.append(f"SUBSCRIBE {self.channel}: {exc}")
        if refused:
            raise StoreError(missing_permissions(self.prefix, refused, self._clients.username, self.url))

    def run_script(self, keys: tuple[str, ...], op: str, args: Iterable[Any], extra: Iterable[Any] = ()) -> list[Any]:
        """One script run (EVALSHA; redis-py's Script loads it again after NOSCRIPT): every decision
        a breaker's storage and the command line's manual control make is one."""
        return self.sync_script()(keys, (op, *args, *extra))

    async def arun_script(
        self, keys: tuple[str, ...], op: str, args: Iterable[Any], extra: Iterable[Any] = ()
    ) -> list[Any]:
        """The same for a breaker's async call: the event loop never waits on a socket.

        Through the asyncio client the store was given, if any, in an asyncio loop;
        otherwise the sync client runs in a small thread pool shared by every event
        loop, awaited the way the running loop awaits (asyncio, uvloop or trio). Measured,
        that is faster than an asyncio client per loop, and it opens no new
        connections for frameworks that start a loop per call (``asyncio.run``).
        """
        clients = self._clients
        client = clients.given_async
        # An asyncio client runs only in an asyncio loop; under trio the sync client runs in the pool.
        if client is None or not running_asyncio():
            return await run_blocking(_executor(), self.run_script, keys, op, args, extra)
        if self._script is None:  # ask the server what it is, and check the user's permissions, once
            await run_blocking(_executor(), self.sync_script)
        script = self._ascript
        if script is None:
            script = self._ascript = client.register_script(SCRIPT)
        return await script(keys, (op, *args, *extra))

    def check(self) -> None:
        """Connect, authenticate, check the user's permissions (every command of the script, the
        change feed's channel) and run the script once; raises :class:`StoreError` saying what is
        wrong in one line."""
        try:
            self._clients.sync().ping()
            self._script = None  # check the permissions now, even on a client already used
            self.run_script(access_keys(self.prefix), "ping", ())
        except Exception as exc:
            raise StoreError(describe_error(exc, self.url, self.prefix, self._clients.username)) from None

    # -- outage handling -----------------------------------------------------------------

    def mark_failed(self, exc: BaseException) -> None:
        """A Redis call failed: decide locally until ``rejoin_interval`` has passed. A breaker's
        storage calls this when its script run fails, so every breaker of the store stops asking."""
        with self._lock:
            self.error_count += 1
            self._retry_at = time.monotonic() + self.rejoin_interval
            first = not self.degraded
            self.degraded = True
            self.last_error = describe_error(exc, self.url, self.prefix, self._clients.username)
        if first:
            self._invalidate()
            logger.warning(
                "otel-breaker: %s; breakers decide per process until Redis answers again (retrying every %gs)",
                self.last_error,
                self.rejoin_interval,
            )
        else:
            logger.debug("otel-breaker: Redis store still unusable: %s", exc)

    def claim_retry(self) -> bool:
        """While degraded: True for one caller per ``rejoin_interval`` (that call tries Redis).
        A breaker's storage asks before a round trip, so an outage costs one timeout per interval."""
        now = time.monotonic()
        if now < self._retry_at:
            return False
        with self._lock:
            if now < self._retry_at:
                return False
            self._retry_at = now + self.rejoin_interval
            return True

    def mark_answered(self) -> None:
        """A script run came back: Redis is usable again. A breaker's storage calls this after
        each reply, so the first one after an outage ends it for every breaker of the store."""
        if self.degraded:
            with self._lock:
                was = self.degraded
                self.degraded = False
            if was:
                logger.warning("otel-breaker: Redis store answers again; breakers are shared again")

    def _invalidate(self) -> None:
        """Local decisions are no longer safe (a feed gap or an outage): every breaker asks Redis next time."""
        for breaker in self.breakers():
            breaker.storage.invalidate(breaker)  # type: ignore[union-attr]

    # -- following other workers' changes ---------------------------------------------------

    def _start_watching(self) -> None:
        if self._watch and not self._closed:
            self._feed.start()

    def _start_reporting(self) -> None:
        if self._reporter is not None and not self._closed:
            self._reporter.start()

    def report(self) -> bool:
        """Send this worker's rejections and call durations now (the reporting thread does it every
        ``report_interval`` seconds); True when Redis has them all, False when they are kept for later."""
        return self._reporter.flush() if self._reporter is not None else True

    def _after_fork(self) -> None:
        """In a forked child the change feed thread and the sockets are the parent's: start over."""
        self._lock = threading.Lock()
        self.origin = secrets.token_hex(6)  # the parent's changes are another worker's now
        for group in list(self._breakers.values()):
            for breaker in list(group):
                breaker.storage.configure(breaker)
        self._clients.after_fork()
        self._feed.after_fork()
        if self._reporter is not None:
            self._reporter.after_fork()
        self.watching = False
        self._watch_epoch += 1
        self._invalidate()
        if self._breakers and not self._closed:
            self._start_watching()
            self._start_reporting()

    @property
    def watch_epoch(self) -> int:
        """Bumped on every change of ``watching``. A breaker's storage reads it before a round
        trip: a reply sent before the change feed's state changed may not allow local admission."""
        return self._watch_epoch

    def set_watching(self, watching: bool) -> None:
        """The change feed is subscribed (or lost): its thread says so here, and every breaker
        asks Redis before its next local decision."""
        with self._lock:
            self._watch_epoch += 1
            self.watching = watching
        self._invalidate()

    def close(self) -> None:
        """Stop following changes, send what is left to report, and release the connections."""
        self._closed = True
        self._feed.stop()
        if self._reporter is not None:
            self._reporter.stop()
        self._clients.close()

    # -- administration (the command line) -----------------------------------------------

    def control(self, key: str, op: str, *extra: Any, tool: str = "", agent: str = "", session: str = "") -> None:
        """Run a manual operation (``open``/``close``/``reset``) on the breaker stored at ``key``."""
        redis_admin.control(self, key, op, *extra, tool=tool, agent=agent, session=session)

    def snapshot(self) -> list[dict[str, Any]]:
        """Every breaker under this prefix, as plain values (for ``status``); on a Cluster, from every primary."""
        return redis_admin.snapshot(self)


_STORES: weakref.WeakSet[RedisStore] = weakref.WeakSet()
#: Threads that run the sync client for async calls (shared by every store and event loop).
EXECUTOR_THREADS = 4
_EXECUTOR: ThreadPoolExecutor | None = None
_EXECUTOR_LOCK = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _EXECUTOR
    executor = _EXECUTOR
    if executor is None:
        with _EXECUTOR_LOCK:
            if _EXECUTOR is None:
                _EXECUTOR = ThreadPoolExecutor(EXECUTOR_THREADS, thread_name_prefix="otel-breaker-redis")
            executor = _EXECUTOR
    return executor


def _reinit_after_fork() -> None:
    global _EXECUTOR, _EXECUTOR_LOCK
    _EXECUTOR = None  # the parent's threads do not exist in the child
    _EXECUTOR_LOCK = threading.Lock()
    for store in list(_STORES):
        store._after_fork()


def _report_at_exit() -> None:
    """A worker that exits sends what it has not reported yet (one try each, bounded by the socket
    timeout): a short-lived worker's rejections and durations reach the fleet's board too."""
    for store in list(_STORES):
        if not store._closed:
            try:
                store.report()
            except Exception:
                pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)
atexit.register(_report_at_exit)
