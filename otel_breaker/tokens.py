"""Estimated tokens (and money) saved by rejected calls.

The model: a rejected call saves one failed round-trip of that tool, i.e. the
model call that issued the tool call plus reading the error it would have
returned. We learn that cost from real usage: the ``gen_ai.usage.input_tokens``
and ``output_tokens`` of the model call that ended last before the tool span
started, in the same trace. The input side is the prompt size at the latest such
turn, not an average: each turn re-sends the whole transcript, which only grows
while a run goes on, so an average of earlier turns would lag behind the turn a
rejection saves (a loop of N retries costs about N squared tokens, see
:func:`repeated_turns_tokens`). The output side is smoothed per tool (an
exponential moving average).
Until a tool has been observed, ``OTEL_BREAKER_TOKENS_PER_CALL`` is used. The
attribute ``otel_breaker.estimate.source`` says which (``observed`` or
``configured``). It is an estimate, not a measurement.

Nothing here runs per call: rejections are counted by the breakers, and the
estimate is applied to new rejections when metrics are collected (``settle``).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from otel_breaker.token_prices import Price, parse_prices  # noqa: F401 - part of this module's API

logger = logging.getLogger("otel_breaker")

DEFAULT_TOKENS_PER_CALL = 1500
OBSERVED = "observed"
CONFIGURED = "configured"
_TRACES_KEPT = 2048
_INFERENCES_PER_TRACE = 8


_ESTIMATORS: weakref.WeakSet[TokenEstimator] = weakref.WeakSet()


def repeated_turns_tokens(prompt_tokens: int, growth_tokens: int, turns: int, output_tokens: int = 0) -> int:
    """Tokens of ``turns`` more model turns of a loop, counting context growth.

    Each turn re-sends the whole prompt, which was ``prompt_tokens`` at the first of
    them and grows by ``growth_tokens`` a turn (the repeated call and its error stay in
    the transcript), and answers with ``output_tokens``: ``turns * (prompt + output) +
    growth * turns * (turns - 1) / 2``. So N retries cost about N squared tokens, where a
    flat per-call estimate grows linearly. Negative inputs count as 0.
    """
    turns = max(0, int(turns))
    prompt_tokens, growth_tokens, output_tokens = (
        max(0, int(v)) for v in (prompt_tokens, growth_tokens, output_tokens)
    )
    return turns * (prompt_tokens + output_tokens) + growth_tokens * turns * (turns - 1) // 2


def _reinit_after_fork() -> None:
    """A lock another thread held at a fork stays held in the child: replace them."""
    for estimator in list(_ESTIMATORS):
        estimator._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)


class TokenEstimator:
    """Learns per-tool round-trip cost from inference spans; totals savings."""

    def __init__(
        self,
        tokens_per_call: int = DEFAULT_TOKENS_PER_CALL,
        prices: Mapping[str, Price] | None = None,
        smoothing: float = 0.3,
        max_tools: int = 10_000,
    ) -> None:
        self.tokens_per_call = tokens_per_call
        self.prices = dict(prices or {})
        self._alpha = smoothing
        self._max_tools = max_tools
        self._lock = threading.Lock()
        # tool -> [input tokens, output tokens, model]
        self._observed: dict[str, list] = {}
        # trace id -> recent (end time ns, input, output, model)
        self._inferences: OrderedDict[int, list[tuple[int, int, int, str | None]]] = OrderedDict()
        # (tool, agent, source) -> tokens; (tool, agent, model) -> USD. The agent is part of the
        # key as on every other metric; the series stay as many as the breakers (tool x agent).
        self._saved: dict[tuple[str, str | None, str], int] = {}
        self._cost: dict[tuple[str, str | None, str], float] = {}
        self._seen_rejections: dict[object, int] = {}
        _ESTIMATORS.add(self)

    # -- learning ------------------------------------------------------------------

    def note_inference(
        self, trace_id: int, end_ns: int, input_tokens: int, output_tokens: int, model: str | None
    ) -> None:
        """A model call finished in ``trace_id`` with this usage."""
        with self._lock:
            recent = self._inferences.get(trace_id)
            if recent is None:
                recent = self._inferences[trace_id] = []
                if len(self._inferences) > _TRACES_KEPT:
                    self._inferences.popitem(last=False)
            recent.append((end_ns, input_tokens, output_tokens, model))
            if len(recent) > _INFERENCES_PER_TRACE:
                del recent[0]

    def note_tool(self, trace_id: int, start_ns: int, tool: str) -> bool:
        """A tool span started at ``start_ns``: attribute the model call that ended
        last before it to that tool. Returns True when one was found."""
        with self._lock:
            recent = self._inferences.get(trace_id)
            if not recent:
                return False
            issuer = None
            for inference in recent:
                if inference[0] <= start_ns and (issuer is None or inference[0] > issuer[0]):
                    issuer = inference
        if issuer is None:
            return False
        self.observe(tool, issuer[1], issuer[2], issuer[3])
        return True

    def observe(self, tool: str, input_tokens: int, output_tokens: int, model: str | None = None) -> None:
        """One observed round-trip cost of ``tool``."""
        with self._lock:
            current = self._observed.get(tool)
            if current is None:
                if len(self._observed) >= self._max_tools:
                    return
                self._observed[tool] = [float(input_tokens), float(output_tokens), model]
                return
            alpha = self._alpha
            current[0] = float(input_tokens)  # the prompt at this turn (context growth)
            current[1] += alpha * (output_tokens - current[1])
            if model:
                current[2] = model

    def estimate(self, tool: str) -> tuple[int, str]:
        """(tokens one failed round-trip of ``tool`` costs, source)."""
        observed = self._observed.get(tool)
        if observed is None:
            return self.tokens_per_call, CONFIGURED
        return round(observed[0] + observed[1]), OBSERVED

    def estimate_cost(self, tool: str) -> tuple[float, str] | None:
        """(USD one failed round-trip costs, model) when a price is known."""
        observed = self._observed.get(tool)
        if observed is None or observed[2] not in self.prices:
            return None
        price = self.prices[observed[2]]
        return observed[0] * price.input + observed[1] * price.output, observed[2]

    # -- savings -------------------------------------------------------------------

    def settle(self, rejections: Iterable[tuple[object, str, str | None, int]]) -> None:
        """Turn new rejections into saved tokens.

        ``rejections``: (key, tool, agent, lifetime rejected count) per breaker; the
        difference since the last call is multiplied by the current estimate (per tool:
        the agent only tells whose saving it was).
        """
        for key, tool, agent, total in rejections:
            with self._lock:
                new = total - self._seen_rejections.get(key, 0)
                if new <= 0:
                    continue
                self._seen_rejections[key] = total
            tokens, source = self.estimate(tool)
            cost = self.estimate_cost(tool)
            with self._lock:
                self._saved[(tool, agent, source)] = self._saved.get((tool, agent, source), 0) + new * tokens
                if cost is not None:
                    cost_key = (tool, agent, cost[1])
                    self._cost[cost_key] = self._cost.get(cost_key, 0.0) + new * cost[0]

    def saved_tokens(self) -> dict[tuple[str, str | None, str], int]:
        """(tool, agent, source) -> estimated tokens saved so far."""
        with self._lock:
            return dict(self._saved)

    def saved_cost(self) -> dict[tuple[str, str | None, str], float]:
        """(tool, agent, model) -> estimated USD saved so far (only with prices)."""
        with self._lock:
            return dict(self._cost)

    def total_saved(self) -> int:
        with self._lock:
            return sum(self._saved.values())
