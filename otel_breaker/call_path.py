"""The one entrance: every guarded call happens here.

:class:`CallPath` is the only driver of the step sequence (``call_steps.py``).
``Guard.call``/``acall`` and every framework adapter, ``@guard``, ``@breaker``,
``breaker.call``, fallback routing, the span processor and MCP's first call all come
through it: :meth:`CallPath.run`/:meth:`CallPath.arun` find the tool's breaker (and
its upstream's) once, :meth:`CallPath.drive`/:meth:`CallPath.adrive` carry out the
steps for a breaker already found, and :meth:`CallPath.observe` counts a call learned
after the fact (its admission and its outcome together).

The steps are written once, without I/O; the two drivers only carry them out, one with
plain calls, the other awaiting (a store's asyncio client, the call, its timeout). A
call with nothing to do before its admission and nothing to read of its ending (no
run, no adapter, no upstream, nobody watching, a plain configuration) takes the short
form of the same steps: the breaker admits, the tool runs, a success settles. A
rejection is answered by the step that answers every rejection, and a call that raised
goes on through the sequence from the call on (``steps(admitted=...)``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from otel_breaker import deadline, health
from otel_breaker import retry_policy as _retry_policy
from otel_breaker import upstream as _upstream
from otel_breaker import upstream_gate as _upstream_gate
from otel_breaker.breaker import REJECTED, SHADOW, CircuitBreaker, CircuitBreakerConfig, State
from otel_breaker.call_steps import ADMIT, CALL, SETTLE, Raised, ToolTimeoutError, admit, reject, settle, steps
from otel_breaker.classify import FAILURE, IGNORED, SUCCESS, UPSTREAM_MARK
from otel_breaker.latency import LATENCY
from otel_breaker.loglines import bookkeeping_failed
from otel_breaker.registry import BreakerRegistry, default_registry
from otel_breaker.runs import RUN_VARIABLE
from otel_breaker.telemetry import TELEMETRY
from otel_breaker.toolcall import ToolCall

# Where a provider appears when one exists (telemetry's slots): while every one holds
# None nobody watches, and the short form applies. Read inline: read on every call.
_explicit_slot, _explicit_key = TELEMETRY.watch_slots()[0]
_tracer_slot, _tracer_key = TELEMETRY.watch_slots()[1]
_meter_slot, _meter_key = TELEMETRY.watch_slots()[2]
_logger_slot, _logger_key = TELEMETRY.watch_slots()[3]

# Health checks hear every transition from the first breaker on (it loads this module).
health.install()


#: ``CallPath.observe`` without an output to judge.
NO_OUTPUT: Any = object()


async def _aadmit(breaker: CircuitBreaker) -> Any:
    try:
        return await breaker.atry_acquire()
    except Exception:
        bookkeeping_failed("acquiring a permit")
        return None


async def _asettle(breaker: CircuitBreaker, permit: Any, outcome: int) -> None:
    if permit is None:
        return
    try:
        await breaker.aon_outcome(permit, outcome)
    except Exception:
        bookkeeping_failed("recording an outcome")


async def _await_within(awaitable: Any, timeout: float, tool: str) -> Any:
    """Await ``awaitable``, cancelled after ``timeout`` seconds (``ToolTimeoutError``).

    asyncio (and uvloop) use the cheap per-loop watch; any other loop (trio)
    an anyio cancel scope. The awaitable is always awaited: a problem in our
    timeout bookkeeping means it runs without a timeout, never un-awaited.
    """
    import asyncio  # here, not at the top: only timed calls need it, and a framework's import would pay for it

    try:
        watch = deadline.start(timeout)
        scope = deadline.foreign_scope(timeout) if watch is None else None
    except Exception:
        bookkeeping_failed("starting a timeout")
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


class CallPath:
    """Tool calls through the breakers of one registry, and the only driver of the step
    sequence: :meth:`run`/:meth:`arun` find the tool's breaker and its upstream's, then
    :meth:`drive`/:meth:`adrive` carry out the steps (also for a breaker already found:
    ``breaker.call``, decorators, ``@guard``'s kept breaker, fallback routing)."""

    def __init__(self, registry: BreakerRegistry | None = None) -> None:
        #: The registry whose breakers the calls go through (the process's by default).
        self.registry = registry if registry is not None else default_registry()

    def breaker_for(self, call: ToolCall, config: CircuitBreakerConfig | None = None) -> CircuitBreaker | None:
        """The tool's breaker, or None when finding it failed (the call then runs unguarded)."""
        try:
            return self.registry.breaker_for(call, config)
        except Exception:
            bookkeeping_failed("finding a breaker")
            return None

    def find(
        self, call: ToolCall, config: CircuitBreakerConfig | None = None
    ) -> tuple[CircuitBreaker | None, CircuitBreaker | None]:
        """(the tool's breaker, the upstream breaker it runs behind), with one look at the
        registry and its settings. (None, None) when finding the breaker failed: the call
        then runs unguarded."""
        registry = self.registry
        try:
            settings = registry.settings
            breaker = registry.breaker_for(call, config, settings)
        except Exception:
            bookkeeping_failed("finding a breaker")
            return None, None
        if call.source is None and not settings.upstreams:
            return breaker, None  # the common case: not an MCP tool, no upstream configured
        return breaker, _upstream.breaker_for_call(registry, call)

    def upstream_for(self, call: ToolCall) -> CircuitBreaker | None:
        """The upstream breaker the tool runs behind, or None. Looked up only for a tool
        with a source or when upstreams are configured; never raises."""
        return _upstream.breaker_for_call(self.registry, call)

    async def aprobe_upstream(self, call: ToolCall, probe: Callable[[], Any]) -> None:
        """Before ``call`` of a destructive tool reaches a half-open upstream, probe the
        upstream with ``probe`` (a request without side effects, an MCP ``ping``:
        ``upstream_gate.probe_safely``). Never raises our own failures."""
        try:
            upstream = self.upstream_for(call)
            if upstream is None or upstream.peek_state() is State.CLOSED:
                return
            breaker = self.breaker_for(call)
            if breaker is None:
                return
            effects = _retry_policy.tool_effects(breaker, call)
        except Exception:
            bookkeeping_failed("preparing an upstream probe")
            return
        await _upstream_gate.probe_safely(upstream, effects, probe)

    # -- entrances that find the breaker -------------------------------------------------

    def run(
        self,
        call: ToolCall,
        fn: Callable[..., Any],
        args: tuple = (),
        kwargs: dict | None = None,
        adapter: Any = None,
        config: CircuitBreakerConfig | None = None,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` as tool call ``call`` (``config`` for a breaker created now)."""
        if kwargs is None:
            kwargs = {}
        breaker, upstream = self.find(call, config)
        if breaker is None:
            return fn(*args, **kwargs)
        return self.drive(breaker, fn, args, kwargs, call, adapter, upstream)

    async def arun(
        self,
        call: ToolCall,
        fn: Callable[..., Any],
        args: tuple = (),
        kwargs: dict | None = None,
        adapter: Any = None,
        config: CircuitBreakerConfig | None = None,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` (awaited when it returns an awaitable) as tool call ``call``."""
        if kwargs is None:
            kwargs = {}
        breaker, upstream = self.find(call, config)
        if breaker is None:
            result = fn(*args, **kwargs)
            return await result if inspect.isawaitable(result) else result
        return await self.adrive(breaker, fn, args, kwargs, call, adapter, upstream)

    # -- the drivers -----------------------------------------------------------------------

    def drive(
        self,
        breaker: CircuitBreaker,
        fn: Callable[..., Any],
        args: tuple,
        kwargs: dict,
        call: ToolCall | None = None,
        adapter: Any = None,
        upstream: CircuitBreaker | None = None,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` through ``breaker`` (and ``upstream``) with plain calls.
        Sync calls are never interrupted: one that runs past ``timeout`` counts as a
        failure when it returns."""
        # Whether anybody watches, read inline: it is read on every call.
        try:
            unwatched = (
                _explicit_slot[_explicit_key] is None
                and _tracer_slot[_tracer_key] is None
                and _meter_slot[_meter_key] is None
                and _logger_slot[_logger_key] is None
            )
        except KeyError:  # a slot whose name was deleted: somebody may watch
            unwatched = False
        if (
            adapter is None
            and upstream is None
            and breaker.plain
            and RUN_VARIABLE.get() is None
            and unwatched
            and not LATENCY.enabled
        ):
            # The short form: nothing to do before the admission, nothing to read of a success.
            try:  # admit(breaker), written out: the short form is the cheapest call there is
                permit = breaker.try_acquire()
            except Exception:
                bookkeeping_failed("acquiring a permit")
                permit = None
            if permit == REJECTED:
                run_anyway, value = reject(breaker, call, None, None, False)
                if not run_anyway:
                    return value
                shadow = steps(breaker, call, None, None, False, args, kwargs, SHADOW)
                return self._carry_out(shadow, fn, args, kwargs)
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                following = steps(breaker, call, None, None, False, args, kwargs, permit)
                return self._carry_out(following, fn, args, kwargs, exc)
            if permit is not None:
                try:
                    breaker.on_success(permit)
                except Exception:
                    bookkeeping_failed("recording an outcome")
            return result
        sequence = steps(breaker, call, adapter, upstream, not unwatched, args, kwargs)
        return self._carry_out(sequence, fn, args, kwargs)

    def _carry_out(
        self, sequence: Any, fn: Callable[..., Any], args: tuple, kwargs: dict, raised: BaseException | None = None
    ) -> Any:
        """Carry out the effects ``sequence`` asks for with plain calls; its value, or raise
        what it says. ``raised``: the call already ran and raised this (the short form)."""
        try:
            if raised is None:
                effect = next(sequence)
            else:
                next(sequence)  # the sequence asks for the call that already ran
                effect = sequence.send(Raised(raised))
            while True:
                kind = effect[0]
                if kind == CALL:
                    try:
                        result = fn(*args, **kwargs)
                    except BaseException as exc:
                        effect = sequence.send(Raised(exc))
                    else:
                        effect = sequence.send(result)
                elif kind == ADMIT:
                    effect = sequence.send(admit(effect[1]))
                elif kind == SETTLE:
                    settle(effect[1], effect[2], effect[3])
                    effect = next(sequence)
                else:
                    _retry_policy.TIMING.sleep(effect[1])
                    effect = next(sequence)
        except StopIteration as done:
            value = done.value
        if value.__class__ is Raised:
            raise value.exc
        return value

    async def adrive(
        self,
        breaker: CircuitBreaker,
        fn: Callable[..., Any],
        args: tuple,
        kwargs: dict,
        call: ToolCall | None = None,
        adapter: Any = None,
        upstream: CircuitBreaker | None = None,
    ) -> Any:
        """:meth:`drive`'s steps, awaiting the call (a coroutine function or a plain one), a
        store's asyncio client and ``timeout``, at which a coroutine is cancelled and
        counted as a failure."""
        try:
            unwatched = (
                _explicit_slot[_explicit_key] is None
                and _tracer_slot[_tracer_key] is None
                and _meter_slot[_meter_key] is None
                and _logger_slot[_logger_key] is None
            )
        except KeyError:
            unwatched = False
        if (
            adapter is None
            and upstream is None
            and breaker.plain
            and RUN_VARIABLE.get() is None
            and unwatched
            and not LATENCY.enabled
            and not breaker.awaits_store
        ):
            try:  # admit(breaker), written out: the short form is the cheapest call there is
                permit = breaker.try_acquire()
            except Exception:
                bookkeeping_failed("acquiring a permit")
                permit = None
            if permit == REJECTED:
                run_anyway, value = reject(breaker, call, None, None, False)
                if not run_anyway:
                    return value
                shadow = steps(breaker, call, None, None, False, args, kwargs, SHADOW)
                return await self._acarry_out(shadow, fn, args, kwargs)
            try:
                result = fn(*args, **kwargs)
                if inspect.isawaitable(result):
                    result = await result
            except BaseException as exc:
                following = steps(breaker, call, None, None, False, args, kwargs, permit)
                return await self._acarry_out(following, fn, args, kwargs, exc)
            if permit is not None:
                try:
                    breaker.on_success(permit)
                except Exception:
                    bookkeeping_failed("recording an outcome")
            return result
        sequence = steps(breaker, call, adapter, upstream, not unwatched, args, kwargs)
        return await self._acarry_out(sequence, fn, args, kwargs)

    async def _acarry_out(
        self, sequence: Any, fn: Callable[..., Any], args: tuple, kwargs: dict, raised: BaseException | None = None
    ) -> Any:
        """Carry out the effects ``sequence`` asks for, awaiting the call, the store and the back-off."""
        try:
            if raised is None:
                effect = next(sequence)
            else:
                next(sequence)  # the sequence asks for the call that already ran
                effect = sequence.send(Raised(raised))
            while True:
                kind = effect[0]
                if kind == CALL:
                    try:
                        result = fn(*args, **kwargs)
                        if inspect.isawaitable(result):
                            timeout = effect[1]
                            if timeout is None:
                                result = await result
                            else:
                                result = await _await_within(result, timeout, effect[2])
                    except BaseException as exc:
                        effect = sequence.send(Raised(exc))
                    else:
                        effect = sequence.send(result)
                elif kind == ADMIT:
                    effect = sequence.send(await _aadmit(effect[1]))
                elif kind == SETTLE:
                    await _asettle(effect[1], effect[2], effect[3])
                    effect = next(sequence)
                else:
                    await _retry_policy.TIMING.asleep(effect[1])
                    effect = next(sequence)
        except StopIteration as done:
            value = done.value
        if value.__class__ is Raised:
            raise value.exc
        return value

    def decorate(self, breaker: CircuitBreaker, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` behind ``breaker`` (``@breaker``, ``@guard(clock=...)``): sync or async."""
        path = self
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_guarded(*args: Any, **kwargs: Any) -> Any:
                return await path.adrive(breaker, fn, args, kwargs)

            async_guarded.breaker = breaker  # type: ignore[attr-defined]
            return async_guarded

        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            return path.drive(breaker, fn, args, kwargs)

        guarded.breaker = breaker  # type: ignore[attr-defined]
        return guarded

    def observe(
        self,
        call: ToolCall,
        outcome: int,
        output: Any = NO_OUTPUT,
        exc: BaseException | None = None,
        adapter: Any = None,
    ) -> CircuitBreaker | None:
        """A call that already ran, learned after the fact (a foreign tool span, MCP's
        first call): its admission and outcome are counted together on the tool's
        breaker. A success with an ``output`` is judged by the breaker's result
        validator (``is_failure_result``) first. Returns the breaker (None when none
        could be found).

        With an ``adapter``, whose call ended in ``exc`` (or returned ``output``), the
        tool's upstream takes its share first, as on the call path (``upstream_gate``):
        a transport failure counts for the upstream only, an answer is its success. A
        span's status alone (no adapter) cannot tell a transport failure: no share."""
        breaker = self.breaker_for(call)
        if breaker is None:
            return None
        if adapter is not None and self._upstream_observes(call, output, exc, adapter):
            outcome = IGNORED  # the upstream counted it: the tool is not to blame
        try:
            validator = breaker.config.is_failure_result
            if outcome == SUCCESS and output is not NO_OUTPUT and validator is not None:
                try:
                    outcome = FAILURE if validator(output) else SUCCESS
                except Exception:
                    outcome = SUCCESS
            breaker.observe(outcome)
        except Exception:
            bookkeeping_failed("recording an outcome")
        return breaker

    def _upstream_observes(self, call: ToolCall, output: Any, exc: BaseException | None, adapter: Any) -> bool:
        """The upstream's share of an observed call; True when it took a transport failure.
        A failure of this bookkeeping leaves the call as if it had no upstream."""
        upstream = self.upstream_for(call)
        if upstream is None:
            return False
        try:
            if exc is None:
                upstream.observe(_upstream_gate.outcome_of_answer(adapter, call, output))
                return False
            upstream.observe(_upstream_gate.outcome_of_exception(upstream, exc))
            return getattr(exc, UPSTREAM_MARK, None) is not None
        except Exception:
            bookkeeping_failed("recording an upstream's outcome")
            return False


#: The call path of calls made on a breaker directly (``breaker.call``, ``@breaker``):
#: the breaker is already found, so no registry is asked.
DIRECT = CallPath()
