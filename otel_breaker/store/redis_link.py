"""What the parts of the Redis store need of the store, as protocols.

``redis_store.RedisStore`` implements them; the parts it is built from (the
storage each breaker delegates to, the change feed, the command line's view)
are typed against these instead of importing it, so the ``redis_*`` modules
form layers with the store on top, and no import runs back up, not even one
only read by a type checker.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any, Protocol

from otel_breaker.breaker import CircuitBreaker
from otel_breaker.store.redis_setup import Clients


class ScriptStore(Protocol):
    """The store as a breaker's storage (``redis_storage.RedisStorage``) sees it."""

    #: This store's id on the change feed, and the channel it publishes on.
    origin: str
    channel: str
    #: Pending outcomes count against the threshold (cautious admission).
    cautious: bool
    #: The change feed is subscribed: local closed-state admission is safe.
    watching: bool
    #: Redis is unusable: breakers decide locally.
    degraded: bool
    #: Bumped on every change of ``watching``: a reply older than it is not trusted locally.
    _watch_epoch: int

    def _forget(self, breaker: CircuitBreaker) -> None: ...
    def _eval(self, keys: tuple[str, ...], op: str, args: Iterable[Any], extra: Iterable[Any] = ()) -> list[Any]: ...
    async def _aeval(
        self, keys: tuple[str, ...], op: str, args: Iterable[Any], extra: Iterable[Any] = ()
    ) -> list[Any]: ...
    def _try_again(self) -> bool: ...
    def _failed(self, exc: BaseException) -> None: ...
    def _answered(self) -> None: ...


class FeedStore(Protocol):
    """The store as its change feed (``redis_feed.ChangeFeed``) sees it."""

    origin: str
    channel: str
    watching: bool
    rejoin_interval: float
    _clients: Clients
    _breakers: dict[str, weakref.WeakSet[CircuitBreaker]]

    @property
    def mode(self) -> str: ...
    def _set_watching(self, watching: bool) -> None: ...


class AdminStore(ScriptStore, Protocol):
    """The store as the command line's view (``redis_admin``) sees it: it also builds
    storages of its own for breakers it does not follow."""

    prefix: str
    _clients: Clients


class ReportStore(Protocol):
    """The store as its workers' reports (``redis_report.Reporter``) see it."""

    #: This store's id (new in a forked child): its reports are numbered under it.
    origin: str
    _clients: Clients

    def breakers(self) -> list[CircuitBreaker]: ...
    def _sync_script(self) -> Any: ...
