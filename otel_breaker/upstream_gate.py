"""The upstream breaker's share of a call: its rejection and its outcomes.

A tool with an upstream (see ``upstream.py``) is guarded by two breakers. The
call path (``call_steps.py``, one step sequence for every entrance) asks the
upstream breaker first and uses the decisions here:

1. while the upstream breaker is open the call is rejected without a round
   trip, with a rejection that names the upstream (:func:`reject`; the tool's
   own breaker is not consulted and counts nothing). Half-open, it admits one
   probe at a time, through whichever of its tools is called next;
2. the tool's own breaker then runs the call as always;
3. outcomes, decided where the tool is actually called:

   * a transport failure (:func:`otel_breaker.classify.is_transport_error`)
     counts for the upstream only: the exception is marked so the tool's
     breaker treats it as neutral (:func:`outcome_of_exception`). A dead server
     must not leave every tool with a failure streak once it is back;
   * any returned value, including a tool's own error result (MCP ``isError``),
     is a success for the upstream: the server answered (:func:`outcome_of_answer`).
     The result is judged by the tool's breaker as always, so a tool's own
     errors open only that tool;
   * any other exception (the tool's own error, a cancellation, a mistake of
     the model) is neutral for the upstream and judged by the tool's breaker;
   * a call the tool's breaker rejected never reached the upstream: neutral.

A failure of this bookkeeping never fails the call: the call then runs as if
it had no upstream.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.trace import Status, StatusCode

from otel_breaker import rejection
from otel_breaker.breaker import REJECTED, CircuitBreaker, State
from otel_breaker.classify import (
    FAILURE,
    IGNORED,
    SUCCESS,
    UPSTREAM_MARK,
    error_type,
    is_transport_error,
    is_transport_text,
)
from otel_breaker.effects import SAFE_TO_REPEAT
from otel_breaker.retry_hint import retry_hint
from otel_breaker.sanitize import MAX_ALTERNATIVES, safe_name, sanitize
from otel_breaker.semconv import ATTR_ERROR_TYPE, ATTR_GUARDED
from otel_breaker.telemetry import TELEMETRY
from otel_breaker.toolcall import ToolCall
from otel_breaker.upstream import upstream_name, upstream_of

logger = logging.getLogger("otel_breaker")


class UpstreamRejection(rejection.Rejection):
    """A call rejected because the upstream its tool runs behind is open."""

    __slots__ = ("tool_breaker", "upstream")

    def __init__(self, breaker: CircuitBreaker, call: ToolCall, tool_breaker: CircuitBreaker) -> None:
        super().__init__(breaker, call)
        self.upstream = upstream_name(breaker) or breaker.name
        self.tool_breaker = tool_breaker

    @property
    def alternatives(self) -> tuple[str, ...]:
        """The tool's configured fallbacks that are healthy and not behind the same upstream."""
        if self._alternatives is None:
            names = tuple(
                n for n in self.tool_breaker.config.fallbacks if upstream_of(n, self.call.source) != self.upstream
            )
            healthy = rejection.healthy_alternatives(names)[:MAX_ALTERNATIVES]
            self._alternatives = tuple(safe_name(n) for n in healthy)
        return self._alternatives

    @property
    def summary(self) -> str:
        return (
            f"Tool '{safe_name(self.call.tool)}' unavailable: upstream '{safe_name(self.upstream)}' "
            "circuit breaker open - too many recent transport failures"
        )

    @property
    def message(self) -> str:
        tool = safe_name(self.call.tool)
        state = self.state.value.replace("_", "-")
        return sanitize(
            f"Tool '{tool}' is temporarily unavailable: upstream '{safe_name(self.upstream)}', which it runs "
            f"behind, is unreachable (its circuit breaker is {state} after repeated transport failures), "
            f"so the call was not made. Every tool of '{safe_name(self.upstream)}' is unavailable until then. "
            f"{self.remediation}"
        )

    def as_dict(self) -> dict[str, Any]:
        result = super().as_dict()
        result["upstream"] = safe_name(self.upstream)
        return result


def _failed(where: str) -> None:
    logger.debug("otel-breaker: upstream %s failed; the call runs without its upstream breaker", where, exc_info=True)


def outcome_of_answer(adapter: Any, call: ToolCall, result: Any) -> int:
    """The upstream's outcome of a returned value.

    A value the tool's own upstream returned (MCP's ``isError`` included) means the
    server answered: a success. But many frameworks catch a tool's exception and
    return its text: for those (the adapter's ``error_results_are_answers`` is
    False) an error result whose text reads as a transport failure
    (:func:`~otel_breaker.classify.is_transport_text`) is a failure of the
    upstream, and any other error result is neutral for it.
    """
    if adapter is None or getattr(adapter, "error_results_are_answers", True):
        return SUCCESS
    try:
        err = adapter.result_error(call, result)
    except Exception:
        return SUCCESS
    if err is None:
        return SUCCESS
    if not isinstance(err, str):
        return IGNORED
    if is_transport_text(err):
        return FAILURE
    try:  # adapters name the failure with a short code; the framework's value keeps the text
        text = str(result)[:2000]
    except Exception:
        return IGNORED
    return FAILURE if is_transport_text(text) else IGNORED


def _mark(exc: BaseException, upstream: CircuitBreaker) -> None:
    try:
        setattr(exc, UPSTREAM_MARK, upstream.name)
    except Exception:  # an exception class that takes no attributes: the tool counts it too
        pass


def reject(upstream: CircuitBreaker, breaker: CircuitBreaker, call: ToolCall, adapter: Any) -> tuple[bool, Any]:
    """A call the open upstream rejects: (run_anyway, value), like the guard's own rejection."""
    info = UpstreamRejection(upstream, call, breaker)
    config = breaker.config
    if config.high_stakes and rejection.escalation_approves(call, info):
        return True, None
    span = None
    try:
        span = TELEMETRY.start(call, upstream)
        TELEMETRY.rejected(span, call, upstream, info)
    except Exception:
        _failed("reporting a rejection")
    finally:
        if span is not None:
            TELEMETRY.detach(span)
    if adapter is not None:
        return False, adapter.rejection(call, info)
    if config.graceful_degradation:
        return False, info.as_dict()
    raise info.error()


def outcome_of_exception(upstream: CircuitBreaker, exc: BaseException) -> int:
    """An exception from the tool: the upstream's failure when it is a transport one
    (then marked neutral for the tool), else neutral for the upstream."""
    hint = _server_hint(exc)
    if hint is not None:
        # The server said when to come back: every tool behind it waits that long.
        _mark(exc, upstream)
        try:
            upstream.open_for(hint)
        except Exception:
            _failed("opening for a retry hint")
        return FAILURE
    if is_transport_error(exc):
        _mark(exc, upstream)
        _note_on_span(exc)
        return FAILURE
    return IGNORED


async def probe_safely(upstream: CircuitBreaker, effects: str, probe: Callable[[], Awaitable[Any]]) -> None:
    """Before the call of a tool that is not safe to repeat (destructive, or unknown: nobody
    said) reaches a half-open upstream, probe it with ``probe``, a request without side
    effects (an MCP ``ping``): that call is then never the one that finds out whether the
    server is back.

    Up to ``success_threshold`` probes while the upstream stays half-open: an answer
    (any, an error answer included: the server is there) is a success, a transport
    failure a failure (it opens again, and the call is rejected as usual). Where no
    probe slot is free, or the tool is read-only or idempotent, nothing is done: the
    first real call is the probe, as always."""
    if effects in SAFE_TO_REPEAT:
        return
    for _ in range(max(1, upstream.config.success_threshold)):
        if upstream.state is not State.HALF_OPEN:
            return
        permit = await upstream.atry_acquire()
        if permit == REJECTED:
            return
        try:
            await probe()
        except Exception as exc:
            if is_transport_error(exc):
                await upstream.aon_outcome(permit, FAILURE)
                return
        except BaseException:
            await upstream.aon_outcome(permit, IGNORED)
            raise
        await upstream.aon_outcome(permit, SUCCESS)


def _server_hint(exc: BaseException) -> float | None:
    try:
        return retry_hint(exc)
    except Exception:
        return None


def _note_on_span(exc: BaseException) -> None:
    """The tool's span still shows the call failed (``error.type``, status ERROR),
    though its breaker does not count it: the upstream's breaker did."""
    try:
        span = trace_api.get_current_span()
        if span.is_recording() and getattr(span, "attributes", {}).get(ATTR_GUARDED):
            span.set_attribute(ATTR_ERROR_TYPE, error_type(exc))
            span.set_status(Status(StatusCode.ERROR))
    except Exception:
        _failed("noting a transport failure on the span")
