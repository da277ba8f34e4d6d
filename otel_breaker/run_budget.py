"""The waste budget: a run that keeps calling a tool its breaker rejects is cut.

A rejection is text for the model, and a model may read it and call the open tool
again, every turn, each turn re-sending the whole transcript. So each run counts
how often a breaker rejected each tool (``runs.Run.rejected``, noted where the call
path rejects). Once a tool was rejected ``run_rejections`` times in a run (default
3, ``OTEL_BREAKER_RUN_REJECTIONS``), the run's next call of it is answered by
``run_action`` (``OTEL_BREAKER_RUN_ACTION``):

* ``hide`` (default): the tool leaves this run's menu (adapters drop it from the
  tools the model is sent, see :mod:`otel_breaker.menu`), and a call the model
  makes anyway is rejected for the rest of the run without asking the breaker.
  Other runs keep the same breaker and their own menus.
* ``stop``: :class:`RunBudgetError` ends the run, raised to its caller the way
  :class:`~otel_breaker.loops.ToolLoopError` is.
* ``warn``: an event and a count, nothing else.

Breakers remember across runs; the budget does not: a new run starts with none
spent. Spending it is one log-based event (``otel_breaker.run_budget``), and each
call it answers counts in ``otel_breaker.calls.rejected{reason="run_budget"}``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from typing import Any

from otel_breaker import rejection
from otel_breaker.breaker import CircuitBreaker, CircuitOpenError, State
from otel_breaker.loops import ToolLoopError
from otel_breaker.runs import Run, current_run
from otel_breaker.sanitize import bounded, safe_name, sanitize
from otel_breaker.semconv import (
    ATTR_AGENT,
    ATTR_REASON,
    ATTR_RUN_ACTION,
    ATTR_RUN_ID,
    ATTR_RUN_REJECTIONS,
    ATTR_TOOL,
    EVENT_RUN_BUDGET,
    REASON_RUN_BUDGET,
)
from otel_breaker.telemetry import TELEMETRY
from otel_breaker.telemetry.metrics import LOOP_SOURCES
from otel_breaker.toolcall import ToolCall

logger = logging.getLogger("otel_breaker")

#: What :func:`check` returns for a call the budget lets through.
RUN = object()

#: Counted series at most, by (tool, agent, action); calls past it count under :data:`OTHER_TOOL`.
MAX_SERIES = 1024
OTHER_TOOL = "_other"


class RunBudgetError(ToolLoopError):
    """The run kept calling a tool its breaker had already rejected ``rejections`` times
    (``run_action=stop``): the run ends here.

    A :class:`~otel_breaker.loops.ToolLoopError`, so it passes the handlers with which
    frameworks turn a tool's ``Exception`` into a message, and reaches the caller of
    the run the same way."""

    def __init__(self, tool: str, rejections: int) -> None:
        self.rejections = rejections
        BaseException.__init__(
            self,
            f"Tool '{safe_name(tool)}' was called again after its circuit breaker had rejected it "
            f"{rejections} times in this run. The run was stopped.",
        )
        self.tool = tool
        self.count = rejections
        self.last_error = None

    def for_model(self) -> str:
        """The text for a stop that cannot reach the caller of the run."""
        return budget_message(self.tool, self.rejections)


def budget_message(tool: str, rejections: int) -> str:
    """What the model reads for a tool taken out of its run."""
    return sanitize(
        f"Tool '{safe_name(tool)}' is unavailable for the rest of this run: it was called "
        f"{rejections} times while its circuit breaker was open. Do not call it again; use another "
        "tool, or tell the user this capability is unavailable."
    )


class RunBudgetRejection(rejection.Rejection):
    """What a run's call of a tool it spent its budget on answers (``hide``)."""

    __slots__ = ("rejections",)

    def __init__(self, breaker: CircuitBreaker, call: ToolCall, rejections: int) -> None:
        super().__init__(breaker, call)
        self.rejections = rejections

    @property
    def summary(self) -> str:
        return f"Tool '{safe_name(self.call.tool)}' unavailable for this run: its circuit breaker kept rejecting it"

    @property
    def remediation(self) -> str:
        return "Do not call it again in this run; use another tool, or tell the user this capability is unavailable."

    @property
    def message(self) -> str:
        return budget_message(self.call.tool, self.rejections)

    @property
    def error(self) -> Any:
        def make() -> CircuitOpenError:
            return CircuitOpenError(self.call.tool, self.state, None, self.message)

        return make

    def as_dict(self) -> dict[str, Any]:
        result = super().as_dict()
        result.update({"run_budget": True, "rejections": self.rejections, "retry_after_s": None})
        return result


class BudgetCounts:
    """Calls the budget answered, by (tool, agent, action), for the metrics; bounded."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str | None, str], int] = {}

    def add(self, call: ToolCall, action: str) -> None:
        key = (bounded(call.tool), call.agent_name, action)
        with self._lock:
            if key not in self._counts and len(self._counts) >= MAX_SERIES:
                key = (OTHER_TOOL, None, action)
            self._counts[key] = self._counts.get(key, 0) + 1

    def observations(self, rejected: bool) -> Iterable[tuple[int, dict[str, Any]]]:
        """(count, attributes) of the calls the budget did not run, for
        ``otel_breaker.calls.rejected`` (``rejected``); nothing for the loops counter."""
        if not rejected:
            return
        with self._lock:
            items = list(self._counts.items())
        for (tool, agent, action), value in items:
            if action == "warn":
                continue
            attributes: dict[str, Any] = {ATTR_TOOL: tool, ATTR_REASON: REASON_RUN_BUDGET, ATTR_RUN_ACTION: action}
            if agent:
                attributes[ATTR_AGENT] = bounded(agent)
            yield value, attributes

    def clear(self) -> None:
        with self._lock:
            self._counts.clear()

    def reinit_after_fork(self) -> None:
        """A lock another thread held at a fork stays held in the child: a new one."""
        self._lock = threading.Lock()


COUNTS = BudgetCounts()
LOOP_SOURCES.append(COUNTS.observations)
os.register_at_fork(after_in_child=COUNTS.reinit_after_fork)


def _spent(opened: Run, call: ToolCall, action: str, rejections: int) -> None:
    """The budget of ``call``'s tool is spent in ``opened``: one event (the first time)."""
    key = (call.tool, call.where)
    if key in opened.budget_spent:
        return
    opened.budget_spent.add(key)
    attributes: dict[str, Any] = {
        ATTR_TOOL: bounded(call.tool),
        ATTR_RUN_ACTION: action,
        ATTR_RUN_REJECTIONS: rejections,
        ATTR_REASON: REASON_RUN_BUDGET,
        ATTR_RUN_ID: bounded(opened.id),
    }
    if call.agent_name:
        attributes[ATTR_AGENT] = bounded(call.agent_name)
    TELEMETRY.event(EVENT_RUN_BUDGET, attributes, warning=True)


def check(call: ToolCall, breaker: CircuitBreaker, adapter: Any) -> Any:
    """Before a call: :data:`RUN`, or the budget's answer (the adapter's rejection form).
    Raises :class:`RunBudgetError` under ``stop``; a failure of the budget's own
    bookkeeping lets the call go on."""
    try:
        decision = _decide(call, breaker)
    except Exception:
        logger.debug("otel-breaker: the waste budget failed; the call goes on", exc_info=True)
        return RUN
    if decision is None:
        return RUN
    action, rejections = decision
    if action == "stop":
        raise RunBudgetError(call.tool, rejections)
    return _answer(breaker, call, adapter, rejections)


def _decide(call: ToolCall, breaker: CircuitBreaker) -> tuple[str, int] | None:
    """``(action, rejections)`` when the budget answers the call, else None."""
    opened = current_run()
    if opened is None:
        return None
    config = breaker.config
    budget = config.run_rejections
    if budget is None:
        return None
    rejections = opened.rejections_of(call.tool, call.where)
    if opened.hides(call.tool, call.source):
        COUNTS.add(call, "hide")
        return "hide", rejections
    if rejections < budget:
        return None
    action = config.run_action
    _spent(opened, call, action, rejections)
    COUNTS.add(call, action)
    if action == "warn":
        return None
    if action == "hide":
        opened.hide(call.tool, call.source, call.where)
    return action, rejections


def _answer(breaker: CircuitBreaker, call: ToolCall, adapter: Any, rejections: int) -> Any:
    info = RunBudgetRejection(breaker, call, rejections)
    info.state = State.OPEN
    if adapter is not None:
        return adapter.rejection(call, info)
    if breaker.config.graceful_degradation:
        return info.as_dict()
    raise info.error()


def reset() -> None:
    """Forget the counts (tests)."""
    COUNTS.clear()


__all__ = ["RUN", "BudgetCounts", "RunBudgetError", "RunBudgetRejection", "budget_message", "check", "reset"]
