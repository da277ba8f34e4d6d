"""The one guarded call path, sync and async, and the ``@guard`` decorator.

Every tool call takes this path: ``CircuitBreaker.call``, ``@guard`` and every
framework adapter. Sync and async share each step (acquire, classify, record,
telemetry) so neither can bypass a check. Two promises hold throughout:

* a failure of our own bookkeeping is logged and the call runs unguarded:
  the middleware never turns a healthy call into a failure;
* a rejected call never runs the tool, and the caller gets a value its agent
  loop understands (an error result, the adapter's native value, or
  :class:`CircuitOpenError` when ``graceful_degradation=False``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any, Protocol

from otel_breaker import breaker as _breaker_module
from otel_breaker import deadline, degrade, health  # noqa: F401 - health checks listen for openings
from otel_breaker import upstream as _upstream
from otel_breaker import upstream_gate as _upstream_gate
from otel_breaker.breaker import _CLOSED, _OPEN, REJECTED, SHADOW, CircuitBreaker, CircuitBreakerConfig, Clock
from otel_breaker.classify import FAILURE, IGNORED, SUCCESS, classify_exception, error_type, result_failed
from otel_breaker.registry import BreakerRegistry, default_registry
from otel_breaker.telemetry import _METRICS_GLOBALS, _TRACE_GLOBALS, TELEMETRY
from otel_breaker.toolcall import ToolCall

_TELEMETRY = TELEMETRY
_rejection_result = degrade.rejection_result
_deadline_start = deadline.start

logger = logging.getLogger("otel_breaker")

TIMEOUT_ERROR_TYPE = "timeout"
INVALID_RESULT_ERROR_TYPE = "invalid_result"
#: What an adapter's ``result_error`` returns for a value that is neither a
#: success nor a failure of the tool (a denial, a policy block, a pause for input).
IGNORED_RESULT = "otel_breaker.ignored"


class ToolTimeoutError(TimeoutError):
    """An async tool ran past its breaker's ``timeout`` and was cancelled."""

    def __init__(self, tool: str, timeout: float):
        self.tool = tool
        self.timeout = timeout
        super().__init__(f"Tool '{tool}' timed out after {timeout:g}s")


class Adapter(Protocol):
    """What a framework adapter adds to the call path."""

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        """``error.type`` when the framework turned a failure into a returned value,
        ``IGNORED_RESULT`` for a value that must not count either way, else None."""

    def rejection(self, call: ToolCall, info: degrade.Rejection) -> Any:
        """The framework-native value for a rejected call (or raise)."""

    # Optional: ``exception_hint(call, exc)`` -> ``classify.MISTAKE``, ``RETRY_REQUEST``,
    # ``CONTROL`` or None, for exceptions only the adapter can read (a validation
    # error of the model's arguments is the same class as one a tool body raises).


_bookkeeping_warned = False


def _bookkeeping_failed(where: str) -> None:
    global _bookkeeping_warned
    if not _bookkeeping_warned:
        _bookkeeping_warned = True
        logger.exception("otel-breaker: %s failed; the call runs unguarded (logged once)", where)
    else:
        logger.debug("otel-breaker: %s failed", where, exc_info=True)


def _default_call(breaker: CircuitBreaker) -> ToolCall:
    call = breaker.call_cache
    if call is None:
        call = breaker.call_cache = ToolCall(breaker.name, agent_name=breaker.agent_name, session_id=breaker.session_id)
    return call


def _reject(breaker: CircuitBreaker, call: ToolCall | None, adapter: Adapter | None, span: Any) -> tuple[bool, Any]:
    """Handle a rejected call. Returns (run_anyway, value)."""
    config = breaker._config
    if (
        span is None
        and adapter is None
        and config.graceful_degradation
        and not config.high_stakes
        and not _TELEMETRY.logs_on()
    ):
        return False, _rejection_result(breaker, call)
    if call is None:
        call = _default_call(breaker)
    info = degrade.Rejection(breaker, call)
    if config.high_stakes and degrade.escalation_approves(call, info):
        TELEMETRY.escalated(span, call, breaker)
        return True, None
    try:
        TELEMETRY.rejected(span, call, breaker, info)
    except Exception:
        _bookkeeping_failed("reporting a rejection")
    if adapter is not None:
        return False, adapter.rejection(call, info)
    if config.graceful_degradation:
        return False, info.as_dict()
    raise info.error()


def _result_error(breaker: CircuitBreaker, call: ToolCall | None, result: Any, adapter: Adapter | None) -> str | None:
    """``error.type`` for a returned value the framework or a validator calls a failure."""
    try:
        if adapter is not None:
            err = adapter.result_error(call, result)
            if err is not None:
                return err
        if result_failed(result, breaker.config):
            return INVALID_RESULT_ERROR_TYPE
    except Exception:
        _bookkeeping_failed("classifying a result")
    return None


def _record(breaker: CircuitBreaker, permit: Any, outcome: int) -> None:
    if permit is None:
        return
    try:
        breaker.record(permit, outcome)
    except Exception:
        _bookkeeping_failed("recording an outcome")


def _classify(
    breaker: CircuitBreaker, exc: BaseException, call: ToolCall | None = None, adapter: Adapter | None = None
) -> int:
    try:
        hint = None
        if adapter is not None:
            read = getattr(adapter, "exception_hint", None)
            if read is not None:
                hint = read(call, exc)
        return classify_exception(exc, breaker.config, hint)
    except Exception:
        _bookkeeping_failed("classifying an exception")
        return FAILURE


def _start(breaker: CircuitBreaker, call: ToolCall | None) -> tuple[ToolCall | None, Any]:
    """Start telemetry for a call when any provider exists: (call, span handle)."""
    if call is None:
        call = _default_call(breaker)
    try:
        return call, TELEMETRY.start(call, breaker)
    except Exception:
        _bookkeeping_failed("starting a span")
        return call, None


def _end(
    breaker: CircuitBreaker,
    call: ToolCall,
    span: Any,
    elapsed: float,
    err: str | None,
    exc: BaseException | None,
    permit: Any,
) -> None:
    try:
        TELEMETRY.finish(span, call, breaker, elapsed, err, exc, permit)
    except Exception:
        _bookkeeping_failed("ending a span")


def _observing() -> bool:
    return (
        _TELEMETRY.explicit
        or _TRACE_GLOBALS["_TRACER_PROVIDER"] is not None
        or _METRICS_GLOBALS["_METER_PROVIDER"] is not None
    )


def run_sync(
    breaker: CircuitBreaker,
    fn: Callable[..., Any],
    args: tuple,
    kwargs: dict,
    call: ToolCall | None = None,
    adapter: Adapter | None = None,
) -> Any:
    """Run a sync call through ``breaker``. Sync calls are never interrupted: one
    that runs past ``timeout`` is counted as a failure when it returns."""
    observed = (
        _TELEMETRY.explicit
        or _TRACE_GLOBALS["_TRACER_PROVIDER"] is not None
        or _METRICS_GLOBALS["_METER_PROVIDER"] is not None
    )
    if not observed and adapter is None and breaker._plain:
        # The common case inlined: no telemetry, no adapter, a breaker whose
        # state lives in memory. Same rules as breaker.acquire/record, without
        # their call overhead (this path is what a closed breaker costs).
        state = breaker._state
        permit = breaker._generation
        clock = breaker._clock
        if state is _CLOSED:
            next(breaker._request_counter)
            start = clock()
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                _record(breaker, permit, _classify(breaker, exc))
                raise
            config = breaker._config
            if (config.timeout is not None and clock() - start > config.timeout) or (
                config.is_failure_result is not None and result_failed(result, config)
            ):
                _record(breaker, permit, FAILURE)
            elif not breaker._consecutive and breaker._window is None and permit == breaker._generation:
                next(breaker._success_counter)
            else:
                _record(breaker, permit, SUCCESS)
            return result
        if state is _OPEN and not breaker._observe:
            now = clock()
            if now < breaker._open_until:
                config = breaker._config
                if config.graceful_degradation and not config.high_stakes:
                    next(breaker._request_counter)
                    next(breaker._rejected_open_counter)
                    cached = breaker.rejection_cache
                    if (
                        cached is not None
                        and cached[0] <= now < cached[1]
                        and cached[2] is call
                        and cached[3] == breaker._generation
                    ):
                        return cached[4].copy()
                    return _rejection_result(breaker, call)
    span = None
    if observed:
        call, span = _start(breaker, call)
    try:
        try:
            permit = breaker.acquire()
        except Exception:
            permit = None
            _bookkeeping_failed("acquiring a permit")
        if permit == REJECTED:
            run_anyway, value = _reject(breaker, call, adapter, span)
            if not run_anyway:
                return value
            permit = SHADOW
        clock = breaker._clock
        start = clock()
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            outcome = _classify(breaker, exc, call, adapter)
            _record(breaker, permit, outcome)
            if observed:
                _end(breaker, call, span, clock() - start, error_type(exc) if outcome == FAILURE else None, exc, permit)
            raise
        elapsed = clock() - start
        _complete(breaker, permit, call, span, adapter, result, elapsed, observed)
        return result
    finally:
        if span is not None:
            TELEMETRY.detach(span)


def _outcome(
    breaker: CircuitBreaker, call: ToolCall | None, adapter: Adapter | None, result: Any, elapsed: float
) -> tuple[int, str | None]:
    """(outcome, ``error.type``) of a call that returned ``result`` after ``elapsed`` seconds."""
    config = breaker._config
    err = None
    if config.timeout is not None and elapsed > config.timeout:
        err = TIMEOUT_ERROR_TYPE
    elif adapter is not None or config.is_failure_result is not None:
        err = _result_error(breaker, call, result, adapter)
    if err == IGNORED_RESULT:
        return IGNORED, None
    return (SUCCESS if err is None else FAILURE), err


async def _arecord(breaker: CircuitBreaker, permit: Any, outcome: int, shared: bool) -> None:
    if not shared or permit is None:
        _record(breaker, permit, outcome)
        return
    try:
        await breaker.arecord(permit, outcome)
    except Exception:
        _bookkeeping_failed("recording an outcome")


def _complete(
    breaker: CircuitBreaker,
    permit: Any,
    call: ToolCall | None,
    span: Any,
    adapter: Adapter | None,
    result: Any,
    elapsed: float,
    observed: bool,
) -> None:
    """Classify a returned value, record it, end the span: the tail both paths share."""
    outcome, err = _outcome(breaker, call, adapter, result, elapsed)
    _record(breaker, permit, outcome)
    if observed:
        _end(breaker, call, span, elapsed, err, None, permit)


async def run_async(
    breaker: CircuitBreaker,
    fn: Callable[..., Any],
    args: tuple,
    kwargs: dict,
    call: ToolCall | None = None,
    adapter: Adapter | None = None,
) -> Any:
    """Run an async call (or a plain function) through ``breaker``: the same
    steps as :func:`run_sync`, and coroutines are cancelled at ``timeout`` and
    counted as failures."""
    observed = (
        _TELEMETRY.explicit
        or _TRACE_GLOBALS["_TRACER_PROVIDER"] is not None
        or _METRICS_GLOBALS["_METER_PROVIDER"] is not None
    )
    span = None
    if observed:
        call, span = _start(breaker, call)
    try:
        shared = getattr(breaker, "aacquire", None) is not None  # a store with an asyncio client
        try:
            permit = await breaker.aacquire() if shared else breaker.acquire()
        except Exception:
            permit = None
            _bookkeeping_failed("acquiring a permit")
        if permit == REJECTED:
            run_anyway, value = _reject(breaker, call, adapter, span)
            if not run_anyway:
                return value
            permit = SHADOW
        clock = breaker._clock
        timeout = breaker._config.timeout
        start = clock()
        try:
            result = fn(*args, **kwargs)
            if inspect.isawaitable(result):
                if timeout is None:
                    result = await result
                else:
                    result = await _await_within(result, timeout, call.tool if call is not None else breaker.name)
        except ToolTimeoutError as exc:
            await _arecord(breaker, permit, FAILURE, shared)
            if observed:
                _end(breaker, call, span, clock() - start, TIMEOUT_ERROR_TYPE, exc, permit)
            raise
        except BaseException as exc:
            outcome = _classify(breaker, exc, call, adapter)
            await _arecord(breaker, permit, outcome, shared)
            if observed:
                _end(breaker, call, span, clock() - start, error_type(exc) if outcome == FAILURE else None, exc, permit)
            raise
        elapsed = clock() - start
        if shared:
            outcome, err = _outcome(breaker, call, adapter, result, elapsed)
            await _arecord(breaker, permit, outcome, shared)
            if observed:
                _end(breaker, call, span, elapsed, err, None, permit)
        else:
            _complete(breaker, permit, call, span, adapter, result, elapsed, observed)
        return result
    finally:
        if span is not None:
            TELEMETRY.detach(span)


async def _await_within(awaitable: Any, timeout: float, tool: str) -> Any:
    """Await ``awaitable``, cancelled after ``timeout`` seconds (``ToolTimeoutError``).

    asyncio (and uvloop) use the cheap per-loop watch; any other loop (trio)
    an anyio cancel scope. The awaitable is always awaited: a problem in our
    timeout bookkeeping means it runs without a timeout, never un-awaited.
    """
    try:
        watch = _deadline_start(timeout)
        scope = deadline.foreign_scope(timeout) if watch is None else None
    except Exception:
        _bookkeeping_failed("starting a timeout")
        watch = scope = None
    if watch is None:
        if scope is None:
            return await awaitable
        with scope:
            return await awaitable
        raise ToolTimeoutError(tool, timeout)  # reached only when the scope cancelled the call
    try:
        result = await awaitable
    except asyncio.CancelledError:
        if deadline.consume_cancellation(watch):
            raise ToolTimeoutError(tool, timeout) from None
        raise
    finally:
        deadline.finish(watch)
    if watch.expired:  # the call swallowed our cancellation and returned
        deadline.consume_cancellation(watch)
    return result


def _decorate(breaker: CircuitBreaker, fn: Callable[..., Any]) -> Callable[..., Any]:
    call = None
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_guarded(*args: Any, **kwargs: Any) -> Any:
            return await run_async(breaker, fn, args, kwargs, call)

        async_guarded.breaker = breaker  # type: ignore[attr-defined]
        return async_guarded

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        return run_sync(breaker, fn, args, kwargs, call)

    guarded.breaker = breaker  # type: ignore[attr-defined]
    return guarded


_breaker_module.install_runner(run_sync, run_async, _decorate)


class Guard:
    """Runs tool calls through the breakers of one registry (adapters use this)."""

    def __init__(self, registry: BreakerRegistry | None = None) -> None:
        self._registry = registry

    @property
    def registry(self) -> BreakerRegistry:
        return self._registry if self._registry is not None else default_registry()

    def breaker_for(self, call: ToolCall, config: CircuitBreakerConfig | None = None) -> CircuitBreaker | None:
        try:
            return self.registry.breaker_for(call, config)
        except Exception:
            _bookkeeping_failed("finding a breaker")
            return None

    def call(
        self,
        call: ToolCall,
        fn: Callable[..., Any],
        args: tuple = (),
        kwargs: dict | None = None,
        adapter: Adapter | None = None,
        config: CircuitBreakerConfig | None = None,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` as tool call ``call`` (``config`` for a breaker created now)."""
        breaker = self.breaker_for(call, config)
        if breaker is None:
            return fn(*args, **(kwargs or {}))
        # Upstream breaker (upstream_gate.py): admitted first, counts transport failures.
        upstream = _upstream.breaker_for_call(self.registry, call)
        if upstream is not None:
            return _upstream_gate.run_sync(upstream, breaker, run_sync, fn, args, kwargs or {}, call, adapter)
        return run_sync(breaker, fn, args, kwargs or {}, call, adapter)

    async def acall(
        self,
        call: ToolCall,
        fn: Callable[..., Any],
        args: tuple = (),
        kwargs: dict | None = None,
        adapter: Adapter | None = None,
        config: CircuitBreakerConfig | None = None,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` (awaited when it returns an awaitable) as tool call ``call``."""
        breaker = self.breaker_for(call, config)
        if breaker is None:
            result = fn(*args, **(kwargs or {}))
            return await result if inspect.isawaitable(result) else result
        # Upstream breaker (upstream_gate.py): admitted first, counts transport failures.
        upstream = _upstream.breaker_for_call(self.registry, call)
        if upstream is not None:
            return await _upstream_gate.run_async(upstream, breaker, run_async, fn, args, kwargs or {}, call, adapter)
        return await run_async(breaker, fn, args, kwargs or {}, call, adapter)


_default_guard = Guard()


def default_guard() -> Guard:
    return _default_guard


def guard(
    tool: str | Callable[..., Any] | None = None,
    *,
    config: CircuitBreakerConfig | None = None,
    agent: Any = None,
    agent_name: str | None = None,
    clock: Clock | None = None,
    registry: BreakerRegistry | None = None,
) -> Any:
    """Guard a tool function (sync or async) with its breaker.

    ``@guard`` names the breaker after the function; ``@guard("web_search",
    config=..., agent=...)`` names it explicitly. With ``clock`` the breaker is
    private to this function (for tests and simulations); otherwise it comes
    from the registry, so every guarded call of that tool shares it.
    """
    if callable(tool):
        return guard()(tool)

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        from otel_breaker.status_server import start_from_settings

        start_from_settings()  # OTEL_BREAKER_STATUS_ADDR, if set: once, never raises
        name = tool or getattr(fn, "__name__", "tool")
        if clock is not None:
            settings = (registry if registry is not None else default_registry()).settings
            breaker = CircuitBreaker(name, settings.config_for(name, config), clock=clock, agent_name=agent_name)
            return _decorate(breaker, fn)
        reg = registry if registry is not None else default_registry()
        call = ToolCall(name, agent=agent, agent_name=agent_name)
        if config is not None:
            reg.breaker_for(call, config)  # create it now with this config
        guard_ = Guard(reg)
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_guarded(*args: Any, **kwargs: Any) -> Any:
                return await guard_.acall(call, fn, args, kwargs, config=config)

            return async_guarded

        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            return guard_.call(call, fn, args, kwargs, config=config)

        return guarded

    return decorate
