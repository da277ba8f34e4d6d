"""Running the proxy: connect the servers, then serve the client over stdio or HTTP.

Every server is connected (and initialized) once before the client is served,
since the ``initialize`` answer is theirs. Over stdio the proxy ends when its
client closes stdin: the servers' stdio commands get their stdin closed too, and
are stopped if they do not exit (the SDK's shutdown, bounded to a few seconds).
"""

from __future__ import annotations

import logging
import signal
import sys
from typing import Any

import anyio
from mcp.server.transport_security import TransportSecuritySettings

from otel_breaker.mcp_proxy.door import Door, allowed_hosts
from otel_breaker.mcp_proxy.eras import serve_stdio
from otel_breaker.mcp_proxy.forward import Forwarder, ProxyServer
from otel_breaker.mcp_proxy.options import ProxyOptions
from otel_breaker.mcp_proxy.stdio import client_stdio
from otel_breaker.mcp_proxy.upstream import UpstreamLink, describe_error
from otel_breaker.sanitize import bounded

logger = logging.getLogger("otel_breaker")


class StartError(Exception):
    """A server could not be connected the first time: one line for the user."""


async def serve(options: ProxyOptions, *, guarding: bool) -> None:
    """Connect every server, serve the client until it leaves (stdio) or the process is stopped (HTTP)."""
    links = [
        UpstreamLink(spec, restart_delay=options.restart_delay, max_restart_delay=options.max_restart_delay)
        for spec in options.servers
    ]
    forwarder = Forwarder(links, guarding=guarding, watch_interval=options.watch_interval)
    for link in links:
        link.downstream = forwarder
    async with anyio.create_task_group() as group:
        for link in links:
            try:
                await group.start(link.run)
            except Exception as exc:
                reason = describe_error(exc)
                if "Connection closed" in reason:
                    reason = "it closed the connection during initialize (does the command start an MCP server?)"
                raise StartError(
                    f"could not start MCP server {link.spec.name!r} ({bounded(link.spec.describe(), 200)}): "
                    f"{bounded(reason, 300)}"
                ) from None
        _tell_apart(links)
        server = forwarder.build_server()
        group.start_soon(forwarder.watch_hidden)
        if options.listen is None:
            group.start_soon(_stop_on_signal, group.cancel_scope)
            await _serve_stdio(server)
        else:
            await _serve_http(server, options)
        group.cancel_scope.cancel()


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    """SIGTERM or SIGINT (a client stopping the proxy) ends it as a closed stdin does:
    the servers are stopped too, never left running without their proxy."""
    try:
        receiver = anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT)
        with receiver as signals:
            async for _ in signals:
                scope.cancel()
                return
    except NotImplementedError:  # no signal handlers on this event loop (Windows): Ctrl-C still ends it
        return


def _tell_apart(links: list[UpstreamLink]) -> None:
    """Servers of one proxy reporting the same ``name@version`` keep their own breakers."""
    seen: dict[str | None, int] = {}
    for link in links:
        seen[link.server_identity] = seen.get(link.server_identity, 0) + 1
    for link in links:
        link.qualify = seen[link.server_identity] > 1


async def _serve_stdio(server: ProxyServer) -> None:
    async with client_stdio() as (read, write):
        await serve_stdio(server, read, write)


async def _serve_http(server: ProxyServer, options: ProxyOptions) -> None:
    import uvicorn

    assert options.listen is not None
    host, port = options.listen
    # The door checks Host, Origin and the token of every request, on every listen
    # address; the SDK's own check (loopback addresses only) is left off.
    app = server.streamable_http_app(
        host=host,
        streamable_http_path=options.path,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    door = Door(app, allowed_hosts(host, options.allow_hosts), options.token)
    config = uvicorn.Config(door, host=host, port=port, log_level="warning", lifespan="on")
    http = uvicorn.Server(config)

    async def announce() -> None:
        while not http.started:
            await anyio.sleep(0.01)
        bound = _bound_port(http) or port
        shown = f"[{host}]" if ":" in host else host
        sys.stderr.write(f"otel-breaker mcp-proxy: serving MCP at http://{shown}:{bound}{options.path}\n")
        sys.stderr.flush()

    async with anyio.create_task_group() as group:
        group.start_soon(announce)
        await http.serve()
        group.cancel_scope.cancel()


def _bound_port(http: Any) -> int | None:
    try:
        return int(http.servers[0].sockets[0].getsockname()[1])
    except Exception:
        return None
