"""The loop guard: an identical call that already ended badly N times is not run again.

The health breaker deliberately ignores the model's mistakes (bad arguments, an
unknown tool): they say nothing about the tool. But a model that repeats the
same invalid call burns a turn, and the whole transcript, each time, and an
identical repeat of a deterministic mistake can never succeed. So the call path
asks this module first:

* a call's **signature** is its tool name plus its canonical arguments (key order
  does not matter; bounded in size and depth; hashed). Arguments that cannot be
  read give a signature too, never an error;
* signatures are kept **per run**: the session scope (``breaker_scope``) or the
  call's session when there is one, else the agent's name; an entry is forgotten
  after :data:`IDLE_SECONDS` without a repeat, and at most :data:`MAX_ENTRIES`
  are kept (the oldest go first);
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

import hashlib
import inspect
import json
import logging
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from otel_breaker import rejection
from otel_breaker.breaker import CircuitBreaker, CircuitBreakerConfig, CircuitOpenError, State
from otel_breaker.classify import FAILURE, MISTAKE, RETRY_REQUEST, classify_exception, error_type
from otel_breaker.registry import session_of_context
from otel_breaker.sanitize import bounded, safe_name, sanitize
from otel_breaker.semconv import (
    ATTR_AGENT,
    ATTR_LOOP_ACTION,
    ATTR_LOOP_COUNT,
    ATTR_REASON,
    ATTR_TOOL,
    EVENT_LOOP,
    REASON_LOOP,
    UNKNOWN_TOOL,
)
from otel_breaker.telemetry import TELEMETRY
from otel_breaker.telemetry.metrics import LOOP_SOURCES, SAVINGS_SOURCES
from otel_breaker.toolcall import ToolCall

logger = logging.getLogger("otel_breaker")

#: Signatures kept at most (oldest forgotten first).
MAX_ENTRIES = 4096
#: An entry without a repeat for this long is forgotten.
IDLE_SECONDS = 3600.0
#: Characters of canonical arguments hashed at most; nesting followed at most this deep.
MAX_SIGNATURE_CHARS = 16_384
MAX_DEPTH = 8
MAX_ITEMS = 256
#: Characters of the last error kept for :class:`ToolLoopError`.
MAX_ERROR_CHARS = 500

# Keyword arguments that are a framework's plumbing, not the model's arguments: they
# differ per call (ids, callbacks) and would hide a repeat.
_PLUMBING = frozenset(
    {"config", "callbacks", "run_manager", "tool_call_id", "run_id", "parent_run_id", "tags", "metadata", "context"}
)
# What an adapter's ``result_error`` returns for a neutral value (guard.IGNORED_RESULT:
# the guard sits above this module, so the value is repeated here).
_IGNORED_RESULT = "otel_breaker.ignored"

# The outcome kinds of ``loop_count``.
MISTAKES = "mistakes"
FAILURES = "failures"
RETRIES = "retries"


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


def loop_message(error: ToolLoopError) -> str:
    """The ``reject`` text for a stop that cannot reach the caller of the run."""
    tool = safe_name(error.tool)
    why = f" The last error was: {sanitize(error.last_error)}." if error.last_error else ""
    return sanitize(
        f"Tool '{tool}' was not called: this exact call, with the same arguments, has already failed "
        f"{error.count} times.{why} Do not repeat it: change the arguments, use another tool, or stop "
        "and tell the user what went wrong."
    )


class LoopRejection(rejection.Rejection):
    """What the model reads when the loop guard does not run an identical call."""

    __slots__ = ("count", "last_error")

    def __init__(self, breaker: CircuitBreaker | None, call: ToolCall, count: int, last_error: str | None) -> None:
        # No breaker for a name no tool has: the rejection needs none of its state.
        self.breaker = breaker  # type: ignore[assignment]
        self.call = call
        self.state = State.CLOSED
        self._retry_after = None
        self._alternatives = ()
        self.count = count
        self.last_error = last_error

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


# -- the signature ---------------------------------------------------------------------


def _plain(value: Any, depth: int, budget: list[int]) -> Any:
    """A JSON-ready, bounded copy of ``value``: mappings sorted by key, objects by type name."""
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        return "…"
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, str):
        return value[:MAX_SIGNATURE_CHARS]
    if isinstance(value, (bytes, bytearray)):
        return hashlib.blake2b(bytes(value[:MAX_SIGNATURE_CHARS]), digest_size=8).hexdigest()
    if isinstance(value, dict):
        items = []
        for count, (key, item) in enumerate(value.items()):
            if count >= MAX_ITEMS:
                break
            items.append((str(key)[:256], _plain(item, depth + 1, budget)))
        return {"{}": sorted(items, key=lambda pair: pair[0])}
    if isinstance(value, (list, tuple)):
        return [_plain(item, depth + 1, budget) for item in value[:MAX_ITEMS]]
    if isinstance(value, (set, frozenset)):
        return sorted(repr(_plain(item, depth + 1, budget)) for item in list(value)[:MAX_ITEMS])
    dump = getattr(value, "model_dump", None)  # a pydantic model: its fields
    if callable(dump) and not inspect.isclass(value):
        try:
            return _plain(dump(), depth + 1, budget)
        except Exception:
            pass
    return f"<{type(value).__qualname__}>"


def signature(tool: str, arguments: Any) -> str:
    """A short hash of the tool name and its canonical arguments (never raises)."""
    try:
        text = json.dumps(_plain(arguments, 0, [4 * MAX_ITEMS]), sort_keys=True, default=str, ensure_ascii=False)
    except Exception:
        text = f"<{type(arguments).__qualname__}>"
    digest = hashlib.blake2b(digest_size=12)
    digest.update(bounded(tool).encode("utf-8", "replace"))
    digest.update(b"\0")
    digest.update(text[:MAX_SIGNATURE_CHARS].encode("utf-8", "replace"))
    return digest.hexdigest()


def arguments_of(call: ToolCall, args: tuple, kwargs: dict) -> Any:
    """The model's arguments: what the adapter described, else the call's own
    arguments without a framework's plumbing (callbacks, ids, config)."""
    if call.arguments is not None:
        return call.arguments
    return (list(args), {k: v for k, v in kwargs.items() if k not in _PLUMBING})


# -- the table -----------------------------------------------------------------------------


class _Entry:
    __slots__ = ("count", "last_error", "seen", "tool")

    def __init__(self, tool: str, now: float) -> None:
        self.tool = tool
        self.count = 0
        self.last_error: str | None = None
        self.seen = now


class LoopGuard:
    """Counts identical calls that ended in a counted way, per run scope."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        # How many entries each (scope, tool) has: a call of a tool with none is not hashed.
        self._tools: dict[tuple[str, str], int] = {}
        # Detections: (tool label, agent, action) -> count.
        self._detections: dict[tuple[str, str | None, str], int] = {}

    # -- what the call path asks ------------------------------------------------------------

    def scope(self, call: ToolCall) -> str:
        session = session_of_context()
        if session is not None:
            return f"s:{session}"
        if call.session_id is not None:
            return f"s:{call.session_id}"
        return f"a:{call.agent_name or ''}"

    def might_repeat(self, scope: str, tool: str) -> bool:
        """Cheap: whether any counted call of ``tool`` is remembered in ``scope``."""
        return (scope, tool) in self._tools

    def count(self, scope: str, sig: str) -> tuple[int, str | None]:
        with self._lock:
            entry = self._entries.get((scope, sig))
            if entry is None:
                return 0, None
            if self.clock() - entry.seen > IDLE_SECONDS:
                self._forget((scope, sig), entry)
                return 0, None
            return entry.count, entry.last_error

    def counted(self, scope: str, tool: str, sig: str, error: str | None) -> int:
        """An identical call ended in a counted way: its count now."""
        now = self.clock()
        with self._lock:
            key = (scope, sig)
            entry = self._entries.get(key)
            if entry is None or now - entry.seen > IDLE_SECONDS:
                if entry is not None:
                    self._forget(key, entry)
                entry = _Entry(tool, now)
                self._entries[key] = entry
                self._tools[(scope, tool)] = self._tools.get((scope, tool), 0) + 1
                while len(self._entries) > MAX_ENTRIES:
                    old_key, old = self._entries.popitem(last=False)
                    self._release(old_key[0], old)
            else:
                self._entries.move_to_end(key)
            entry.count += 1
            entry.seen = now
            entry.last_error = None if error is None else error[:MAX_ERROR_CHARS]
            return entry.count

    def succeeded(self, scope: str, sig: str) -> None:
        with self._lock:
            entry = self._entries.get((scope, sig))
            if entry is not None:
                self._forget((scope, sig), entry)

    def _forget(self, key: tuple[str, str], entry: _Entry) -> None:
        self._entries.pop(key, None)
        self._release(key[0], entry)

    def _release(self, scope: str, entry: _Entry) -> None:
        tool = entry.tool
        left = self._tools.get((scope, tool), 0) - 1
        if left > 0:
            self._tools[(scope, tool)] = left
        else:
            self._tools.pop((scope, tool), None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._tools.clear()
            self._detections.clear()

    # -- detections ---------------------------------------------------------------------------

    def detected(self, call: ToolCall, action: str, count: int, unknown: bool = False) -> None:
        tool = UNKNOWN_TOOL if unknown else bounded(call.tool)
        key = (tool, call.agent_name, action)
        with self._lock:
            self._detections[key] = self._detections.get(key, 0) + 1
        try:
            attributes: dict[str, Any] = {
                ATTR_TOOL: tool,
                ATTR_LOOP_ACTION: action,
                ATTR_LOOP_COUNT: count,
                ATTR_REASON: REASON_LOOP,
            }
            if call.agent_name:
                attributes[ATTR_AGENT] = bounded(call.agent_name)
            TELEMETRY.event(EVENT_LOOP, attributes, warning=True)
        except Exception:
            logger.debug("otel-breaker: reporting a loop failed", exc_info=True)

    def detections(self, rejected: bool) -> Iterable[tuple[int, dict[str, Any]]]:
        """(count, attributes) of detections the call path did not run (``rejected``)
        or let run (``warn``)."""
        with self._lock:
            items = list(self._detections.items())
        for (tool, agent, action), value in items:
            if (action != "warn") is not rejected:
                continue
            attributes: dict[str, Any] = {ATTR_TOOL: tool, ATTR_LOOP_ACTION: action}
            if rejected:
                attributes[ATTR_REASON] = REASON_LOOP
            if agent:
                attributes[ATTR_AGENT] = bounded(agent)
            yield value, attributes

    def saved_turns(self) -> Iterable[tuple[object, str, int]]:
        """(key, tool, count) of the calls the guard did not run (``reject``, ``stop``):
        each saved a model turn, priced by the token estimator at the prompt size it last
        saw for the tool (``tokens.py``)."""
        with self._lock:
            items = list(self._detections.items())
        for (tool, agent, action), value in items:
            if action != "warn":
                yield ("loop", tool, agent, action), tool, value


LOOPS = LoopGuard()
LOOP_SOURCES.append(LOOPS.detections)
SAVINGS_SOURCES.append(LOOPS.saved_turns)


def _reinit_after_fork() -> None:
    """A lock another thread held at a fork stays held in the child: replace it."""
    LOOPS._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)


def reset() -> None:
    """Forget every remembered call and detection (tests, a new process)."""
    LOOPS.clear()


# -- the call path's questions ---------------------------------------------------------------


def _kind_of_exception(
    breaker: CircuitBreaker, call: ToolCall, adapter: Any, exc: BaseException
) -> tuple[str | None, str]:
    """(loop kind or None, error text) of a call that raised."""
    hint = None
    read = getattr(adapter, "exception_hint", None) if adapter is not None else None
    if read is not None:
        try:
            hint = read(call, exc)
        except Exception:
            hint = None
    text = f"{error_type(exc)}: {exc}"[:MAX_ERROR_CHARS]
    if hint == MISTAKE:
        return MISTAKES, text
    if hint == RETRY_REQUEST:
        return RETRIES, text
    if hint is not None:
        return None, text
    try:
        outcome = classify_exception(exc, breaker.config)
    except Exception:
        return None, text
    return (FAILURES if outcome == FAILURE else None), text


def _kind_of_result(call: ToolCall, adapter: Any, result: Any) -> tuple[str | None, str | None]:
    if adapter is None:
        return None, None
    try:
        read = getattr(adapter, "result_hint", None)
        hint = read(call, result) if read is not None else None
        if hint in (MISTAKE, RETRY_REQUEST):
            return (MISTAKES if hint == MISTAKE else RETRIES), _text(result)
        err = adapter.result_error(call, result)
    except Exception:
        return None, None
    if err is None:
        return "success", None
    if err == _IGNORED_RESULT or not isinstance(err, str):
        return None, None
    return FAILURES, _text(result) or err


def _text(result: Any) -> str | None:
    """A returned error's text, bounded, for :class:`ToolLoopError` and the loop message:
    the text content of a tool result (MCP's ``CallToolResult``, a Strands result event,
    a LangChain ``ToolMessage``) where there is one, else the value as a string."""
    try:
        holder = getattr(result, "tool_result", result)
        for name in ("error", "output"):  # Agno's execution result; an OpenAI Agents tool result
            text = getattr(holder, name, None)
            if isinstance(text, str) and text:
                return text[:MAX_ERROR_CHARS]
        content = holder.get("content") if isinstance(holder, dict) else getattr(holder, "content", None)
        if isinstance(content, str):
            return content[:MAX_ERROR_CHARS]
        if isinstance(content, list):
            texts = []
            for item in content[:8]:
                text = item.get("text") if isinstance(item, dict) else getattr(item, "text", None)
                if isinstance(text, str):
                    texts.append(text)
            if texts:
                return " ".join(texts)[:MAX_ERROR_CHARS]
        return str(result)[:MAX_ERROR_CHARS]
    except Exception:
        return None


class Watch:
    """One admitted call's loop bookkeeping: ``wrap(fn)`` judges how it ended."""

    __slots__ = ("adapter", "arguments", "breaker", "call", "kinds", "scope", "sig")

    def __init__(
        self, call: ToolCall, breaker: CircuitBreaker, adapter: Any, scope: str, sig: str | None, args: Any
    ) -> None:
        self.call = call
        self.breaker = breaker
        self.adapter = adapter
        self.kinds = breaker.config.loop_count
        self.scope = scope
        self.sig = sig
        self.arguments = args

    def signature(self) -> str:
        if self.sig is None:
            self.sig = signature(self.call.tool, self.arguments)
        return self.sig

    def ended(self, kind: str | None, error: str | None) -> None:
        try:
            if kind == "success":
                if LOOPS.might_repeat(self.scope, self.call.tool):
                    LOOPS.succeeded(self.scope, self.signature())
            elif kind is not None and kind in self.kinds:
                LOOPS.counted(self.scope, self.call.tool, self.signature(), error)
        except Exception:
            logger.debug("otel-breaker: loop bookkeeping failed", exc_info=True)

    def raised(self, exc: BaseException) -> None:
        self.ended(*_kind_of_exception(self.breaker, self.call, self.adapter, exc))

    def returned(self, result: Any) -> None:
        self.ended(*_kind_of_result(self.call, self.adapter, result))

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` judged as it ends (awaited results too); only calls that ran are judged."""
        watch = self

        def judged(*args: Any, **kwargs: Any) -> Any:
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                watch.raised(exc)
                raise
            if inspect.isawaitable(result):
                return _judged_await(watch, result)
            watch.returned(result)
            return result

        return judged


async def _judged_await(watch: Watch, awaitable: Any) -> Any:
    try:
        result = await awaitable
    except BaseException as exc:
        watch.raised(exc)
        raise
    watch.returned(result)
    return result


#: What :func:`enter` returns for a call that runs (with its watch).
RUN = object()


def enter(call: ToolCall, breaker: CircuitBreaker, adapter: Any, args: tuple, kwargs: dict) -> tuple[Any, Watch | None]:
    """Before a call: (RUN, watch) to run it, or (value, None): the loop guard's answer.
    Raises :class:`ToolLoopError` under ``stop``. Never raises anything else."""
    stop: tuple[str, int, str | None] | None = None
    try:
        config: CircuitBreakerConfig = breaker.config
        scope = LOOPS.scope(call)
        sig = None
        if LOOPS.might_repeat(scope, call.tool):
            arguments = arguments_of(call, args, kwargs)
            sig = signature(call.tool, arguments)
            count, last_error = LOOPS.count(scope, sig)
            if count >= config.loop_limit:
                action = config.loop_action
                LOOPS.detected(call, action, count)
                if action != "warn":
                    stop = (action, count, last_error)
        else:
            arguments = None
        if stop is None:
            kinds = config.loop_count
            if not kinds or (adapter is None and kinds == (MISTAKES,)):
                return RUN, None  # nothing to count: without an adapter no call is a known mistake
            if arguments is None:
                arguments = arguments_of(call, args, kwargs)
            return RUN, Watch(call, breaker, adapter, scope, sig, arguments)
    except Exception:
        logger.debug("otel-breaker: the loop guard failed; the call runs", exc_info=True)
        return RUN, None
    action, count, last_error = stop
    if action == "stop":
        raise ToolLoopError(call.tool, count, last_error)
    # The framework's rejection form; an adapter whose form is an exception raises it here.
    return _reject(breaker, call, adapter, count, last_error), None


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
    answer, watch = enter(call, breaker, adapter, args, kwargs)
    if answer is not RUN:
        return answer
    runner = fn if watch is None else watch.wrap(fn)
    result = runner(*args, **kwargs)
    return await result if inspect.isawaitable(result) else result


def _reject(breaker: CircuitBreaker, call: ToolCall, adapter: Any, count: int, last_error: str | None) -> Any:
    info = LoopRejection(breaker, call, count, last_error)
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


def _unknown_key(call: ToolCall) -> tuple[str, str]:
    return LOOPS.scope(call), _UNKNOWN_PREFIX + bounded(call.tool)


def check_unknown(call: ToolCall, adapter: Any) -> Any:
    """Before a call to a name no tool may have: RUN, or the loop guard's answer
    (``adapter.rejection``); raises :class:`ToolLoopError` under ``stop``."""
    stop = None
    try:
        from otel_breaker.config import get_settings

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
        from otel_breaker.config import get_settings

        if MISTAKES not in get_settings().defaults.loop_count:
            return
        scope, name = _unknown_key(call)
        LOOPS.counted(scope, name, signature(name, None), error)
    except Exception:
        logger.debug("otel-breaker: loop bookkeeping failed", exc_info=True)
