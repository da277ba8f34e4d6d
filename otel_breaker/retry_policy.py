"""Retries below the model: which failed attempt may run again, after how long, within what budget.

A transient blip (a dropped connection, a 503 from a restarting backend) should
not cost a model turn; a retry must never run a tool with side effects twice,
and a dead backend must never get more traffic because of us. So a failed
attempt is retried only when all of these hold (``call_steps.py`` asks
:func:`retry_delay` after each attempt):

* retries are on for the tool (``retry="transient"``, ``OTEL_BREAKER_RETRY``);
* the tool is read-only or idempotent (``effects.py``; unknown is not);
* the failure is transient as its verdict reads it: a transport error, a 502,
  503 or 504, a read timeout, or a 429 whose retry hint is at most
  ``retry_max_wait`` seconds (the wait is then the hint);
* attempts are left (``retry_attempts`` retries after the first);
* the call's own timeout, when it has one, leaves room for the back-off;
* the retry budget of the tool and of its upstream allows one more
  (:class:`RetryBudget`: retries at most :data:`BUDGET_RATIO` of the calls over
  :data:`BUDGET_WINDOW` seconds, Finagle's and Envoy's rule).

The breakers then admit the retry like any call: an open breaker (the tool's
or its upstream's) stops it. Each attempt is its own outcome.

The back-off sleeps through :data:`TIMING`, which tests replace
(:func:`set_retry_timing`): nothing here sleeps on its own.
"""

from __future__ import annotations

import os
import random
import threading
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from otel_breaker.breaker import CircuitBreaker
from otel_breaker.classify import FAILURE, IGNORED, UPSTREAM, Verdict, is_transport_error
from otel_breaker.effects import DESTRUCTIVE, SAFE_TO_REPEAT, effects_of
from otel_breaker.retry_hint import retry_hint
from otel_breaker.toolcall import ToolCall

#: Retries allowed per call over the window (Finagle's and Envoy's 20 %).
BUDGET_RATIO = 0.2
#: The window the budget counts over, in seconds.
BUDGET_WINDOW = 10.0
#: Retries always allowed per window, whatever the traffic: a tool called once a
#: minute can still ride out one blip with the default two retries. Past it, retries
#: are at most :data:`BUDGET_RATIO` of the calls (the larger of the two applies).
BUDGET_RESERVE = 2
#: The first back-off (seconds); each later one doubles, with jitter.
BASE_BACKOFF = 0.05
#: The longest back-off between two attempts without a server's hint (seconds).
MAX_BACKOFF = 1.0

#: Verdict rules that are transient: the service may answer the same request a moment later.
TRANSIENT_RULES = frozenset(
    {
        "transport",
        "text.unavailable",
        "http.502",
        "http.503",
        "http.504",
        "errno.ECONNREFUSED",
        "errno.ECONNRESET",
        "errno.ECONNABORTED",
        "errno.ETIMEDOUT",
        "errno.EPIPE",
        "errno.EHOSTUNREACH",
        "errno.ENETUNREACH",
    }
)
#: A 429 is retried only with a short hint (the wait it asks for).
RATE_LIMITED_RULE = "http.429"
#: Transient failures whose request certainly did not take effect: the server refused it
#: or was never reached. Any other transient failure of a destructive tool has an unknown outcome.
NOT_DELIVERED_RULES = frozenset({"http.429", "http.503", "errno.ECONNREFUSED"})
#: Our own timeout (``call_steps.TIMEOUT_ERROR_TYPE``): the call's time is spent, never retried.
OWN_TIMEOUT_RULE = "timeout"


class Timing:
    """How the back-off waits: ``sleep`` (sync driver), ``asleep`` (async driver) and
    ``random`` (the jitter, a float in [0, 1)). Replaced whole by :func:`set_retry_timing`."""

    __slots__ = ("asleep", "random", "sleep")

    def __init__(
        self,
        sleep: Callable[[float], Any] = time.sleep,
        asleep: Callable[[float], Awaitable[Any]] | None = None,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.sleep = sleep
        self.asleep = asleep if asleep is not None else _any_loop_sleep
        self.random = jitter


async def _any_loop_sleep(seconds: float) -> None:
    """Sleep on whichever event loop runs: asyncio's (and uvloop's) own, else anyio's (trio)."""
    import asyncio  # here: only a retry needs it, and a framework's import would pay for it

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        import anyio  # trio: anyio is what runs it with us (a dependency of every MCP stack)

        await anyio.sleep(seconds)
        return
    await asyncio.sleep(seconds)


TIMING = Timing()


def set_retry_timing(
    sleep: Callable[[float], Any] | None = None,
    asleep: Callable[[float], Awaitable[Any]] | None = None,
    jitter: Callable[[], float] | None = None,
) -> None:
    """Replace how back-offs wait (tests: a sleeper that moves a fake clock); None: the default."""
    global TIMING
    TIMING = Timing(sleep or time.sleep, asleep, jitter or random.random)


#: Every retry budget, for the at-fork handler below.
_BUDGETS: weakref.WeakSet[RetryBudget] = weakref.WeakSet()


def _reinit_after_fork() -> None:
    for budget in list(_BUDGETS):
        budget.reinit_after_fork()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_reinit_after_fork)


class RetryBudget:
    """Retries of one breaker (a tool's or an upstream's) over the last :data:`BUDGET_WINDOW` seconds.

    Calls are not counted one by one (a successful call pays nothing for the budget):
    the breaker already counts every call that ran, so each decision reads that count
    and spreads the calls since the previous decision evenly over the time between.
    The first decision knows only its own call, so a budget starts with the reserve."""

    __slots__ = ("__weakref__", "_last_ran", "_lock", "_spans", "retries")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: (from, to, calls) per interval between decisions, within the window.
        self._spans: deque[tuple[float, float, float]] = deque()
        #: Times of the retries made within the window.
        self.retries: deque[float] = deque()
        self._last_ran: tuple[float, int] | None = None
        _BUDGETS.add(self)

    def reinit_after_fork(self) -> None:
        """A lock another thread held at a fork stays held in the child: replace it."""
        self._lock = threading.Lock()

    def _calls(self, now: float, ran: int) -> float:
        window_start = now - BUDGET_WINDOW
        last = self._last_ran
        if last is None:
            self._spans.append((now, now, 1.0))
        else:
            made = ran - last[1] - sum(1 for at in self.retries if at >= last[0])
            if made > 0:
                self._spans.append((last[0], now, float(made)))
        self._last_ran = (now, ran)
        while self._spans and self._spans[0][1] < window_start:
            self._spans.popleft()
        while self.retries and self.retries[0] < window_start:
            self.retries.popleft()
        total = 0.0
        for begin, end, calls in self._spans:
            if begin >= window_start or end <= begin:
                total += calls
            else:
                total += calls * (end - window_start) / (end - begin)
        return total

    def allows(self, now: float, ran: int) -> bool:
        """Whether one more retry fits (``ran``: the calls the breaker has seen run)."""
        with self._lock:
            calls = self._calls(now, ran)
            return len(self.retries) + 1 <= max(BUDGET_RESERVE, BUDGET_RATIO * calls)

    def spend(self, now: float) -> None:
        with self._lock:
            self.retries.append(now)


def budget_of(breaker: CircuitBreaker) -> RetryBudget:
    """``breaker``'s retry budget, made on first use (kept on the breaker: it lives as long)."""
    budget = breaker.retry_budget
    if budget is None:
        budget = breaker.retry_budget = RetryBudget()
    return budget


def _ran(breaker: CircuitBreaker) -> int:
    counts = breaker.lifetime_counts()
    return counts[0] + counts[1] + counts[2]


def tool_effects(breaker: CircuitBreaker, call: ToolCall | None) -> str:
    """The side-effect class of the breaker's tool (``effects.py``)."""
    tool = call.tool if call is not None else breaker.name
    source = call.source if call is not None else breaker.source
    return effects_of(tool, source, breaker.config.effects)


def is_transient(verdict: Verdict, exc: BaseException | None) -> bool:
    """A failure the same request may not meet a moment later (429 excluded: see :func:`retry_delay`)."""
    if verdict.outcome == FAILURE:
        if verdict.rule in TRANSIENT_RULES:
            return True
        return exc is not None and verdict.rule != OWN_TIMEOUT_RULE and is_transport_error(exc)
    # A transport failure its upstream's breaker counted is neutral for the tool's.
    return verdict.outcome == IGNORED and verdict.reason == UPSTREAM


def outcome_unknown(verdict: Verdict, exc: BaseException | None, effects: str) -> bool:
    """Whether a failed call of a destructive tool may have taken effect: a timeout
    (ours or the client's) or a transport failure after the request may have left."""
    if effects != DESTRUCTIVE:
        return False
    if verdict.rule == OWN_TIMEOUT_RULE:
        return True
    return is_transient(verdict, exc) and verdict.rule not in NOT_DELIVERED_RULES


def backoff(retry: int) -> float:
    """The wait before retry number ``retry`` (1, 2, ...): doubling from
    :data:`BASE_BACKOFF`, capped, half of it jittered so callers spread out."""
    ceiling = min(MAX_BACKOFF, BASE_BACKOFF * (2 ** (retry - 1)))
    return ceiling / 2 + TIMING.random() * ceiling / 2


def retry_delay(
    breaker: CircuitBreaker,
    upstream: CircuitBreaker | None,
    call: ToolCall | None,
    verdict: Verdict,
    exc: BaseException | None,
    retries_made: int,
    started: float,
) -> tuple[float | None, str | None]:
    """(seconds to wait before retrying, None) when the failed attempt is retried, else
    (None, why not) with why not None when retries simply do not apply and
    ``"budget"`` when only the budget stopped it (an event says so)."""
    config = breaker.config
    if config.retry is None or retries_made >= config.retry_attempts:
        return None, None
    if verdict.outcome == FAILURE and verdict.rule == RATE_LIMITED_RULE and exc is not None:
        hint = retry_hint(exc)
        if hint is None or hint > config.retry_max_wait:
            return None, None
        wait = max(hint, backoff(retries_made + 1))
    elif is_transient(verdict, exc):
        wait = backoff(retries_made + 1)
    else:
        return None, None
    if tool_effects(breaker, call) not in SAFE_TO_REPEAT:
        return None, None
    now = breaker.clock()
    if config.timeout is not None and now + wait >= started + config.timeout:
        return None, None  # a retry never outlives the call's timeout
    budgets = [(breaker, budget_of(breaker))]
    if upstream is not None:
        budgets.append((upstream, budget_of(upstream)))
    if not all(budget.allows(now, _ran(owner)) for owner, budget in budgets):
        return None, "budget"
    for _owner, budget in budgets:
        budget.spend(now)
    return wait, None
