"""The door of the proxy's HTTP mode: who may send it requests.

A proxy listening on HTTP runs every tool of its servers for whoever reaches it,
so every request passes three checks before the MCP transport sees it:

* ``Host`` names the proxy: the listen address itself, the loopback names when it
  listens on a loopback or wildcard address, or a name given with ``--allow-host``.
  Anything else is answered 421, so a web page whose name an attacker points at
  the proxy's address (DNS rebinding) reaches nothing.
* ``Origin``, when a browser sends one, is ``http(s)://`` one of those names, else 403.
* With a token (``OTEL_BREAKER_PROXY_TOKEN`` or ``--token-file``), every request
  carries ``Authorization: Bearer <token>``, compared in constant time, else 401.

The answers name the header that failed and never echo what was sent.

Behind the door, a request the SDK's transport cannot read because its ``params``
is not an object is answered JSON-RPC "invalid request" (-32600) with its id, as
over stdio (:class:`InvalidRequests`): the SDK answers it with a null id, so the
client could not tell which of its requests failed.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from otel_breaker.mcp_proxy.stdio import malformed_request_id
from otel_breaker.status_server import is_loopback

#: JSON-RPC's "invalid request" (written out: this module does not import the MCP SDK's types).
INVALID_REQUEST = -32600

#: The names of this machine's loopback, accepted on a loopback or wildcard listen address.
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


def allowed_hosts(listen_host: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The host names a request may address the proxy by (lower case, no port)."""
    names = {name.lower() for name in extra}
    if is_wildcard(listen_host) or is_loopback(listen_host):
        names.update(LOOPBACK_NAMES)
    if not is_wildcard(listen_host):
        names.add(listen_host.lower())
    return frozenset(names)


def is_wildcard(host: str) -> bool:
    """Whether ``host`` listens on every address of the machine (0.0.0.0, ::)."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def host_name(value: str) -> str | None:
    """The name part of a ``Host`` header (``name``, ``name:port``, ``[v6]:port``), lower case."""
    try:
        return urlsplit(f"//{value}").hostname
    except ValueError:
        return None


class InvalidRequests:
    """ASGI middleware: a request whose ``params`` is not an object is answered -32600 with its id.

    The body is kept only until the MCP app starts its answer; the SDK's own 400 answer
    to such a request (a null id, and a validation text that echoes what was sent) is
    replaced, every other answer passes as it is."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self._app(scope, receive, send)
            return
        chunks: list[bytes] = []
        replaced = False

        async def keep() -> Message:  # the request's body, kept as the app reads it
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
            return message

        async def answer(message: Message) -> None:
            nonlocal replaced
            if replaced:
                return  # the SDK's own body of the answer replaced
            if message["type"] == "http.response.start":
                request_id = malformed_request_id(b"".join(chunks)) if message["status"] == 400 else None
                chunks.clear()
                if request_id is not None:
                    replaced = True
                    await _invalid_request(request_id)(scope, receive, send)
                    return
            await send(message)

        await self._app(scope, keep, answer)


def _invalid_request(request_id: int | str) -> JSONResponse:
    error = {"code": INVALID_REQUEST, "message": "Invalid request: params must be an object"}
    return JSONResponse({"jsonrpc": "2.0", "id": request_id, "error": error}, status_code=400)


class Door:
    """ASGI middleware in front of the MCP app: Host, Origin and the bearer token."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str], token: str | None) -> None:
        self._app = InvalidRequests(app)
        self._hosts = hosts
        self._token = token.encode("utf-8") if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self._app(scope, receive, send)
            return
        refusal = self._refusal(Headers(scope=scope))
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self._app(scope, receive, send)

    def _refusal(self, headers: Headers) -> PlainTextResponse | None:
        if host_name(headers.get("host", "")) not in self._hosts:
            return PlainTextResponse("Invalid Host header", status_code=421)
        origin = headers.get("origin")
        if origin is not None and not self._origin_allowed(origin):
            return PlainTextResponse("Invalid Origin header", status_code=403)
        if self._token is not None and not self._authorized(headers.get("authorization", "")):
            return PlainTextResponse("Unauthorized", status_code=401, headers={"WWW-Authenticate": "Bearer"})
        return None

    def _origin_allowed(self, origin: str) -> bool:
        try:
            parts = urlsplit(origin)
            return parts.scheme in ("http", "https") and parts.hostname in self._hosts
        except ValueError:
            return False

    def _authorized(self, authorization: str) -> bool:
        scheme, _, presented = authorization.partition(" ")
        assert self._token is not None
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(presented.strip().encode("utf-8"), self._token)
