"""The loop guard's ledger: per run scope, the identical calls that ended badly, and the detections.

Signatures are kept **per run**: the session scope (``breaker_scope``) or the
call's session when there is one, else the agent's name. An entry is forgotten
after :data:`IDLE_SECONDS` without a repeat, and at most :data:`MAX_ENTRIES` are
kept (the oldest go first); a success of the signature forgets it. Detections
are counted here and read by telemetry when metrics are collected (the
``otel_breaker.calls.rejected`` and ``otel_breaker.loops`` counters, the saved
turns the token estimator prices), one count per (tool, agent, action), at most
:data:`MAX_DETECTION_SERIES` of them: past that the one detected longest ago is
folded into its action's count under the tool name ``_other`` and no agent, so
memory and every metric collection stay bounded and no exported total goes down. :mod:`otel_breaker.loops` decides; this
module only remembers.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from otel_breaker.loglines import logger
from otel_breaker.loop_signature import MAX_ERROR_CHARS
from otel_breaker.registry import session_of_context
from otel_breaker.registry_bounds import OTHER_TOOLS
from otel_breaker.runs import CLOSE_LISTENERS, Run, current_run
from otel_breaker.sanitize import bounded
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

#: Signatures kept at most (oldest forgotten first).
MAX_ENTRIES = 4096
#: An entry without a repeat for this long is forgotten.
IDLE_SECONDS = 3600.0
#: Detection counts kept per (tool, agent, action) at most (the least recently detected folded first).
MAX_DETECTION_SERIES = 1024

DetectionKey = tuple[str, str | None, str]
"""(tool label, agent name, action) of a detection count."""


class _Entry:
    __slots__ = ("count", "last_error", "raised", "seen", "tool")

    def __init__(self, tool: str, now: float) -> None:
        self.tool = tool
        self.count = 0
        self.last_error: str | None = None
        #: Whether the last identical call raised through the call path (the framework's
        #: policy for it was an exception, not a value): the loop guard's answer raises too.
        self.raised = False
        self.seen = now


class LoopGuard:
    """Counts identical calls that ended in a counted way, per run scope."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        # How many entries each (scope, tool) has: a call of a tool with none is not hashed.
        self._tools: dict[tuple[str, str], int] = {}
        # Detections, least recently detected first; past the cap folded into ``_folded``.
        self._detections: OrderedDict[DetectionKey, int] = OrderedDict()
        # (OTHER_TOOLS, None, action) -> the counts of detections folded away.
        self._folded: dict[DetectionKey, int] = {}

    # -- what the call path asks ------------------------------------------------------------

    def scope(self, call: ToolCall) -> str | None:
        """The run ``call`` belongs to, as the ledger keys it: the run open in this
        context (``runs.py``: a framework's top-level invocation, or ``otel_breaker.run``),
        else the session scope or the call's session, else the agent's name (a framework
        whose run cannot be seen). None for a call outside all of them (a directly invoked
        tool, ``@guard``): it is a run of its own, and nothing of it is remembered."""
        opened = current_run()
        if opened is not None:
            return f"r:{opened.id}"
        session = session_of_context()
        if session is not None:
            return f"s:{session}"
        if call.session_id is not None:
            return f"s:{call.session_id}"
        if call.agent_name:
            return f"a:{call.agent_name}"
        return None

    def might_repeat(self, scope: str | None, tool: str) -> bool:
        """Cheap: whether any counted call of ``tool`` is remembered in ``scope`` (never
        for a call that is a run of its own)."""
        return (scope, tool) in self._tools

    def count(self, scope: str, sig: str) -> tuple[int, str | None]:
        """How many times the identical call ended in a counted way, and its last error.
        Asking is a repeat: it keeps the entry from going idle, so a block lasts as long as
        the repeats do, and ends :data:`IDLE_SECONDS` after the last one."""
        now = self.clock()
        with self._lock:
            entry = self._entries.get((scope, sig))
            if entry is None:
                return 0, None
            if now - entry.seen > IDLE_SECONDS:
                self._forget((scope, sig), entry)
                return 0, None
            entry.seen = now
            return entry.count, entry.last_error

    def counted(self, scope: str | None, tool: str, sig: str, error: str | None, raised: bool = False) -> int:
        """An identical call ended in a counted way (``raised``: by raising): its count now.
        A call that is a run of its own (``scope`` None) is not remembered: 0."""
        if scope is None:
            return 0
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
            entry.raised = raised
            return entry.count

    def last_raised(self, scope: str, sig: str) -> bool:
        """Whether the last counted identical call raised (read when the guard answers)."""
        with self._lock:
            entry = self._entries.get((scope, sig))
            return entry is not None and entry.raised

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

    def forget_scope(self, scope: str) -> None:
        """Forget every entry of ``scope`` (a run that ended: a new run starts clean)."""
        with self._lock:
            if not any(key[0] == scope for key in self._tools):
                return
            for key in [key for key in self._entries if key[0] == scope]:
                self._forget(key, self._entries[key])

    def run_closed(self, closed: Run) -> None:
        self.forget_scope(f"r:{closed.id}")

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._tools.clear()
            self._detections.clear()
            self._folded.clear()

    # -- detections ---------------------------------------------------------------------------

    def detected(self, call: ToolCall, action: str, count: int, unknown: bool = False) -> None:
        tool = UNKNOWN_TOOL if unknown else bounded(call.tool)
        key = (tool, call.agent_name, action)
        with self._lock:
            self._count_detection(key)
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

    def _count_detection(self, key: DetectionKey) -> None:
        """One more detection of ``key`` (lock held); past the cap the oldest count is folded."""
        detections = self._detections
        detections[key] = detections.get(key, 0) + 1
        detections.move_to_end(key)
        while len(detections) > MAX_DETECTION_SERIES:
            (_, _, action), count = detections.popitem(last=False)
            folded_key = (OTHER_TOOLS, None, action)
            self._folded[folded_key] = self._folded.get(folded_key, 0) + count

    def _detection_counts(self) -> list[tuple[DetectionKey, int]]:
        """Every detection count, the folded ones last (one per action)."""
        with self._lock:
            return [*self._detections.items(), *self._folded.items()]

    def detections(self, rejected: bool) -> Iterable[tuple[int, dict[str, Any]]]:
        """(count, attributes) of detections the call path did not run (``rejected``)
        or let run (``warn``)."""
        for (tool, agent, action), value in self._detection_counts():
            if (action != "warn") is not rejected:
                continue
            attributes: dict[str, Any] = {ATTR_TOOL: tool, ATTR_LOOP_ACTION: action}
            if rejected:
                attributes[ATTR_REASON] = REASON_LOOP
            if agent:
                attributes[ATTR_AGENT] = bounded(agent)
            yield value, attributes

    def saved_turns(self) -> Iterable[tuple[object, str, str | None, int]]:
        """(key, tool, agent, count) of the calls the guard did not run (``reject``, ``stop``):
        each saved a model turn, priced by the token estimator at the prompt size it last
        saw for the tool (``tokens.py``)."""
        for (tool, agent, action), value in self._detection_counts():
            if action != "warn":
                yield ("loop", tool, agent, action), tool, agent, value


LOOPS = LoopGuard()
CLOSE_LISTENERS.append(LOOPS.run_closed)
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
