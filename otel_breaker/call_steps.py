"""The steps of one guarded call, written once, without I/O.

:func:`steps` is the whole sequence of a guarded call as a generator: it
yields what has to be done (admit a call on a breaker, settle an outcome, run
the tool) and is sent the answers. It decides everything (rejections, the
escalation gate, the upstream's share of an outcome, classification, timeouts,
retry hints, telemetry); the sync and async drivers in ``call_path.py`` only
carry out its requests, one by plain calls, the other by awaiting. So the two
cannot disagree.

Two promises hold throughout:

* a failure of our own bookkeeping is logged and the call runs unguarded:
  the middleware never turns a healthy call into a failure;
* a rejected call never runs the tool, and the caller gets a value its agent
  loop understands (an error result, the adapter's native value, or
  :class:`~otel_breaker.breaker.CircuitOpenError` when ``graceful_degradation=False``).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, NamedTuple, Protocol

from otel_breaker import loops, rejection, run_budget
from otel_breaker import retry_hint as _retry_hints
from otel_breaker import retry_policy as _retry_policy
from otel_breaker import upstream_gate as _upstream_gate
from otel_breaker.breaker import REJECTED, SHADOW, CircuitBreaker, State
from otel_breaker.classify import FAILURE, IGNORED, OUTCOME_NAMES, SUCCESS, UPSTREAM, Verdict, result_text
from otel_breaker.effects import effects_of
from otel_breaker.latency import LATENCY
from otel_breaker.loglines import bookkeeping_failed
from otel_breaker.runs import RUN_VARIABLE, current_run
from otel_breaker.sanitize import bounded, exception_message, safe_name, sanitize
from otel_breaker.semconv import ATTR_EFFECTS, ATTR_OUTCOME_UNKNOWN, ATTR_RETRY_ATTEMPT
from otel_breaker.telemetry import TELEMETRY
from otel_breaker.toolcall import ToolCall
from otel_breaker.verdicts import (  # noqa: F401 - importable from here (adapters, users)
    IGNORED_RESULT,
    INVALID_RESULT_ERROR_TYPE,
    TIMEOUT_ERROR_TYPE,
    ToolTimeoutError,
    judge_raised,
    judge_returned,
)

#: What :func:`steps` asks of a driver: ``(CALL, timeout, tool)`` -> send the result, or
#: :class:`Raised` holding what the call raised (an async driver cancels an awaitable at
#: ``timeout`` with :class:`ToolTimeoutError`). What a call raised is sent, never thrown
#: in: a tool may raise ``GeneratorExit`` or ``StopIteration``, which a generator cannot
#: take. For a breaker whose store the async driver awaits (``awaits_store``) also
#: ``(ADMIT, breaker)`` -> send the permit (None when admission failed) and
#: ``(SETTLE, breaker, permit, outcome)`` -> send None; any other breaker is asked here.
ADMIT = 0
SETTLE = 1
CALL = 2
#: ``(SLEEP, seconds)`` -> send None: the back-off before a retry (``retry_policy.TIMING``:
#: the sync driver sleeps, the async one awaits).
SLEEP = 3

Effect = tuple[Any, ...]


class Raised:
    """What a call raised, as a value: sent into :func:`steps` by a driver for a call that
    raised, and returned by it for the driver to raise again (a generator can neither
    take a thrown ``GeneratorExit`` and go on, nor re-raise a ``StopIteration``)."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


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
    # Optional: ``unknown_outcome(call, exc, message)`` -> the framework's own error
    # carrying ``message`` for a destructive tool's call in doubt (or, where the framework
    # answers failures with a value, that value: an MCP ``isError`` result), or None.
    # Optional: ``unknown_outcome_result(call, result, message)`` -> the framework's own
    # failed value carrying ``message`` instead of ``result``, a failed value in doubt
    # (an MCP server's "504" answer to a destructive tool), or None: ``result`` as it is.
    # Optional: ``retried(call, failure, note)`` -> the last failure (the exception raised
    # or the failed value returned) carrying ``note``, the number of attempts, in the
    # form the framework shows the model; None: the default (see :func:`with_attempts`).


def default_call(breaker: CircuitBreaker) -> ToolCall:
    """The ToolCall of a call made without one (``breaker.call``, a decorator), kept on the breaker."""
    call = breaker.call_cache
    if call is None:
        call = breaker.call_cache = ToolCall(breaker.name, agent_name=breaker.agent_name, session_id=breaker.session_id)
    return call


def count_run_rejection(breaker: CircuitBreaker, call: ToolCall | None, by: CircuitBreaker | None = None) -> None:
    """Breaker ``by`` (default: the tool's own ``breaker``) rejected a call: one more for its
    tool in the run open here, if any (the waste budget, ``run_budget.py``, reads it before
    the run's next call; the tool it hides comes back once ``by`` recovers)."""
    opened = current_run()
    if opened is None:
        return
    if call is None:
        call = default_call(breaker)
    opened.rejected(call.tool, call.where, breaker if by is None else by)


def reject(
    breaker: CircuitBreaker, call: ToolCall | None, adapter: Adapter | None, span: Any, observed: bool
) -> tuple[bool, Any]:
    """A call ``breaker`` rejected: (run_anyway, value). Run anyway only when the
    escalation gate approves a high-stakes call (marked on the span)."""
    config = breaker.config
    if (
        adapter is None
        and config.graceful_degradation
        and not config.high_stakes
        and (not observed or (span is None and not TELEMETRY.logs_on()))
    ):
        # Nothing to report to and nothing framework-specific: the cached rejection.
        if RUN_VARIABLE.get() is not None:
            count_run_rejection(breaker, call)
        return False, rejection.rejection_result(breaker, call)
    if call is None:
        call = default_call(breaker)
    info = rejection.Rejection(breaker, call)
    if config.high_stakes and rejection.escalation_approves(call, info):
        TELEMETRY.escalated(span, call, breaker)
        return True, None
    count_run_rejection(breaker, call)
    try:
        TELEMETRY.rejected(span, call, breaker, info)
    except Exception:
        bookkeeping_failed("reporting a rejection")
    if adapter is not None:
        return False, adapter.rejection(call, info)
    if config.graceful_degradation:
        return False, info.as_dict()
    raise info.error()


class OutcomeUnknownError(Exception):
    """A destructive tool's call failed in a way that does not say whether it took effect
    (a timeout, a connection dropped after the request left): it is not run again, and
    the model reads that it must check before calling again. ``__cause__`` is the error."""

    def __init__(self, tool: str, cause: BaseException) -> None:
        self.tool = tool
        super().__init__(outcome_unknown_text(tool, f"{type(cause).__name__}: {exception_message(cause, 300)}"))


def outcome_unknown_text(tool: str, detail: str) -> str:
    """What the model reads of a destructive tool's call in doubt (``detail``: how it failed)."""
    return sanitize(
        f"Tool '{safe_name(tool)}': outcome unknown: the call may have taken effect; check before "
        f"calling again. ({bounded(detail, 320)})"
    )


def _count_neutral(breaker: CircuitBreaker, verdict: Verdict) -> None:
    """A neutral outcome, by its reason and rule, for ``otel_breaker.calls.neutral``."""
    try:
        TELEMETRY.count_neutral(breaker, verdict.reason, verdict.rule)
    except Exception:
        bookkeeping_failed("counting a neutral outcome")


def retry_hint(breaker: CircuitBreaker, outcome: int, exc: BaseException) -> None:
    """A failure whose service said when to come back (``Retry-After``, see
    ``retry_hint.py``) opens the breaker at once, for that long."""
    if outcome != FAILURE:
        return
    try:
        seconds = _retry_hints.retry_hint(exc)
        if seconds is not None:
            breaker.open_for(seconds)
    except Exception:
        bookkeeping_failed("reading a retry hint")


def admit(breaker: CircuitBreaker) -> Any:
    """Ask ``breaker`` to admit a call (sync); None when our bookkeeping failed (the call
    then runs unguarded, and nothing is settled for it)."""
    try:
        return breaker.try_acquire()
    except Exception:
        bookkeeping_failed("acquiring a permit")
        return None


def settle(breaker: CircuitBreaker, permit: Any, outcome: int) -> None:
    """Report an outcome to ``breaker`` (sync); a failure of ours is logged."""
    if permit is None:
        return
    try:
        if outcome == SUCCESS:
            breaker.on_success(permit)
        else:
            breaker.on_outcome(permit, outcome)
    except Exception:
        bookkeeping_failed("recording an outcome")


def _settle(breaker: CircuitBreaker, permit: Any, outcome: int) -> Generator[Effect, Any, None]:
    """Settle an outcome: here, or by the driver for a store the async driver awaits."""
    if breaker.awaits_store:
        yield (SETTLE, breaker, permit, outcome)
    else:
        settle(breaker, permit, outcome)


def _slow(breaker: CircuitBreaker, elapsed: float) -> None:
    """The slow-call rule (``slow_call_seconds``), when configured: off by default."""
    try:
        breaker.record_duration(elapsed)
    except Exception:
        bookkeeping_failed("recording a duration")


class Attempt(NamedTuple):
    """How one attempt of a call ended: what the caller would get (``value``: the result,
    :class:`Raised` or a rejection's value), the verdict (None: not run), what it raised
    or returned, its span handle, when it started (breaker clock), and whether ``value``
    is the "outcome unknown" answer of a destructive tool's call in doubt (never run again)."""

    value: Any
    verdict: Verdict | None
    exc: BaseException | None
    span: Any
    started: float
    in_doubt: bool = False


#: What a retry's admission answers when a breaker stopped it (the call keeps its last failure).
_NOT_ADMITTED = Attempt(None, None, None, None, 0.0)


#: ``steps(admitted=...)`` when the breaker has not been asked yet (the usual case).
NOT_ASKED: Any = object()


def steps(
    breaker: CircuitBreaker,
    call: ToolCall | None,
    adapter: Adapter | None,
    upstream: CircuitBreaker | None,
    observed: bool,
    args: tuple = (),
    kwargs: dict | None = None,
    admitted: Any = NOT_ASKED,
) -> Generator[Effect, Any, Any]:
    """One guarded call, as the effects a driver carries out; returns the call's value
    (or :class:`Raised`: what the call raised, for the driver to raise).

    1. inside a run, the waste budget (``run_budget.py``) may answer for a tool the run
       kept calling while it was rejected; the loop guard (``loops.py``) may answer for
       an identical call that already ended badly ``loop_limit`` times;
    2. the upstream breaker (``upstream_gate.py``), when the tool has one, admits
       first; open, it answers for the call and the tool's breaker counts nothing;
    3. the tool's breaker admits, or its rejection answers;
    4. the tool runs; its ending is judged once (``verdicts.py``): the upstream takes
       its share first (a transport failure is marked so the tool's breaker treats it
       as neutral), then the tool's breaker settles the verdict; retry hints, the
       slow-call rule and the span follow;
    5. a failure goes on to :func:`after_failure`: a retry below the model, when
       one is allowed, or the "outcome unknown" answer of a destructive tool;
    6. the loop guard records how the call ended, from the same verdict.

    ``admitted``: the permit the driver already holds for a call with nothing to do
    before its admission (no run, no adapter, no upstream: the drivers' short form,
    ``call_path.py``); the sequence then starts at the call.
    """
    entry = None
    if admitted is NOT_ASKED:
        if call is None:
            call = default_call(breaker)
        if RUN_VARIABLE.get() is not None:  # the waste budget counts within a run only
            answer = run_budget.check(call, breaker, adapter)
            if answer is not run_budget.RUN:
                return answer
        answer, entry = loops.check(call, breaker, adapter, args, kwargs or {})
        if answer is not loops.RUN:
            return answer
    attempt = yield from _attempt(breaker, call, adapter, upstream, observed, None, 1, admitted)
    verdict = attempt.verdict
    if verdict is not None and (verdict.outcome == FAILURE or verdict.reason == UPSTREAM):
        attempt = yield from after_failure(breaker, call, adapter, upstream, observed, attempt)
    if entry is not None and attempt.verdict is not None:
        entry.record(attempt.verdict, attempt.in_doubt, attempt.exc, attempt.value)
    return attempt.value


def _attempt(
    breaker: CircuitBreaker,
    call: ToolCall | None,
    adapter: Adapter | None,
    upstream: CircuitBreaker | None,
    observed: bool,
    first: Attempt | None,
    number: int,
    admitted: Any = NOT_ASKED,
) -> Generator[Effect, Any, Attempt]:
    """Attempt ``number`` of a call: admission, the call, its outcome, its span. ``first``:
    the logical call's first attempt when this one is a retry (its span is linked; a
    breaker that does not admit a retry answers :data:`_NOT_ADMITTED`, never a rejection
    for the model). ``admitted``: see :func:`steps`."""
    up_permit = None
    escalated_upstream = False
    if upstream is not None:
        if call is None:
            call = default_call(breaker)
        if upstream.awaits_store:
            up_permit = yield (ADMIT, upstream)
        else:
            up_permit = admit(upstream)
        if up_permit == REJECTED:
            if first is not None:
                return _NOT_ADMITTED
            run_anyway, value = _upstream_gate.reject(upstream, breaker, call, adapter)
            if not run_anyway:
                count_run_rejection(breaker, call, upstream)
                return Attempt(value, None, None, None, 0.0)
            up_permit = SHADOW
            escalated_upstream = True
    span = None
    if observed:
        # Telemetry for a call somebody watches: the span carries the tool's side-effect
        # class; a retry's (``first``: the logical call's first attempt) its number and a
        # link to the first attempt's span.
        if call is None:
            call = default_call(breaker)
        try:
            extra: dict[str, Any] = {ATTR_EFFECTS: effects_of(call.tool, call.source, breaker.config.effects)}
            if first is None:
                span = TELEMETRY.start(call, breaker, extra=extra)
            else:
                extra[ATTR_RETRY_ATTEMPT] = number
                span = TELEMETRY.start(call, breaker, extra=extra, linked=first.span)
        except Exception:
            bookkeeping_failed("starting a span")
            span = None
    try:
        if escalated_upstream:
            TELEMETRY.escalated(span, call, upstream)
        if admitted is not NOT_ASKED:
            permit = admitted
        elif breaker.awaits_store:
            permit = yield (ADMIT, breaker)  # the async driver awaits the store's asyncio client
        else:
            try:  # admit(breaker), written out: every call passes here
                permit = breaker.try_acquire()
            except Exception:
                bookkeeping_failed("acquiring a permit")
                permit = None
        if permit == REJECTED:
            if first is not None:
                if up_permit is not None:
                    yield from _settle(upstream, up_permit, IGNORED)
                return _NOT_ADMITTED
            try:
                run_anyway, value = reject(breaker, call, adapter, span, observed)
            except BaseException:
                if up_permit is not None:
                    yield from _settle(upstream, up_permit, IGNORED)  # never reached the upstream
                raise
            if not run_anyway:
                if up_permit is not None:
                    yield from _settle(upstream, up_permit, IGNORED)
                return Attempt(value, None, None, span, 0.0)
            permit = SHADOW
        config = breaker.config
        timed = (
            observed
            or config.timeout is not None
            or config.slow_call_seconds is not None
            or LATENCY.enabled
            or config.retry is not None
        )
        start = breaker.clock() if timed else 0.0
        result = yield (CALL, config.timeout, call.tool if call is not None else breaker.name)
        if result.__class__ is Raised:
            exc = result.exc
            if up_permit is not None:
                yield from _settle(upstream, up_permit, _upstream_gate.outcome_of_exception(upstream, exc))
            verdict, err = judge_raised(breaker, call, adapter, exc)
            if timed and LATENCY.enabled:  # a call begun before an endpoint switched latency on has no start
                LATENCY.record(breaker, breaker.clock() - start)
            if breaker.awaits_store:
                yield (SETTLE, breaker, permit, verdict.outcome)
            else:
                settle(breaker, permit, verdict.outcome)
            if verdict.outcome == IGNORED:
                _count_neutral(breaker, verdict)
            retry_hint(breaker, verdict.outcome, exc)
            value = failed_value(breaker, call, adapter, verdict, exc, span)
            if observed:
                try:
                    TELEMETRY.finish(span, call, breaker, breaker.clock() - start, err, exc, permit, verdict=verdict)
                except Exception:
                    bookkeeping_failed("ending a span")
            return _failed_attempt(value, verdict, exc, span, start)
        if up_permit is not None:
            yield from _settle(upstream, up_permit, _upstream_gate.outcome_of_answer(adapter, call, result))
        verdict, err, elapsed = judge_returned(breaker, call, adapter, result, start, timed)
        if timed and LATENCY.enabled:
            LATENCY.record(breaker, elapsed)
        if breaker.awaits_store:
            yield (SETTLE, breaker, permit, verdict.outcome)
        elif permit is not None:
            try:  # settle(...), written out: every call that returns passes here
                if verdict.outcome == SUCCESS:
                    breaker.on_success(permit)
                else:
                    breaker.on_outcome(permit, verdict.outcome)
            except Exception:
                bookkeeping_failed("recording an outcome")
        if verdict.outcome == IGNORED:
            _count_neutral(breaker, verdict)
        if breaker.config.slow_call_seconds is not None:
            _slow(breaker, elapsed)
        answer = result
        if verdict.outcome == FAILURE and adapter is not None:
            answer = failed_result(breaker, call, adapter, verdict, result, span)
        if observed:
            try:
                TELEMETRY.finish(span, call, breaker, elapsed, err, None, permit, verdict=verdict)
            except Exception:
                bookkeeping_failed("ending a span")
        return Attempt(answer, verdict, None, span, start, answer is not result)
    finally:
        if span is not None:
            TELEMETRY.detach(span)


def after_failure(
    breaker: CircuitBreaker,
    call: ToolCall | None,
    adapter: Adapter | None,
    upstream: CircuitBreaker | None,
    observed: bool,
    first: Attempt,
) -> Generator[Effect, Any, Attempt]:
    """What follows a failed attempt; returns the attempt whose value the caller gets:

    * a destructive tool whose failure leaves its outcome in doubt (a timeout, a dropped
      connection) is never run again; the caller gets :class:`OutcomeUnknownError`;
    * a transient failure of a read-only or idempotent tool is retried when
      ``retry_policy.retry_delay`` allows (a back-off, then a new attempt through the
      same admissions: an open breaker stops it);
    * otherwise, and when the retries run out, the caller gets the last failure, with
      the number of attempts on the span (and in a note on a raised exception).
    """
    last = first
    retries = 0
    while True:
        verdict = last.verdict
        if verdict is None or verdict.outcome == SUCCESS:
            return last
        if last.in_doubt:
            return last  # a destructive tool's call in doubt: never run again
        try:
            delay, refused = _retry_policy.retry_delay(
                breaker, upstream, call, verdict, last.exc, retries, first.started
            )
        except Exception:
            bookkeeping_failed("deciding a retry")
            delay, refused = None, None
        if delay is None:
            if refused is not None:
                _budget_exhausted(breaker, call)
            return _last_failure(call, adapter, last, retries)
        yield (SLEEP, delay)
        fresh = getattr(adapter, "new_attempt", None) if adapter is not None else None
        if fresh is not None:
            fresh()  # what the framework showed of the last attempt (its error text) is no longer news
        if _stopped_by_breakers(breaker, upstream):
            _count_retry(breaker, "rejected")
            return _last_failure(call, adapter, last, retries)
        attempt = yield from _attempt(breaker, call, adapter, upstream, observed, first, retries + 2)
        if attempt.verdict is None:
            _count_retry(breaker, "rejected")
            return _last_failure(call, adapter, last, retries)
        retries += 1
        _count_retry(breaker, OUTCOME_NAMES[attempt.verdict.outcome])
        last = attempt


def _stopped_by_breakers(breaker: CircuitBreaker, upstream: CircuitBreaker | None) -> bool:
    """Whether the tool's or its upstream's breaker is open now: a retry never goes through."""
    try:
        if upstream is not None and upstream.state is State.OPEN:
            return True
        return breaker.state is State.OPEN
    except Exception:
        bookkeeping_failed("reading a breaker's state")
        return True


def attempts_note(attempts: int) -> str:
    """What the model reads after the last failure of a call retried below it."""
    return f"(otel-breaker: the call failed {attempts} times; retried {attempts - 1} times below the model)"


def _last_failure(call: ToolCall | None, adapter: Adapter | None, last: Attempt, retries: int) -> Attempt:
    """The last failed attempt. After retries its value carries the number of attempts
    where the model reads it (:func:`with_attempts`): the model sees one result."""
    if not retries:
        return last
    note = attempts_note(retries + 1)
    if last.value.__class__ is Raised:
        return last._replace(value=Raised(with_attempts(call, adapter, last.value.exc, note)))
    return last._replace(value=with_attempts(call, adapter, last.value, note))


def with_attempts(call: ToolCall | None, adapter: Adapter | None, failure: Any, note: str) -> Any:
    """``failure`` (an exception raised, or a failed value returned) carrying ``note``.

    The adapter's ``retried`` answers first, for a framework that shows the model a form
    of its own (a PydanticAI "tool failed" part, an MCP ``isError`` result, the OpenAI
    Agents SDK's error text). Otherwise: an exception whose message is its first argument
    gets the note at the end of that message (what ``str()`` and ``repr()`` show, so what
    a framework formatting it shows the model), and a note (``add_note``) for tracebacks;
    a failed value that is text gets the note appended; anything else is left as it is.
    Never raises: a failure of ours leaves ``failure`` as it was."""
    try:
        native = getattr(adapter, "retried", None) if adapter is not None else None
        if native is not None:
            noted = native(call, failure, note)
            if noted is not None:
                return noted
        if isinstance(failure, BaseException):
            _note_on_exception(failure, note)
        elif isinstance(failure, str):
            return f"{failure} {note}"
    except Exception:
        bookkeeping_failed("noting the attempts of a retried call")
    return failure


def _note_on_exception(exc: BaseException, note: str) -> None:
    """``note`` at the end of ``exc``'s message when its message is its first argument (kept
    only when ``str(exc)`` then shows it: an ``OSError`` formats its own; a ``message``
    attribute holding the same text follows), and as a note."""
    args = exc.args
    if args and isinstance(args[0], str) and note not in args[0]:
        noted = f"{args[0]} {note}"
        exc.args = (noted, *args[1:])
        try:
            shown = note in str(exc)
        except Exception:
            shown = False
        if not shown:
            exc.args = args
        elif getattr(exc, "message", None) == args[0]:
            try:  # frameworks that read ``.message`` (PydanticAI's ``ToolFailed``, Haystack's errors)
                exc.message = noted  # type: ignore[attr-defined]
            except Exception:
                pass
    add_note = getattr(exc, "add_note", None)  # Python 3.11 and later
    if add_note is not None:
        add_note(note)


def failed_value(
    breaker: CircuitBreaker,
    call: ToolCall | None,
    adapter: Adapter | None,
    verdict: Verdict,
    exc: BaseException,
    span: Any,
) -> Raised | InDoubt:
    """What the caller gets of an attempt that raised ``exc``: the exception itself, or,
    for a destructive tool whose call may have taken effect (a timeout, a dropped
    connection), :class:`OutcomeUnknownError` with ``exc`` as its cause: we never run it
    again, and the model is told to check before calling again. (A transport failure its
    upstream's breaker counted is neutral for the tool's, and as much in doubt.)"""
    if verdict.outcome != FAILURE and verdict.reason != UPSTREAM:
        return Raised(exc)
    try:
        if not _retry_policy.outcome_unknown(verdict, exc, _retry_policy.tool_effects(breaker, call)):
            return Raised(exc)
        if span is not None:
            TELEMETRY.annotate(span, {ATTR_OUTCOME_UNKNOWN: True})
    except Exception:
        bookkeeping_failed("judging whether an outcome is known")
        return Raised(exc)
    error: BaseException = OutcomeUnknownError(call.tool if call is not None else breaker.name, exc)
    native = getattr(adapter, "unknown_outcome", None) if adapter is not None else None
    if native is not None:
        try:  # the framework's own error form, where the adapter knows one (PydanticAI's "tool failed")
            answer = native(call, exc, str(error))
        except Exception:
            bookkeeping_failed("wording an unknown outcome")
            answer = None
        if answer is not None and not isinstance(answer, BaseException):
            return InDoubt(answer)  # a framework that answers failures with a value (an MCP result)
        error = answer or error
    error.__cause__ = exc
    return Raised(error)


class InDoubt:
    """What :func:`failed_value` returns when the adapter answers a call in doubt with a
    value (an MCP ``isError`` result) instead of an exception: the driver returns ``value``."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _failed_attempt(value: Any, verdict: Verdict, exc: BaseException, span: Any, start: float) -> Attempt:
    """The attempt that raised ``exc``, from what :func:`failed_value` made of it."""
    if value.__class__ is InDoubt:
        return Attempt(value.value, verdict, exc, span, start, True)
    return Attempt(value, verdict, exc, span, start, value.__class__ is Raised and value.exc is not exc)


def failed_result(
    breaker: CircuitBreaker, call: ToolCall | None, adapter: Adapter, verdict: Verdict, result: Any, span: Any
) -> Any:
    """What the caller gets of an attempt that returned a failed value: ``result``, or, for
    a destructive tool whose call may have taken effect (its server answered a gateway
    timeout, a dropped connection), the adapter's own failed value saying "outcome
    unknown" (``unknown_outcome_result``). Never raises."""
    native = getattr(adapter, "unknown_outcome_result", None)
    if native is None:
        return result
    try:
        if not _retry_policy.outcome_unknown(verdict, None, _retry_policy.tool_effects(breaker, call)):
            return result
        tool = call.tool if call is not None else breaker.name
        answer = native(call, result, outcome_unknown_text(tool, result_text(result) or "no text"))
        if answer is None:
            return result
        if span is not None:
            TELEMETRY.annotate(span, {ATTR_OUTCOME_UNKNOWN: True})
        return answer
    except Exception:
        bookkeeping_failed("judging whether an outcome is known")
        return result


def unknown_outcome_text(breaker: CircuitBreaker, call: ToolCall, exc: BaseException) -> str | None:
    """What the model reads of ``exc``, raised by a destructive tool's call whose outcome
    is unknown, for a framework that turns a tool's exception into text before the call
    path sees it (the adapter answers with this text instead); None for any other error."""
    try:
        verdict = judge_raised(breaker, call, None, exc)[0]
        if verdict.outcome != FAILURE and verdict.reason != UPSTREAM:
            return None
        if not _retry_policy.outcome_unknown(verdict, exc, _retry_policy.tool_effects(breaker, call)):
            return None
        return str(OutcomeUnknownError(call.tool, exc))
    except Exception:
        bookkeeping_failed("judging whether an outcome is known")
        return None


def _count_retry(breaker: CircuitBreaker, outcome: str) -> None:
    try:
        TELEMETRY.count_retry(breaker, outcome)
    except Exception:
        bookkeeping_failed("counting a retry")


def _budget_exhausted(breaker: CircuitBreaker, call: ToolCall | None) -> None:
    try:
        TELEMETRY.retry_budget_exhausted(call if call is not None else default_call(breaker), breaker)
    except Exception:
        bookkeeping_failed("reporting a spent retry budget")
