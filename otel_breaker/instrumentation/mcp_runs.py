"""The run an MCP client's call or listing is made in, for every adapter of an MCP client.

An MCP client session is one run while it lives, unless a request names its run in
``_meta`` (``otel-breaker/run``, else the trace of a W3C ``traceparent``): docs/loops.md.
A framework's run open around the call wins (:func:`otel_breaker.runs.enter`). The
``mcp`` SDK's ``ClientSession`` and ``Client``, and FastMCP's ``Client``, find their
run here, so a call through FastMCP and its send through the SDK's session are in the
same run.
"""

from __future__ import annotations

from typing import Any

from otel_breaker import runs
from otel_breaker.instrumentation.patches import SKIP

#: The ``_meta`` key a request names its run with (docs/loops.md).
RUN_META_KEY = "otel-breaker/run"


def meta_run(meta: Any) -> runs.Run | None:
    """The run a request's ``_meta`` names: ``otel-breaker/run``, else the trace of a W3C
    ``traceparent``; None when it names none (or names it unusably)."""
    if meta is None:
        return None
    named = runs.named_run(_meta_value(meta, RUN_META_KEY), "mcp")
    if named is not None:
        return named
    return runs.named_run(_trace_id(_meta_value(meta, "traceparent")), "mcp")


def call_run(instance: Any, kwargs: dict) -> runs.Run | None:
    """The run an MCP tool call belongs to: the one its ``_meta`` names (:func:`meta_run`),
    else its client session, one run while it lives."""
    named = meta_run(kwargs.get("meta"))
    if named is not None:
        return named
    session = _session_of(instance)
    return None if session is None else runs.run_of(session, "mcp")


def listing_run(instance: Any, args: tuple, kwargs: dict) -> Any:
    """The run a session's listing is made in: its own (:func:`call_run`), unless a run is
    open already (``SKIP``: the listing stays in that one)."""
    if runs.current_run() is not None:
        return SKIP
    found = call_run(instance, kwargs)
    return SKIP if found is None else found


def _session_of(instance: Any) -> Any:
    """The ``ClientSession`` of a client (the SDK's or FastMCP's ``Client``: its ``session``,
    None while it is not connected), or ``instance`` itself (a session)."""
    if type(instance).__name__ != "Client":
        return instance
    try:
        return instance.session
    except Exception:  # FastMCP raises while the client is not connected
        return None


def _meta_value(meta: Any, key: str) -> Any:
    """``meta[key]`` of a request's ``_meta`` (a dict, or the SDK's model with extra fields)."""
    if isinstance(meta, dict):
        return meta.get(key)
    extra = getattr(meta, "model_extra", None)
    if isinstance(extra, dict) and key in extra:
        return extra[key]
    return getattr(meta, key, None)


def _trace_id(traceparent: Any) -> str | None:
    """The trace id of a W3C ``traceparent`` (``00-<trace id>-<span id>-<flags>``), else None."""
    if not isinstance(traceparent, str):
        return None
    parts = traceparent.split("-")
    if len(parts) != 4 or len(parts[1]) != 32:
        return None
    return f"trace:{parts[1]}"
