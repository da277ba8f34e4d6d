"""Reaching an MCP server: a server that cannot be started or connected to is a failure
of its upstream breaker, and the run goes on with the servers that answer.

Several frameworks connect to (or list the tools of) every MCP server a run is given
before the model sees anything, and one dead server aborts the run: no tool call is
ever made, so no breaker would see it. An adapter puts that connection (or listing)
through :func:`reach`:

* the server's upstream breaker (``upstream:<identity>``, the identity its tools are
  keyed by, ``mcp_identity.py``) counts a failed connection as a failure; a connection
  made is the success of a probe while the breaker is half-open, and counts for neither
  side while it is closed (the server answering a handshake says nothing of its tools'
  transport failures, which the same breaker counts);
* a server that failed gives the run no tools (the adapter answers the framework's
  call with an empty listing), and one log line says so;
* while its breaker is open the server is not tried at all: the run goes on at once
  without it, and the status block names it unavailable (an open upstream is listed
  there as "every tool of upstream ...");
* once the cooldown ends, the next connection is the breaker's probe: answered, the
  breaker closes and the server's tools are back.

Only what happens when a server cannot be reached changes; a server that answers is
connected and listed as without otel-breaker.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from otel_breaker.breaker_state import REJECTED, State
from otel_breaker.classify import FAILURE, IGNORED, SUCCESS
from otel_breaker.sanitize import exception_message, log_line
from otel_breaker.upstream import breaker_of

logger = logging.getLogger("otel_breaker")

#: What :func:`reach` answers for a server it did not reach.
UNREACHED: Any = object()


def _upstream(identity: str | None) -> Any:
    """The upstream breaker of server ``identity`` (None: no identity, or no room for one)."""
    if not identity:
        return None
    try:
        from otel_breaker.registry import default_registry

        return breaker_of(default_registry(), identity)
    except Exception:
        logger.debug("otel-breaker: no upstream breaker for MCP server %s", identity, exc_info=True)
        return None


async def reach(identity: str | None, connect: Callable[[], Awaitable[Any]]) -> Any:
    """``await connect()`` for server ``identity``, counted on its upstream breaker: what
    it returned, or :data:`UNREACHED` when it raised (counted as a failure, logged once)
    or the breaker is open (not tried). A cancellation goes on as it came, counted for
    neither side; a server without an identity is connected as without otel-breaker."""
    upstream = _upstream(identity)
    if upstream is None:
        return await connect()
    probing = upstream.state is not State.CLOSED
    permit = await upstream.atry_acquire()
    if permit is REJECTED:
        logger.debug("otel-breaker: MCP server %s is open: the run goes on without its tools", identity)
        return UNREACHED
    try:
        result = await connect()
    except Exception as exc:
        await upstream.aon_outcome(permit, FAILURE)
        logger.warning(
            "otel-breaker: MCP server %s could not be reached (%s): the run goes on without its tools",
            log_line(identity or ""),
            log_line(exception_message(exc)),
        )
        return UNREACHED
    except BaseException:
        await upstream.aon_outcome(permit, IGNORED)
        raise
    await upstream.aon_outcome(permit, SUCCESS if probing else IGNORED)
    return result
