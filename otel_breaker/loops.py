"""The loop guard: an identical call that already ended badly N times is not run again.

The health breaker deliberately ignores the model's mistakes (bad arguments, an
unknown tool): they say nothing about the tool. But a model that repeats the
same invalid call burns a turn, and the whole transcript, each time, and an
identical repeat of a deterministic mistake can never succeed. So the call path
asks this module first:

* a call's **signature** is its tool name plus its canonical arguments (key order
  does not matter; bounded in size and depth; hashed). Arguments that cannot be
  read give a signature too, never an error (:mod:`otel_breaker.loop_signature`);
* signatures are kept **per run**: the session scope (``breaker_scope``) or the
  call's session when there is one, else the agent's name; an entry is forgotten
  after an hour without a repeat, and the table is bounded
  (:mod:`otel_breaker.loop_ledger`);
* by default only **mistakes** count (``loop_count``): arguments the tool's
  schema rejects and unknown tool names, as the adapters report them
  (``classify.MISTAKE``). ``failures`` and ``retries`` (``ModelRetry``) are
  opt-in: a transient failure may recover on an identical retry, and a tool may
  ask to be polled; the health breaker owns those;
* once a signature has ended that way ``loop_limit`` times, the next identical
  call is not run: ``reject`` answers in the framework's rejection form (the
  text names the tool and the count and tells the model to change the arguments
  or stop), ``stop`` raises :class:`ToolLoopError` to the caller of the run,
  ``warn`` runs it and counts it. A success of the signature forgets it;
* a loop detection never counts toward the tool's health breaker.

Every detection emits the log-based event ``otel_breaker.loop`` and counts in
``otel_breaker.calls.rejected`` with ``otel_breaker.reason="loop"`` (``warn``: in
``otel_breaker.loops``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from otel_breaker import rejection
from otel_breaker.breaker import CircuitOpenError, State
from otel_breaker.classify import FAILURE, MISTAKE, RETRY_REQUEST, SUCCESS, Verdict, error_type, result_text
from otel_breaker.config import get_settings
from otel_breaker.loglines import logger
from otel_breaker.loop_ledger import LOOPS, reset  # noqa: F401 - importable from here
from otel_breaker.loop_signature import MAX_ERROR_CHARS, arguments_of, signature
from otel_breaker.retry_policy import outcome_unknown, tool_effects
from otel_breaker.sanitize import bounded, safe_name, sanitize
from otel_breaker.streaks import STREAK_RULE
from otel_breaker.toolcall import ToolCall
from otel_breaker.verdicts import judge_raised, judge_returned

if TYPE_CHECKING:
    from otel_breaker.breaker import CircuitBreaker, CircuitBreakerConfig


# The outcome kinds of ``loop_count``.
MISTAKES = "mistakes"
FAILURES = "failures"
RETRIES = "retries"
#: The kind of a call that succeeded: it forgets its signature.
SUCCEEDED_KIND = "success"


class ToolLoopError(BaseException):
    """The agent repeated an identical call that already failed ``count`` times
    (``loop_action=stop``): the run ends here.

    It derives from ``BaseException`` like ``KeyboardInterrupt``, so the handlers
    with which frameworks turn a tool's ``Exception`` into a message for the model
    (and retry it) let it through to the caller of the run.
    """

    def __init__(self, tool: str, count: int, last_error: str | None) -> None:
        self.tool = tool
        self.count = count
        self.last_error = last_error
        super().__init__(
            f"Tool '{safe_name(tool)}' was called {count + 1} times with identical arguments; "
            f"the previous {count} ended with: {last_error or 'an error'}. The run was stopped."
        )

    def for_model(self) -> str:
        """What the model reads for this stop where it cannot reach the caller of the run
        (the framework's loop goes on)."""
        return _identical_call_message(self)


def loop_message(error: ToolLoopError) -> str:
    """The ``reject`` text for a stop that cannot reach the caller of the run."""
    return error.for_model()


def _identical_call_message(error: ToolLoopError) -> str:
    tool = safe_name(error.tool)
    why = f" The last error was: {sanitize(error.last_error)}." if error.last_error else ""
    return sanitize(
        f"Tool '{tool}' was not called: this exact call, with the same arguments, has already failed "
        f"{error.count} times.{why} Do not repeat it: change the arguments, use another tool, or stop "
        "and tell the user what went wrong."
    )


class RepeatedCallError(Exception):
    """The loop guard's answer where the identical call's failure was an exception (a direct
    ``tool.invoke`` without error handling, a tool whose framework re-raises): it is raised
    as that failure was, so the framework's own error policy (a handler, a failure
    function, the caller's ``except``) meets it. Its message is what the model would read."""

    def __init__(self, tool: str, count: int, last_error: str | None, message: str) -> None:
        super().__init__(message)
        self.tool = tool
        self.count = count
        self.last_error = last_error


class LoopRejection(rejection.Rejection):
    """What the model reads when the loop guard does not run an identical call.

    ``raised``: the identical call's last failure was an exception through the call path;
    an adapter whose framework has an error policy for exceptions raises
    :meth:`repeated_error` then, so that policy decides."""

    __slots__ = ("count", "last_error", "raised")

    def __init__(
        self,
        breaker: CircuitBreaker | None,
        call: ToolCall,
        count: int,
        last_error: str | None,
        raised: bool = False,
    ) -> None:
        # No breaker for a name no tool has: the rejection needs none of its state.
        self.breaker = breaker  # type: ignore[assignment]
        self.call = call
        self.state = State.CLOSED
        self._retry_after = None
        self._alternatives = ()
        self.count = count
        self.last_error = last_error
        self.raised = raised

    def repeated_error(self) -> RepeatedCallError:
        """The answer as an exception, carrying the text the model would read."""
        return RepeatedCallError(self.call.tool, self.count, self.last_error, self.message)

    @property
    def retry_after(self) -> float | None:
        return None

    @property
    def summary(self) -> str:
        return f"Tool '{safe_name(self.call.tool)}' call not run: the identical call already failed {self.count} times"

    @property
    def remediation(self) -> str:
        return (
            "Do not repeat it: change the arguments (check the tool's parameters and types), "
            "use another tool, or stop and tell the user what went wrong."
        )

    @property
    def message(self) -> str:
        tool = safe_name(self.call.tool)
        if self.breaker is None:
            return sanitize(
                f"Tool '{tool}' was not called: no tool of that name exists, and calling it has already "
                f"failed {self.count} times. Use only the tools you were given, or stop and tell the user."
            )
        why = f" The last error was: {sanitize(self.last_error)}." if self.last_error else ""
        return sanitize(
            f"Tool '{tool}' was not called: this exact call, with the same arguments, has already failed "
            f"{self.count} times.{why} {self.remediation}"
        )

    @property
    def error(self) -> Callable[[], CircuitOpenError]:
        return lambda: CircuitOpenError(self.call.tool, State.CLOSED, None, self.message)

    def as_dict(self) -> dict[str, Any]:
        result = super().as_dict()
        result.update(
            {"circuit_open": False, "loop": True, "count": self.count, "retry_after_s": None, "alternatives": []}
        )
        return result


# -- the call path's questions ---------------------------------------------------------------


def kind_of(verdict: Verdict, in_doubt: bool) -> str | None:
    """The loop kind of a call's verdict (``SUCCEEDED_KIND`` for a success): only what an
    identical retry cannot heal is a counted mistake. A "not found (yet)" (a 404,
    ``ENOENT``, a -32602 saying not found) may change while the model polls, control
    flow never counts, and neither does a destructive tool's call in doubt (``in_doubt``:
    the model that calls it again after checking makes no mistake). A run of distinct
    unrecognised errors the health breaker treats as the model's mistakes is, for an
    identical repeat, what it was judged before that rule: a failure."""
    if verdict.outcome == SUCCESS:
        return SUCCEEDED_KIND
    if in_doubt:
        return None
    if verdict.rule == STREAK_RULE:
        return FAILURES
    if verdict.reason == MISTAKE:
        return None if verdict.may_change else MISTAKES
    if verdict.reason == RETRY_REQUEST:
        return RETRIES
    if verdict.outcome == FAILURE:
        return FAILURES
    return None


def _error_text(exc: BaseException | None, value: Any) -> str | None:
    """What the loop guard remembers of a call that ended badly, bounded: the exception it
    raised, else the failed value's text."""
    if exc is not None:
        return f"{error_type(exc)}: {exc}"[:MAX_ERROR_CHARS]
    text = result_text(value)
    return None if text is None else text[:MAX_ERROR_CHARS]


class Entry:
    """One admitted call as the loop guard knows it: :meth:`record` takes how it ended."""

    __slots__ = ("arguments", "call", "kinds", "scope", "sig")

    def __init__(self, call: ToolCall, kinds: tuple[str, ...], scope: str, sig: str | None, arguments: Any) -> None:
        self.call = call
        self.kinds = kinds
        self.scope = scope
        self.sig = sig
        self.arguments = arguments

    def signature(self) -> str:
        if self.sig is None:
            self.sig = signature(self.call.tool, self.arguments)
        return self.sig

    def ended(self, kind: str | None, error: str | None, raised: bool = False) -> None:
        """Count an ending of kind ``kind`` (forget the signature after a success)."""
        try:
            if kind == SUCCEEDED_KIND:
                if LOOPS.might_repeat(self.scope, self.call.tool):
                    LOOPS.succeeded(self.scope, self.signature())
            elif kind is not None and kind in self.kinds:
                LOOPS.counted(self.scope, self.call.tool, self.signature(), error, raised)
        except Exception:
            logger.debug("otel-breaker: loop bookkeeping failed", exc_info=True)

    def record(self, verdict: Verdict, in_doubt: bool, exc: BaseException | None, value: Any) -> None:
        """The call ended with ``verdict`` (the call path's, judged once), having raised
        ``exc`` or returned ``value``."""
        kind = kind_of(verdict, in_doubt)
        if kind is None:
            return
        if kind == SUCCEEDED_KIND:
            self.ended(kind, None)
        elif kind in self.kinds:
            self.ended(kind, _error_text(exc, value), raised=exc is not None)


#: What :func:`check` returns for a call that runs.
RUN = object()


def check(call: ToolCall, breaker: CircuitBreaker, adapter: Any, args: tuple, kwargs: dict) -> tuple[Any, Entry | None]:
    """Before a call: (RUN, entry) to run it (``entry``: None when nothing of it is to be
    remembered), or (value, None): the loop guard's answer. Raises :class:`ToolLoopError`
    under ``stop``. Never raises anything else."""
    stop: tuple[str, int, str | None] | None = None
    raised = False
    try:
        config: CircuitBreakerConfig = breaker.config
        ledger = LOOPS
        scope = ledger.scope(call)
        if scope is None:
            return RUN, None  # a call outside any run is a run of its own: nothing to remember
        sig = None
        if ledger.might_repeat(scope, call.tool):
            arguments = arguments_of(call, args, kwargs)
            sig = signature(call.tool, arguments)
            count, last_error = ledger.count(scope, sig)
            if count >= config.loop_limit:
                action = config.loop_action
                ledger.detected(call, action, count)
                if action != "warn":
                    stop = (action, count, last_error)
                    raised = ledger.last_raised(scope, sig)
        else:
            arguments = None
        if stop is None:
            kinds = config.loop_count
            if not kinds or (adapter is None and kinds == (MISTAKES,)):
                return RUN, None  # nothing to count: without an adapter no call is a known mistake
            if arguments is None:
                arguments = arguments_of(call, args, kwargs)
            return RUN, Entry(call, kinds, scope, sig, arguments)
    except Exception:
        logger.debug("otel-breaker: the loop guard failed; the call runs", exc_info=True)
        return RUN, None
    action, count, last_error = stop
    if action == "stop":
        raise ToolLoopError(call.tool, count, last_error)
    # The framework's rejection form; an adapter whose form is an exception raises it here.
    return _reject(breaker, call, adapter, count, last_error, raised), None


def _judged_raise(breaker: CircuitBreaker, call: ToolCall, adapter: Any, entry: Entry, exc: BaseException) -> None:
    """A call run through the loop guard only raised ``exc``: judged by the same rules as a
    guarded call (``verdicts.py``), then recorded."""
    verdict = judge_raised(breaker, call, adapter, exc)[0]
    in_doubt = verdict.outcome == FAILURE and _in_doubt(breaker, call, verdict, exc)
    entry.record(verdict, in_doubt, exc, None)


def _judged_return(breaker: CircuitBreaker, call: ToolCall, adapter: Any, entry: Entry, result: Any) -> None:
    verdict = judge_returned(breaker, call, adapter, result, 0.0, False)[0]
    in_doubt = verdict.outcome == FAILURE and _in_doubt(breaker, call, verdict, None)
    entry.record(verdict, in_doubt, None, result)


def _in_doubt(breaker: CircuitBreaker, call: ToolCall, verdict: Verdict, exc: BaseException | None) -> bool:
    try:
        return outcome_unknown(verdict, exc, tool_effects(breaker, call))
    except Exception:
        return True  # not knowing is not a mistake to count


def run_judged(
    breaker: CircuitBreaker, call: ToolCall, adapter: Any, fn: Callable[..., Any], args: tuple, kwargs: dict
) -> Any:
    """``fn(*args, **kwargs)``, a call the framework may refuse before its tool path, through
    the loop guard only (the breaker counts nothing for it): ``adapter`` says which of its
    endings are the model's mistakes."""
    answer, entry = check(call, breaker, adapter, args, kwargs)
    if answer is not RUN:
        return answer
    if entry is None:
        return fn(*args, **kwargs)
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:
        _judged_raise(breaker, call, adapter, entry, exc)
        raise
    _judged_return(breaker, call, adapter, entry, result)
    return result


async def arun_judged(
    breaker: CircuitBreaker, call: ToolCall, adapter: Any, fn: Callable[..., Any], args: tuple, kwargs: dict
) -> Any:
    """The awaited :func:`run_judged` (``fn`` a coroutine function or a plain one)."""
    answer, entry = check(call, breaker, adapter, args, kwargs)
    if answer is not RUN:
        return answer
    try:
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
    except BaseException as exc:
        if entry is not None:
            _judged_raise(breaker, call, adapter, entry, exc)
        raise
    if entry is not None:
        _judged_return(breaker, call, adapter, entry, result)
    return result


class Mistakes:
    """An adapter as the loop guard sees a call its framework refuses before the tool
    path (the model's arguments failed validation): what the call raises is the mistake."""

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        return MISTAKE if isinstance(exc, Exception) else None

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        return None

    def rejection(self, call: ToolCall, info: rejection.Rejection) -> Any:
        return self.adapter.rejection(call, info)


async def arun_mistake(
    breaker: CircuitBreaker, call: ToolCall, adapter: Any, fn: Any, args: tuple, kwargs: dict
) -> Any:
    """Run a call whose arguments the framework refuses before its tool path, through the
    loop guard only (the breaker counts nothing for it): ``adapter`` is a :class:`Mistakes`."""
    return await arun_judged(breaker, call, adapter, fn, args, kwargs)


def _reject(
    breaker: CircuitBreaker, call: ToolCall, adapter: Any, count: int, last_error: str | None, raised: bool = False
) -> Any:
    info = LoopRejection(breaker, call, count, last_error, raised)
    if adapter is not None:
        return adapter.rejection(call, info)
    if breaker.config.graceful_degradation:
        return info.as_dict()
    raise info.error()


# -- a tool name no tool has ------------------------------------------------------------------
#
# No breaker and no per-name metric series exist for such a name (a model can invent
# any number of them): the loop guard keys it by the bounded name within the run, with
# the process defaults, and reports it under the fixed ``UNKNOWN_TOOL`` marker.

_UNKNOWN_PREFIX = "\0unknown:"


def _unknown_key(call: ToolCall) -> tuple[str | None, str]:
    return LOOPS.scope(call), _UNKNOWN_PREFIX + bounded(call.tool)


def check_unknown(call: ToolCall, adapter: Any) -> Any:
    """Before a call to a name no tool may have: RUN, or the loop guard's answer
    (``adapter.rejection``); raises :class:`ToolLoopError` under ``stop``."""
    stop = None
    try:
        config = get_settings().defaults
        scope, name = _unknown_key(call)
        if not LOOPS.might_repeat(scope, name):
            return RUN
        count, last_error = LOOPS.count(scope, signature(name, None))
        if count >= config.loop_limit:
            LOOPS.detected(call, config.loop_action, count, unknown=True)
            if config.loop_action != "warn":
                stop = (config.loop_action, count, last_error)
    except Exception:
        logger.debug("otel-breaker: the loop guard failed; the call runs", exc_info=True)
        return RUN
    if stop is None:
        return RUN
    action, count, last_error = stop
    if action == "stop":
        raise ToolLoopError(call.tool, count, last_error)
    return adapter.rejection(call, LoopRejection(None, call, count, last_error))


def unknown_tool_called(call: ToolCall, error: str | None) -> None:
    """A call to a name no tool has was answered as such: a mistake of the model."""
    try:
        if MISTAKES not in get_settings().defaults.loop_count:
            return
        scope, name = _unknown_key(call)
        LOOPS.counted(scope, name, signature(name, None), error)
    except Exception:
        logger.debug("otel-breaker: loop bookkeeping failed", exc_info=True)


__all__ = [
    "FAILURES",
    "MISTAKES",
    "RETRIES",
    "RUN",
    "Entry",
    "LoopRejection",
    "Mistakes",
    "RepeatedCallError",
    "ToolLoopError",
    "arguments_of",
    "arun_judged",
    "arun_mistake",
    "check",
    "check_unknown",
    "kind_of",
    "loop_message",
    "run_judged",
    "signature",
    "unknown_tool_called",
]
