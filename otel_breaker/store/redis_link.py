"""What the parts of the Redis store need of the store, as protocols.

``redis_store.RedisStore`` implements them; the parts it is built from (the
storage each breaker delegates to, the change feed, the command line's view)
are typed against these instead of importing it, so the ``redis_*`` modules
form layers with the store on top, and no import runs back up, not even one
only read by a type checker.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from otel_breaker.breaker import CircuitBreaker


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

    @property
    def watch_epoch(self) -> int:
        """Bumped on every change of ``watching``: a reply older than it is not trusted locally."""
        ...

    def forget(self, breaker: CircuitBreaker) -> None:
        """Stop following ``breaker`` (the registry dropped it)."""
        ...

    def run_script(self, keys: tuple[str, ...], op: str, args: Iterable[Any], extra: Iterable[Any] = ()) -> list[Any]:
        """Run the store's script once: ``op`` on ``keys``."""
        ...

    async def arun_script(
        self, keys: tuple[str, ...], op: str, args: Iterable[Any], extra: Iterable[Any] = ()
    ) -> list[Any]:
        """``run_script`` for an async call, without blocking the event loop."""
        ...

    def claim_retry(self) -> bool:
        """While degraded: True for the one caller that tries Redis again now."""
        ...

    def mark_failed(self, exc: BaseException) -> None:
        """A script run failed: the store is degraded."""
        ...

    def mark_answered(self) -> None:
        """A script run came back: the store is no longer degraded."""
        ...


class FeedStore(Protocol):
    """The store as its change feed (``redis_feed.ChangeFeed``) sees it."""

    origin: str
    channel: str
    watching: bool
    rejoin_interval: float

    @property
    def mode(self) -> str: ...

    @property
    def client(self) -> Any:
        """The sync client the feed subscribes through (may connect)."""
        ...

    @property
    def ready_client(self) -> Any:
        """The sync client if built and the deployment known, else None (no I/O)."""
        ...

    def breakers_at(self, key: str) -> list[CircuitBreaker]:
        """This process's breakers at ``key``, which a message naming it moves."""
        ...

    def set_watching(self, watching: bool) -> None:
        """The feed is subscribed, or lost its subscription."""
        ...


class AdminStore(ScriptStore, Protocol):
    """The store as the command line's view (``redis_admin``) sees it: it also builds
    storages of its own for breakers it does not follow."""

    prefix: str

    @property
    def client(self) -> Any:
        """The sync client the scan and the hashes' reads go through."""
        ...


class ReportStore(Protocol):
    """The store as its workers' reports (``redis_report.Reporter``) see it."""

    #: This store's id (new in a forked child): its reports are numbered under it.
    origin: str

    @property
    def client(self) -> Any:
        """The sync client the reports' pipeline goes through."""
        ...

    def breakers(self) -> list[CircuitBreaker]: ...

    def sync_script(self) -> Any:
        """The script registered on the sync client (its SHA and source)."""
        ...
