"""``otel-breaker mcp-proxy``: the breakers in front of any MCP client.

Most agents that call MCP servers are not Python programs otel-breaker can
patch (desktop and IDE clients, TypeScript and Go agents). The proxy sits
between such a client and its servers and gives every ``tools/call`` the
call path an in-process MCP client gets: per-tool and upstream breakers, the
three outcomes, hidden open tools, telemetry, the status endpoint and a shared
store. Everything else passes through.

Modules, one job each: :mod:`.options` (what to run, validated without the SDK),
:mod:`.upstream` (one server's connection and its restart supervisor),
:mod:`.child` (a stdio server's process and its pipes),
:mod:`.forward` (the server the client sees, and the guarded ``tools/call``),
:mod:`.wire` (a ``tools/call`` result judged as the wire's dict),
:mod:`.stdio` (the client's pipes), :mod:`.serve` (stdio or streamable HTTP to the client).
"""

from __future__ import annotations

import logging
import os

from otel_breaker.mcp_proxy.options import OptionsError, ProxyOptions, ServerSpec, build

__all__ = ["OptionsError", "ProxyOptions", "ServerSpec", "build", "guarding_from_env", "run"]

logger = logging.getLogger("otel_breaker")


def guarding_from_env() -> bool:
    """Starting the proxy is the opt-in: it guards unless ``OTEL_BREAKER_ENABLED`` is
    set to false, which makes it a transparent pass-through."""
    if not os.environ.get("OTEL_BREAKER_ENABLED", "").strip():
        return True
    from otel_breaker.config import get_settings

    return get_settings().enabled


def run(options: ProxyOptions) -> int:
    """Run the proxy until its client leaves; the exit code. Needs the ``mcp`` SDK."""
    import anyio

    from otel_breaker.mcp_proxy.serve import StartError

    guarding = guarding_from_env()
    if guarding:
        _start_outputs()
    try:
        anyio.run(_main, options, guarding)
    except BaseException as exc:
        start_error = _find(exc, StartError)
        if start_error is None:
            raise
        logger.error("otel-breaker mcp-proxy: %s", start_error)
        return 1
    return 0


def _find(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """``exc`` or the first ``kind`` inside it (task groups wrap what their tasks raise)."""
    if isinstance(exc, kind):
        return exc
    for inner in getattr(exc, "exceptions", None) or ():
        found = _find(inner, kind)
        if found is not None:
            return found
    return None


async def _main(options: ProxyOptions, guarding: bool) -> None:
    from otel_breaker.mcp_proxy.serve import serve

    await serve(options, guarding=guarding)


def _start_outputs() -> None:
    """The telemetry (``OTEL_*``) and the status endpoint (``OTEL_BREAKER_STATUS_ADDR``),
    as for a guarded program; each problem is one logged line."""
    from otel_breaker.config import get_settings
    from otel_breaker.instrumentation.autostart import ensure_sdk
    from otel_breaker.status_server import start_from_settings

    get_settings()  # one line per bad OTEL_BREAKER_* value, now rather than at the first call
    ensure_sdk()
    start_from_settings()
