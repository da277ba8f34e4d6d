"""The change feed: a background thread that follows other workers' transitions.

Every script that changes a breaker publishes ``ver|gen|state|retry|cf|free|key``
on ``{prefix:events}`` with classic ``PUBLISH`` (named like the keys, ``{prefix:...}``, so a
Redis ACL user given the keys' pattern as a channel pattern too, ``&{prefix:*``, may publish
and subscribe; the hash tag plays no part for classic publishing). On one node and under Sentinel
that reaches every subscriber of the primary (and of its replicas, which receive
it through replication). On a Cluster, classic ``PUBLISH`` is broadcast to every
node over the cluster bus, so the feed subscribes to any one node (a random
one, another after a failure). Sharded ``SPUBLISH`` (Redis 7.0+) was not chosen:
it stays inside the publishing key's shard, so one channel per slot owner would
be needed and each worker would subscribe to every shard; transitions are rare,
so the broadcast costs little.

Under Sentinel, publishing reaches only the primary's subscribers (replicas
do not pass messages on), so once a second the feed asks Sentinel which node is
the primary and subscribes again when it moved; asking also moves the store's
idle connections to the new primary.

While the feed is not subscribed, breakers make no local closed-state
decisions (every call asks Redis), and after a gap each breaker asks Redis once
before it rejects locally again, so a missed message never keeps a breaker
open that Redis has closed, nor lets a call through that Redis would refuse.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from otel_breaker.loglines import logger
from otel_breaker.store.redis_setup import SENTINEL, is_cluster_client
from otel_breaker.store.redis_storage import STATES, text

if TYPE_CHECKING:
    from otel_breaker.store.redis_link import FeedStore


#: Seconds between asking Sentinel whether the primary moved.
PRIMARY_CHECK_INTERVAL = 1.0
#: Seconds ``check_subscribe`` waits for the server to confirm the subscription.
CHECK_TIMEOUT = 5.0


class _PrimaryMoved(Exception):
    """Sentinel names another primary than the one the feed listens to."""


class ChangeFeed:
    """Subscribes to a store's channel in a daemon thread and applies what it hears."""

    def __init__(self, store: FeedStore) -> None:
        self._store = store
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._loop, name="otel-breaker-redis-watch", daemon=True)
        self._thread.start()

    def after_fork(self) -> None:
        """In a forked child the thread is gone: start over (the caller restarts it)."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)

    def check_subscribe(self) -> None:
        """Subscribe to the channel once and leave: raises what Redis answers (NOPERM for a
        user refused the channel), so the store's permission check names it in its one line
        (the feed itself retries quietly: an administrator may grant the channel later)."""
        pubsub = self._subscribe()
        try:
            deadline = time.monotonic() + CHECK_TIMEOUT
            while time.monotonic() < deadline:
                message = pubsub.get_message(timeout=0.2)
                if message is not None and text(message.get("type")) == "subscribe":
                    return
        finally:
            pubsub.close()

    def _subscribe(self) -> Any:
        client = self._store.client
        # on a Cluster any node hears every message: a random one spreads the subscribers
        pubsub = client.pubsub(node=client.get_random_node()) if is_cluster_client(client) else client.pubsub()
        pubsub.subscribe(self._store.channel)
        return pubsub

    def _loop(self) -> None:
        store = self._store
        while not self._stop.is_set():
            pubsub = None
            try:
                pubsub = self._subscribe()
                check_at = time.monotonic() + PRIMARY_CHECK_INTERVAL
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=0.2)
                    if store.mode == SENTINEL and time.monotonic() >= check_at:
                        check_at = time.monotonic() + PRIMARY_CHECK_INTERVAL
                        self._check_primary(pubsub)
                    if message is None:
                        continue
                    kind = text(message.get("type"))
                    if kind == "subscribe":
                        store.set_watching(True)
                    elif kind == "message":
                        self._apply(message["data"])
            except _PrimaryMoved:
                store.set_watching(False)
                logger.debug("otel-breaker: Sentinel names a new primary; the change feed follows it")
            except Exception as exc:
                if store.watching:
                    store.set_watching(False)
                    logger.debug("otel-breaker: Redis change feed lost: %s", exc)

                self._refresh_topology()
                self._stop.wait(min(store.rejoin_interval, 1.0))
            finally:
                if pubsub is not None:
                    try:
                        pubsub.close()
                    except Exception:
                        pass
        if store.watching:
            store.set_watching(False)

    def _check_primary(self, pubsub: Any) -> None:
        """Raise :class:`_PrimaryMoved` when the feed's node is no longer Sentinel's primary."""
        pool = self._store.client.connection_pool
        host, port = pool.get_master_address()  # also moves idle connections to a new primary
        connection = pubsub.connection
        if connection is not None and (connection.host, int(connection.port)) != (host, int(port)):
            raise _PrimaryMoved

    def _refresh_topology(self) -> None:
        """After a Cluster node failed, read the slot map again so the next node picked is alive."""
        client = self._store.ready_client
        if client is not None and is_cluster_client(client):
            try:
                client.nodes_manager.initialize()
            except Exception:
                pass

    def _apply(self, data: Any) -> None:
        if not data:  # the permission check's empty message
            return
        try:
            ver, gen, st, retry, cf, free, key = text(data).split("|", 6)
            breakers = self._store.breakers_at(key)
            if not breakers:
                return
            state = STATES[int(st)]
            # "free:origin" (an older publisher sends "free" alone, which reads as not free: safe)
            free, _, origin = free.partition(":")
            own = bool(origin) and origin == self._store.origin
            for breaker in breakers:
                breaker.storage.follow(breaker, int(ver), int(gen), state, int(retry), int(cf), free == "1", own)
        except Exception:
            logger.debug("otel-breaker: ignoring a malformed change message %r", data, exc_info=True)
