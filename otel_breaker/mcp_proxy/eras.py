"""The two eras of MCP, on both sides of the proxy.

MCP has two protocol eras. The handshake era (2024-11-05 to 2025-11-25) opens a
connection with ``initialize``; the 2026-07-28 era has no handshake: a client asks
``server/discover``, every request carries its own envelope (protocol version,
client info and capabilities in ``params._meta``), a server sends no requests of
its own, and change notifications reach a client only on a ``subscriptions/listen``
stream it opened. The ``mcp`` SDK speaks both; this module lets the proxy use it on
both sides, era by era:

* **Its clients.** Each client is served in the era it opens with (over stdio the
  first request decides; over HTTP each request's ``MCP-Protocol-Version`` header),
  by the SDK's own server loops. The proxy serves ``subscriptions/listen``: every
  change notification it would send a handshake client (a server's list changed,
  a tool hidden or back on the menu, a resource updated) is also published to the
  listen streams of 2026-07-28 clients (:class:`Subscriptions`).
* **Its servers.** Each server is connected in the handshake era when it speaks
  it, else in the 2026-07-28 era (``server/discover``: :func:`negotiate`). A
  request is sent in the server's era whatever the client's: a 2026-07-28 client's
  envelope is taken off before the request reaches a server (the proxy is that
  server's client and sends its own envelope, :func:`outgoing`), and the
  change notifications of a 2026-07-28 server come from a listen stream the
  proxy opens (:func:`relay_events`).

What cannot cross between the eras is said in docs/mcp-proxy.md: a 2026-07-28
server sends no sampling, elicitation or roots requests (it answers
``input_required`` instead, passed to the client as it is), and a 2026-07-28
client receives none (a handshake server asking through the proxy gets an error).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio
import mcp.types as types
from mcp.client.session import ClientSession
from mcp.client.subscriptions import listen
from mcp.server.lowlevel.server import Server
from mcp.server.runner import serve_dual_era_loop
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import event_from_wire, event_to_notification
from mcp_types import LOG_LEVEL_META_KEY, METHOD_NOT_FOUND, UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from otel_breaker.sanitize import bounded

logger = logging.getLogger("otel_breaker")

T = TypeVar("T")

#: The prefix the spec reserves for its own ``_meta`` keys (the 2026-07-28 envelope among them).
RESERVED_META_PREFIX = "io.modelcontextprotocol/"
#: At most this many listen streams of the proxy's clients are open at once.
MAX_LISTEN_STREAMS = 256


def is_modern(protocol_version: str | None) -> bool:
    """Whether ``protocol_version`` is of the 2026-07-28 era (no handshake, an envelope per request)."""
    return protocol_version in MODERN_PROTOCOL_VERSIONS


# -- the proxy's clients -----------------------------------------------------------------------------


class Subscriptions:
    """The ``subscriptions/listen`` streams of the proxy's 2026-07-28 clients.

    The SDK's :class:`ListenHandler` serves the streams (the acknowledgement first,
    each frame stamped with its subscription, only the kinds a client asked for);
    :meth:`publish` takes the change notifications the proxy sends its handshake
    clients and puts them on those streams."""

    def __init__(self) -> None:
        self._bus = InMemorySubscriptionBus()
        self.handler = ListenHandler(self._bus, max_subscriptions=MAX_LISTEN_STREAMS)

    def serve(self, server: Server[Any]) -> None:
        """Answer ``subscriptions/listen`` on ``server`` (its ``server/discover`` then says
        that the lists announce their changes)."""
        server.add_request_handler("subscriptions/listen", types.SubscriptionsListenRequestParams, self.handler)

    async def publish(self, notification: Any) -> None:
        """A change notification for every listen stream that asked for its kind; any
        other notification (a log message, progress) is not a listen-stream event."""
        method = getattr(notification, "method", None)
        if not isinstance(method, str):
            return
        params = getattr(notification, "params", None)
        wire = params.model_dump(by_alias=True, mode="json", exclude_none=True) if params is not None else None
        event = event_from_wire(method, wire)
        if event is None:
            return
        try:
            await self._bus.publish(event)
        except Exception:  # a stream that is gone never stops the others
            logger.debug("otel-breaker: mcp-proxy: a listen stream is gone", exc_info=True)


def in_client_era(protocol_version: str | None, result: Any) -> Any:
    """A ``tools/call`` result the proxy answers as the wire's dict (the server's own, or
    the proxy's rejection), in the era of the client that asked: a 2026-07-28 result
    says its ``resultType`` (the spec requires it; a handshake server never sends one),
    and a handshake client gets no ``resultType`` of a complete result, a field of its
    era's results neither. An ``input_required`` result is the client's to handle."""
    wire = result.model_dump(by_alias=True, mode="json", exclude_none=True) if hasattr(result, "model_dump") else result
    if not isinstance(wire, dict):
        return result
    if is_modern(protocol_version):
        return wire if "resultType" in wire else {**wire, "resultType": "complete"}
    if wire.get("resultType") == "complete":
        return {k: v for k, v in wire.items() if k != "resultType"}
    return wire


async def serve_stdio(server: Server[Any], read: Any, write: Any) -> None:
    """Serve the stdio client in the era its first request opens (the SDK's dual-era loop)."""
    await serve_dual_era_loop(
        server, read, write, lifespan_state={}, init_options=server.create_initialization_options()
    )


# -- the proxy's servers -----------------------------------------------------------------------------


async def negotiate(session: ClientSession, fallback_name: str) -> types.InitializeResult:
    """Connect ``session`` and return what the server declared, in the shape of an
    ``initialize`` answer (the rest of the proxy reads that one shape).

    The handshake comes first: a server that speaks both eras is connected in the
    handshake era, where it can still ask the proxy's handshake clients for sampling,
    elicitation and roots (a 2026-07-28 connection has no server requests), and the
    proxy's 2026-07-28 clients are served all the same. A server that refuses the
    handshake (``UNSUPPORTED_PROTOCOL_VERSION``, or ``initialize`` unknown) speaks
    only 2026-07-28: it is asked ``server/discover`` (the SDK's probe, which agrees on
    a version). Such a server need not name itself: then it is named
    ``fallback_name`` (its command or URL), so its breakers still have a stable name."""
    try:
        return await session.initialize()
    except MCPError as exc:
        if exc.code not in (UNSUPPORTED_PROTOCOL_VERSION, METHOD_NOT_FOUND):
            raise
    discovered = await session.discover()
    info = session.server_info or types.Implementation(name=bounded(fallback_name, 128), version="")
    return types.InitializeResult(
        protocol_version=session.protocol_version or discovered.supported_versions[-1],
        capabilities=discovered.capabilities,
        server_info=info,
        instructions=discovered.instructions,
    )


def _without_envelope(meta: Mapping[str, Any], *, modern: bool) -> dict[str, Any]:
    """``_meta`` without the spec's reserved keys a client sent (its envelope: the proxy is
    the server's client and sends its own). A client's log opt-in stays for a 2026-07-28
    server, which sends log messages only to requests that ask for them."""
    kept = {k: v for k, v in meta.items() if not (isinstance(k, str) and k.startswith(RESERVED_META_PREFIX))}
    if modern and LOG_LEVEL_META_KEY in meta:
        kept[LOG_LEVEL_META_KEY] = meta[LOG_LEVEL_META_KEY]
    return kept


def outgoing(
    session: ClientSession, method: str, params: Mapping[str, Any] | None, options: CallOptions
) -> tuple[dict[str, Any] | None, CallOptions]:
    """A request forwarded as the wire's dicts, made a request of the server's era: the
    client's envelope taken off, and for a 2026-07-28 server the proxy's own envelope
    and headers put on (the SDK session's stamp, as for the requests it sends itself)."""
    modern = is_modern(session.protocol_version)
    sent: dict[str, Any] | None = dict(params) if params is not None else None
    if sent is not None and isinstance(sent.get("_meta"), Mapping):
        meta = _without_envelope(sent["_meta"], modern=modern)
        if meta:
            sent["_meta"] = meta
        else:
            del sent["_meta"]
    if not modern:
        return sent, options
    data: dict[str, Any] = {"method": method, "params": sent if sent is not None else {}}
    stamped: CallOptions = {**options, "headers": dict(options.get("headers") or {})}
    # The MCP SDK's own private ``ClientSession._stamp`` (the 2026-07-28 era): it writes the
    # session's per-request envelope and headers; the SDK offers no public way to get them for
    # a request sent through another route, and writing them by hand would drift from the SDK.
    session._stamp(data, stamped)
    return data["params"], stamped


async def send(
    session: ClientSession,
    request: Any,
    result_type: type[T],
    progress: Callable[[float, float | None, str | None], Awaitable[None]] | None = None,
) -> T:
    """Send a typed request in the server's era: the client's envelope taken off (the
    session puts on its own for a 2026-07-28 server). ``ping`` is gone at 2026-07-28: the
    probe of a half-open server is ``server/discover`` there."""
    modern = is_modern(session.protocol_version)
    if isinstance(request, types.PingRequest) and modern:
        assert session.protocol_version is not None
        await session.send_discover(session.protocol_version)
        return result_type.model_validate({})  # type: ignore[attr-defined,no-any-return]
    params = getattr(request, "params", None)
    meta = getattr(params, "meta", None)
    if isinstance(meta, Mapping) and any(isinstance(k, str) and k.startswith(RESERVED_META_PREFIX) for k in meta):
        cleaned = _without_envelope(meta, modern=modern) or None
        request = request.model_copy(update={"params": params.model_copy(update={"meta": cleaned})})
    return await session.send_request(request, result_type, progress_callback=progress)


@contextlib.asynccontextmanager
async def relay_events(session: ClientSession, deliver: Callable[[Any], Awaitable[None]]) -> AsyncIterator[None]:
    """While the block runs: a 2026-07-28 server's change notifications, from a
    ``subscriptions/listen`` stream the proxy opens, go to ``deliver`` as the
    notifications a handshake server would have sent. Nothing for a handshake
    server (its notifications come on the connection)."""
    if not is_modern(session.protocol_version):
        yield
        return
    async with anyio.create_task_group() as group:
        group.start_soon(_relay, session, deliver)
        try:
            yield
        finally:
            group.cancel_scope.cancel()


async def _relay(session: ClientSession, deliver: Callable[[Any], Awaitable[None]]) -> None:
    caps = session.server_capabilities
    kinds = {
        "tools_list_changed": bool(caps and caps.tools and caps.tools.list_changed),
        "prompts_list_changed": bool(caps and caps.prompts and caps.prompts.list_changed),
        "resources_list_changed": bool(caps and caps.resources and caps.resources.list_changed),
    }
    if not any(kinds.values()):
        return
    try:
        async with listen(session, **kinds) as subscription:
            async for event in subscription:
                await deliver(event_to_notification(event, {}))
    except anyio.get_cancelled_exc_class():
        raise
    except Exception as exc:  # the stream ended: the next connection opens a new one
        logger.debug("otel-breaker: mcp-proxy: a server's listen stream ended: %r", exc)
