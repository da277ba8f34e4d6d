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

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any, Protocol

from otel_breaker import breaker as _breaker_module
from otel_breaker import config as _config
from otel_breaker import deadline, rejection
from otel_breaker import loops as _loops
from otel_breaker import retry_hint as _retry_hints
from otel_breaker import upstream as _upstream
from otel_breaker import upstream_gate as _upstream_gate
from otel_breaker.breaker import REJECTED, SHADOW, CircuitBreaker, CircuitBreakerConfig, Clock
from otel_breaker.classify import FAILURE, IGNORED, SUCCESS, classify_exception, error_type, result_failed
from otel_breaker.registry import BreakerRegistry, default_registry
from otel_breaker.registry import session_of_context as _session_of_context
from otel_breaker.telemetry import TELEMETRY
from otel_breaker.toolcall import ToolCall, agent_display_name

_TELEMETRY = TELEMETRY
# Whether nothing watches (no provider anywhere): the call path then skips telemetry.
_unwatched = _breaker_module.unwatched
_detach = TELEMETRY.detach
_rejection_result = rejection.rejection_result
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

    def rejection(self, call: ToolCall, info: rejection.Rejection) -> Any:
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


def _reject(
    breaker: CircuitBreaker, call: ToolCall | None, adapter: Adapter | None, span: Any, observed: bool
) -> tuple[bool, Any]:
    """Handle a rejected call. Returns (run_anyway, value)."""
    config = breaker._config
    if (
        adapter is None
        and config.graceful_degradation
        and not config.high_stakes
        and (not observed or (span is None and not _TELEMETRY.logs_on()))
    ):
        # Nothing to report to and nothing framework-specific: the cached rejection.
        return False, _rejection_result(breaker, call)
    if call is None:
        call = _default_call(breaker)
    info = rejection.Rejection(breaker, call)
    if config.high_stakes and rejection.escalation_approves(call, info):
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
        if breaker._config.is_failure_result is not None and result_failed(result, breaker._config):
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


def _retry_hint(breaker: CircuitBreaker, outcome: int, exc: BaseException) -> None:
    """A failure whose service said when to come back (``Retry-After``, see
    ``retry_hint.py``) opens the breaker at once, for that long."""
    if outcome != FAILURE:
        return
    try:
        seconds = _retry_hints.retry_hint(exc)
        if seconds is not None:
            breaker.open_for(seconds)
    except Exception:
        _bookkeeping_failed("reading a retry hint")


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


def _start(breaker: CircuitBreaker, call: ToolCall | None) -> tuple[ToolCall, Any]:
    """Start telemetry for a call while anything watches: (call, span handle or None)."""
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


def run_sync(
    breaker: CircuitBreaker,
    fn: Callable[..., Any],
    args: tuple,
    kwargs: dict,
    call: ToolCall | None = None,
    adapter: Adapter | None = None,
) -> Any:
    """Run a sync call through ``breaker``. Sync calls are never interrupted: one
    that runs past ``timeout`` is counted as a failure when it returns.

    After a call that returned, recording and ending the span (:func:`_record`,
    :func:`_end`) are written out, each step guarded so a failure of ours never
    reaches the call: every sync framework tool call passes this way. The
    decisions are the shared helpers'."""
    span = None
    observed = not _unwatched()
    if observed:
        call, span = _start(breaker, call)
    try:
        try:
            permit = breaker.acquire()
        except Exception:
            permit = None
            _bookkeeping_failed("acquiring a permit")
        if permit == REJECTED:
            run_anyway, value = _reject(breaker, call, adapter, span, observed)
            if not run_anyway:
                return value
            permit = SHADOW
        timed = observed or _timed(breaker)
        start = breaker._clock() if timed else 0.0
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            outcome, err = _raised(breaker, call, adapter, exc)
            _record(breaker, permit, outcome)
            _retry_hint(breaker, outcome, exc)
            if observed:
                _end(breaker, call, span, breaker._clock() - start, err, exc, permit)
            raise
        if not timed and adapter is None and breaker._config.is_failure_result is None:
            _record(breaker, permit, SUCCESS)
            return result
        outcome, err, elapsed = _returned(breaker, call, adapter, result, start, timed)
        if permit is not None:
            try:
                breaker.record(permit, outcome)
            except Exception:
                _bookkeeping_failed("recording an outcome")
        _slow(breaker, elapsed)
        if observed:
            try:
                TELEMETRY.finish(span, call, breaker, elapsed, err, None, permit)
            except Exception:
                _bookkeeping_failed("ending a span")
        return result
    finally:
        if span is not None:
            _detach(span)


async def run_async(
    breaker: CircuitBreaker,
    fn: Callable[..., Any],
    args: tuple,
    kwargs: dict,
    call: ToolCall | None = None,
    adapter: Adapter | None = None,
) -> Any:
    """Run an async call (or a plain function) through ``breaker``: every decision
    is :func:`run_sync`'s; only the awaiting differs (of the call, of a store with
    an asyncio client, and of ``timeout``, at which a coroutine is cancelled and
    counted as a failure)."""
    span = None
    observed = not _unwatched()
    if observed:
        call, span = _start(breaker, call)
    try:
        remote = breaker.awaits_store
        try:
            permit = await breaker.aacquire() if remote else breaker.acquire()
        except Exception:
            permit = None
            _bookkeeping_failed("acquiring a permit")
        if permit == REJECTED:
            run_anyway, value = _reject(breaker, call, adapter, span, observed)
            if not run_anyway:
                return value
            permit = SHADOW
        timeout = breaker._config.timeout
        timed = observed or timeout is not None or breaker._config.slow_call_seconds is not None
        start = breaker._clock() if timed else 0.0
        try:
            result = fn(*args, **kwargs)
            if inspect.isawaitable(result):
                if timeout is None:
                    result = await result
                else:
                    result = await _await_within(result, timeout, call.tool if call is not None else breaker.name)
        except BaseException as exc:
            outcome, err = _raised(breaker, call, adapter, exc)
            await _arecord(breaker, permit, outcome) if remote else _record(breaker, permit, outcome)
            _retry_hint(breaker, outcome, exc)
            if observed:
                _end(breaker, call, span, breaker._clock() - start, err, exc, permit)
            raise
        if not timed and adapter is None and breaker._config.is_failure_result is None:
            outcome, err, elapsed = SUCCESS, None, 0.0
        else:
            outcome, err, elapsed = _returned(breaker, call, adapter, result, start, timed)
        await _arecord(breaker, permit, outcome) if remote else _record(breaker, permit, outcome)
        _slow(breaker, elapsed)
        if observed:
            _end(breaker, call, span, elapsed, err, None, permit)
        return result
    finally:
        if span is not None:
            _detach(span)


def _timed(breaker: CircuitBreaker) -> bool:
    """Whether the call's duration matters (a per-call timeout or the slow-call rule is configured)."""
    config = breaker._config
    return config.timeout is not None or config.slow_call_seconds is not None


def _slow(breaker: CircuitBreaker, elapsed: float) -> None:
    """The slow-call rule (``slow_call_seconds``), when configured: off by default."""
    if breaker._config.slow_call_seconds is None:
        return
    try:
        breaker.record_duration(elapsed)
    except Exception:
        _bookkeeping_failed("recording a duration")


def _raised(
    breaker: CircuitBreaker, call: ToolCall | None, adapter: Adapter | None, exc: BaseException
) -> tuple[int, str | None]:
    """(outcome, ``error.type``) of a call that raised ``exc``."""
    if isinstance(exc, ToolTimeoutError):
        return FAILURE, TIMEOUT_ERROR_TYPE
    outcome = _classify(breaker, exc, call, adapter)
    return outcome, (error_type(exc) if outcome == FAILURE else None)


def _returned(
    breaker: CircuitBreaker, call: ToolCall | None, adapter: Adapter | None, result: Any, start: float, timed: bool
) -> tuple[int, str | None, float]:
    """(outcome, ``error.type``, elapsed seconds) of a call that returned ``result``."""
    elapsed = breaker._clock() - start if timed else 0.0
    config = breaker._config
    err = None
    if config.timeout is not None and elapsed > config.timeout:
        err = TIMEOUT_ERROR_TYPE
    elif adapter is not None or config.is_failure_result is not None:
        err = _result_error(breaker, call, result, adapter)
    if err == IGNORED_RESULT:
        return IGNORED, None, elapsed
    return (SUCCESS if err is None else FAILURE), err, elapsed


async def _arecord(breaker: CircuitBreaker, permit: Any, outcome: int) -> None:
    """:func:`_record` through a store's asyncio client."""
    if permit is None:
        return
    try:
        await breaker.arecord(permit, outcome)
    except Exception:
        _bookkeeping_failed("recording an outcome")


async def _await_within(awaitable: Any, timeout: float, tool: str) -> Any:
    """Await ``awaitable``, cancelled after ``timeout`` seconds (``ToolTimeoutError``).

    asyncio (and uvloop) use the cheap per-loop watch; any other loop (trio)
    an anyio cancel scope. The awaitable is always awaited: a problem in our
    timeout bookkeeping means it runs without a timeout, never un-awaited.
    """
    import asyncio  # here, not at the top: only timed calls need it, and a framework's import would pay for it

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

    guarded = functools.wraps(fn)(_breaker_module.decorated(breaker, fn))
    guarded.breaker = breaker  # type: ignore[attr-defined]
    return guarded


def _after_raise(breaker: CircuitBreaker, permit: Any, exc: BaseException) -> None:
    """Record a call that raised, for the breaker's quick path."""
    outcome = _raised(breaker, None, None, exc)[0]
    _record(breaker, permit, outcome)
    _retry_hint(breaker, outcome, exc)


# The rejection :func:`_reject` answers when nothing watches and no adapter is involved.
_breaker_module.install_runner(run_sync, run_async, _decorate, _after_raise, _rejection_result)


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
        # breaker_for, inlined: every framework tool call comes this way
        registry = self._registry if self._registry is not None else default_registry()
        try:
            breaker = registry.breaker_for(call, config)
        except Exception:
            _bookkeeping_failed("finding a breaker")
            breaker = None
        if breaker is None:
            return fn(*args, **(kwargs or {}))
        # The loop guard (loops.py): an identical call that already failed N times is not run.
        answer, watch = _loops.enter(call, breaker, adapter, args, kwargs or {})
        if answer is not _loops.RUN:
            return answer
        if watch is not None:
            fn = watch.wrap(fn)
        # Upstream breaker (upstream_gate.py): admitted first, counts transport failures.
        # Looked up only for a tool with a source or when upstreams are configured.
        if call.source is not None or registry.settings.upstreams:
            upstream = _upstream.breaker_for_call(registry, call)
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
        # The loop guard (loops.py): an identical call that already failed N times is not run.
        answer, watch = _loops.enter(call, breaker, adapter, args, kwargs or {})
        if answer is not _loops.RUN:
            return answer
        if watch is not None:
            fn = watch.wrap(fn)
        # Upstream breaker (upstream_gate.py): admitted first, counts transport failures.
        upstream = _upstream.breaker_for_call(self.registry, call)
        if upstream is not None:
            return await _upstream_gate.run_async(upstream, breaker, run_async, fn, args, kwargs or {}, call, adapter)
        return await run_async(breaker, fn, args, kwargs or {}, call, adapter)


_default_guard = Guard()


def _holds_for_good(registry: BreakerRegistry, call: ToolCall, breaker: CircuitBreaker) -> bool:
    try:
        return registry.holds_for_good(call, breaker)
    except Exception:
        _bookkeeping_failed("finding a breaker")
        return False


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
        if _config.get_settings().status_addr:  # the server module (http.server) only when asked for
            from otel_breaker.status_server import start_from_settings

            start_from_settings()  # once, never raises
        name = tool or getattr(fn, "__name__", "tool")
        if clock is not None:
            settings = (registry if registry is not None else default_registry()).settings
            breaker = CircuitBreaker(name, settings.config_for(name, config), clock=clock, agent_name=agent_name)
            return _decorate(breaker, fn)
        reg = registry if registry is not None else default_registry()
        call = ToolCall(name, agent=agent, agent_name=agent_name or agent_display_name(agent))
        if config is not None:
            reg.breaker_for(call, config)  # create it now with this config
        guard_ = Guard(reg)
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_guarded(*args: Any, **kwargs: Any) -> Any:
                return await guard_.acall(call, fn, args, kwargs, config=config)

            return async_guarded

        kept: list[Any] = [None, None]

        def look_up(*args: Any, **kwargs: Any) -> Any:
            # The registry lookup, kept while the registry says it cannot change
            # (and the settings that could put the tool behind an upstream stay the same).
            breaker = guard_.breaker_for(call, config)
            if breaker is None:
                return fn(*args, **kwargs)
            # Upstream breaker (upstream_gate.py): admitted first, counts transport failures.
            upstream = _upstream.breaker_for_call(reg, call)
            if upstream is not None:
                kept[0] = None
                return _upstream_gate.run_sync(upstream, breaker, run_sync, fn, args, kwargs, call)
            kept[0] = breaker if _holds_for_good(reg, call, breaker) else None
            kept[1] = _config._settings
            return run_sync(breaker, fn, args, kwargs, call)

        # Kept while no session scope is active and the settings (upstream groups) stay the same.
        return functools.wraps(fn)(_breaker_module.kept_decorated(kept, fn, _session_of_context, look_up, _config))

    return decorate
