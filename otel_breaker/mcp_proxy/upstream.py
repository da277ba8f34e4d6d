"""One MCP server behind the proxy: its connection, kept alive by a restart supervisor.

The proxy's client keeps one session with the proxy; behind it, each server is an
:class:`UpstreamLink` that connects (spawning the stdio command, or opening a
streamable-HTTP session), initializes, and forwards requests. When the server
process dies or the connection drops, requests in flight fail with the SDK's
"Connection closed" error and new ones with :class:`UpstreamUnavailable`: both
are transport failures, which the server's upstream breaker counts. The
supervisor then starts the server again, waiting ``restart_delay`` seconds,
doubled after each start that fails, up to ``max_restart_delay``; a restart
never ends the client's session.

Requests the server sends (sampling, elicitation, roots) and its notifications
go to the :class:`Downstream` the proxy gives, which forwards them to the client.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from typing import Any, Protocol, TypeVar

import anyio
import httpx2
import mcp.types as types
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import CallOptions
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

from otel_breaker import __version__
from otel_breaker.instrumentation.mcp_identity import implementation_identity
from otel_breaker.mcp_proxy.child import server_stdio
from otel_breaker.mcp_proxy.eras import negotiate, outgoing, relay_events, send
from otel_breaker.mcp_proxy.options import DEFAULT_SERVER_NAME, ServerSpec
from otel_breaker.sanitize import bounded

logger = logging.getLogger("otel_breaker")

T = TypeVar("T")

#: How the proxy introduces itself to the servers behind it.
CLIENT_INFO = types.Implementation(name="otel-breaker-mcp-proxy", version=__version__)
# A connection that stayed up this long resets the restart back-off.
_HEALTHY_AFTER = 10.0


class UpstreamUnavailable(ConnectionError):
    """The server is not connected (starting, or restarting after it died): a transport failure."""


class Downstream(Protocol):
    """Where a server's own messages go: the proxy's client side."""

    async def notify(self, link: UpstreamLink, notification: Any) -> None: ...

    async def request(self, link: UpstreamLink, request: Any, result_type: type[T]) -> T | types.ErrorData: ...

    async def connected(self, link: UpstreamLink) -> None: ...


class UpstreamLink:
    """One server behind the proxy, connected and restarted as needed."""

    def __init__(
        self,
        spec: ServerSpec,
        downstream: Downstream | None = None,
        *,
        restart_delay: float = 0.5,
        max_restart_delay: float = 30.0,
    ) -> None:
        self.spec = spec
        self.downstream = downstream
        """Where the server's own messages go (set before :meth:`run`)."""
        self._restart_delay = restart_delay
        self._max_restart_delay = max_restart_delay
        self._session: ClientSession | None = None
        self._dispatcher: JSONRPCDispatcher[Any] | None = None
        self._options: CallOptions = {}
        self.protocol_version: str | None = None
        """The protocol version the server and the proxy agreed on."""
        self.initialize_result: types.InitializeResult | None = None
        self.server_identity: str | None = None
        """The server's ``name@version`` from ``initialize`` (else its command or URL)."""
        self.qualify = False
        """Set when another server of the proxy reports the same ``name@version``."""
        self.starts = 0
        """How many times the server was connected (1 + restarts)."""

    @property
    def identity(self) -> str | None:
        """The source of the server's tools and the name of its upstream breaker: its
        ``name@version``, as for an in-process MCP client of the same server, so the
        breakers are the same ones (and shared through a store). Two servers of one
        proxy that report the same ``name@version`` are told apart by their names."""
        if self.qualify and self.server_identity is not None:
            return f"{self.server_identity}#{self.spec.name}"
        return self.server_identity

    @property
    def label(self) -> str:
        """The server as the proxy's messages name it: its breaker's name (``name@version``,
        as the status endpoint and the spans show it) once it has answered ``initialize``,
        with its ``--config`` entry's name when it has one; before that, the entry's name,
        or the command or URL it was started with."""
        named = self.spec.name != DEFAULT_SERVER_NAME
        if self.identity is None:
            return self.spec.name if named else bounded(self.spec.describe(), 120)
        return f"{self.identity} ({self.spec.name})" if named else self.identity

    @property
    def restarting(self) -> str:
        """What the supervisor does when the server is gone: a stdio server's process is
        started again ("restarting"); an HTTP server is only connected to again ("reconnecting")."""
        return "reconnecting" if self.spec.url is not None else "restarting"

    @property
    def connected(self) -> bool:
        return self._session is not None

    async def request(
        self,
        request: Any,
        result_type: type[T],
        progress: Callable[[float, float | None, str | None], Awaitable[None]] | None = None,
    ) -> T:
        """Send ``request`` to the server and return its typed result.

        Raises :class:`UpstreamUnavailable` while the server is not connected, the
        SDK's ``MCPError`` for an error answer (or "Connection closed" when it dies)."""
        session = self._session
        if session is None:
            raise UpstreamUnavailable(f"MCP server {self.label} is not connected ({self.restarting})")
        return await send(session, request, result_type, progress)

    async def request_raw(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        progress: Callable[[float, float | None, str | None], Awaitable[None]] | None = None,
    ) -> dict[str, Any]:
        """Send a request as the wire's dicts and return the server's result as it came.

        What the client sent is forwarded as it is, and the server's answer reaches
        the client as it is: nothing is parsed into models and written back (the
        client validates the result, as it would talking to the server directly).
        Raises as :meth:`request` does."""
        session, dispatcher = self._session, self._dispatcher
        if session is None or dispatcher is None:
            raise UpstreamUnavailable(f"MCP server {self.label} is not connected ({self.restarting})")
        options = self._options
        if progress is not None:
            options = {**options, "on_progress": progress}
        sent, options = outgoing(session, method, params, options)
        return await dispatcher.send_raw_request(method, sent, options)

    async def notify(self, notification: Any) -> None:
        """Send a notification to the server; dropped while it is not connected."""
        session = self._session
        if session is not None:
            await session.send_notification(notification)

    # -- the supervisor ------------------------------------------------------------------------------

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect, serve until the connection ends, restart; forever (until cancelled).

        ``task_status.started()`` is called after the first successful connection;
        a first connection that fails raises, so the proxy can say why it cannot start."""
        delay = self._restart_delay
        first = True
        while True:
            started_at = anyio.current_time()
            try:
                await self._connect_once(task_status if first else None)
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                if first and self.starts == 0:
                    raise
                logger.warning(
                    "otel-breaker: mcp-proxy: MCP server %s: %s",
                    self.label,
                    bounded(describe_error(exc), 300),
                )
            finally:
                self._session = None
                self._dispatcher = None
            first = False
            if anyio.current_time() - started_at >= _HEALTHY_AFTER:
                delay = self._restart_delay
            logger.warning(
                "otel-breaker: mcp-proxy: MCP server %s is down; %s in %.3gs", self.label, self.restarting, delay
            )
            await anyio.sleep(delay)
            delay = min(delay * 2, self._max_restart_delay)

    async def _connect_once(self, task_status: anyio.abc.TaskStatus[None] | None) -> None:
        async with AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._transport())
            ended = anyio.Event()
            # The session's own dispatcher, built here so a tools/call can be forwarded as
            # the wire's dicts (:meth:`request_raw`); the server's messages reach it
            # directly, their end being the sign the connection is gone.
            dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(_Watched(read, ended), write)
            session = await stack.enter_async_context(
                ClientSession(
                    sampling_callback=self._sampling,
                    elicitation_callback=self._elicitation,
                    list_roots_callback=self._list_roots,
                    message_handler=self._message,
                    client_info=CLIENT_INFO,
                    dispatcher=dispatcher,
                )
            )
            with anyio.fail_after(60):
                result = await negotiate(session, self.spec.describe())
            self.initialize_result = result
            self.server_identity = implementation_identity(result.server_info) or bounded(self.spec.describe(), 128)
            self._dispatcher = dispatcher
            self._options = _call_options(session.protocol_version or result.protocol_version)
            self.protocol_version = session.protocol_version or result.protocol_version
            self._session = session
            self.starts += 1
            if self.starts > 1:
                done = "reconnected" if self.spec.url is not None else "restarted"
                logger.warning("otel-breaker: mcp-proxy: MCP server %s %s", self.label, done)
            await self._to_client().connected(self)
            if task_status is not None:
                task_status.started()
            async with relay_events(session, self._message):
                await ended.wait()
            self._session = None
            raise UpstreamUnavailable("the connection closed (the server exited)")

    def _transport(self) -> Any:
        spec = self.spec
        if spec.url is not None:
            # The SDK's recommended timeouts: a server may hold a response stream open.
            client = httpx2.AsyncClient(headers=dict(spec.headers), timeout=httpx2.Timeout(30.0, read=300.0))
            return _HttpTransport(spec.url, client)
        assert spec.command is not None
        params = StdioServerParameters(
            command=spec.command,
            args=list(spec.args),
            # The server gets the proxy's environment, as a client would have given it.
            env={**os.environ, **spec.env},
            cwd=spec.cwd,
        )
        return server_stdio(params)

    # -- the server's own messages, to the client -------------------------------------------------------

    def _to_client(self) -> Downstream:
        assert self.downstream is not None, "UpstreamLink.downstream is set before run()"
        return self.downstream

    async def _message(self, message: Any) -> None:
        if isinstance(message, Exception):
            logger.debug("otel-breaker: mcp-proxy: transport error from %s: %r", self.label, message)
            return
        await self._to_client().notify(self, message)

    async def _sampling(self, context: ClientRequestContext, params: Any) -> Any:
        result_type = types.CreateMessageResultWithTools if params.tools else types.CreateMessageResult
        return await self._to_client().request(self, types.CreateMessageRequest(params=params), result_type)

    async def _elicitation(self, context: ClientRequestContext, params: Any) -> Any:
        return await self._to_client().request(self, types.ElicitRequest(params=params), types.ElicitResult)

    async def _list_roots(self, context: ClientRequestContext) -> Any:
        return await self._to_client().request(self, types.ListRootsRequest(), types.ListRootsResult)


def _call_options(protocol_version: str | None) -> CallOptions:
    """What the SDK's session sends with each request after the handshake: the
    protocol version header (streamable HTTP; stdio has no headers)."""
    if not protocol_version:
        return {}
    return {"headers": {MCP_PROTOCOL_VERSION_HEADER: protocol_version}}


class _Watched:
    """The server's messages as the session reads them; ``ended`` is set when they end
    (the server exited, the connection dropped, or the session closed)."""

    def __init__(self, stream: Any, ended: anyio.Event) -> None:
        self._stream = stream
        self._ended = ended

    async def receive(self) -> Any:
        try:
            return await self._stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._ended.set()
            raise

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._stream.receive()
        except anyio.EndOfStream:
            self._ended.set()
            raise StopAsyncIteration from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._ended.set()
            raise

    async def aclose(self) -> None:
        self._ended.set()
        await self._stream.aclose()

    async def __aenter__(self) -> _Watched:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _HttpTransport:
    """``streamable_http_client`` with a client carrying the given headers, closed with it."""

    def __init__(self, url: str, client: Any) -> None:
        self._url = url
        self._client = client
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> Any:
        await self._stack.__aenter__()
        try:
            await self._stack.enter_async_context(self._client)
            return await self._stack.enter_async_context(streamable_http_client(self._url, http_client=self._client))
        except BaseException:
            await self._stack.aclose()
            raise

    async def __aexit__(self, *exc: Any) -> bool | None:
        return await self._stack.__aexit__(*exc)


def describe_error(exc: BaseException) -> str:
    """What went wrong, in one line: task groups' wrappers unpacked."""
    group = getattr(exc, "exceptions", None)  # an exception group (anyio's task groups)
    if isinstance(group, tuple) and group:
        return "; ".join(describe_error(e) for e in group[:3])
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
