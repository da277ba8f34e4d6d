"""What the loop guard saves: a model that repeats an identical invalid call.

A scripted model asks a tool with arguments its schema rejects, and repeats the
very same call after every error, as the reports of runaway agents describe, until
the run's turn limit (:data:`TURN_LIMIT` calls). Read a loop message, it changes
its arguments, the call succeeds, and it answers. The same script runs three times,
switched the way a user would, by ``OTEL_BREAKER_*`` settings, through the real
call path (``Guard.call``) and loop guard:

1. guard off (``OTEL_BREAKER_LOOP_LIMIT`` far above the turn limit): every repeat runs;
2. ``reject`` (the default): the 4th identical call is answered with the loop message;
3. ``stop``: the 4th identical call ends the run with ``ToolLoopError``.

The cost model (every figure follows from the constants here): each model turn
re-sends the whole transcript, which starts at :data:`PROMPT_TOKENS` and grows by
the call (:data:`CALL_TOKENS`) and the answer it got (the tool's error or the loop
message, :func:`~otel_breaker.simulation.world.text_tokens`). Savings are reported two
ways: the old flat estimate (avoided calls x ``OTEL_BREAKER_TOKENS_PER_CALL``'s
default) and the context-growth estimate
(:func:`otel_breaker.tokens.repeated_turns_tokens`), beside the measured difference.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from otel_breaker import loops
from otel_breaker.classify import MISTAKE
from otel_breaker.config import get_settings, load_settings, set_settings
from otel_breaker.guards import Guard
from otel_breaker.loops import ToolLoopError
from otel_breaker.registry import default_registry
from otel_breaker.simulation.world import text_tokens
from otel_breaker.tokens import DEFAULT_TOKENS_PER_CALL, repeated_turns_tokens
from otel_breaker.toolcall import ToolCall

TOOL = "lookup_order"
PROMPT_TOKENS = 1500
"""The system prompt, the tool definitions and the user's question."""
CALL_TOKENS = 40
"""One tool call the model writes (its output tokens)."""
ANSWER_TOKENS = 60
"""The model's final answer."""
TURN_LIMIT = 20
"""The run's own limit of tool calls (frameworks have one: max turns, max iterations)."""
VALIDATION_ERROR = "1 validation error for lookup_order: order_id: Input should be a valid integer, got 'A-1042'"
SUCCESS = "order 1042: shipped on 3 March"

LOOP_CASES: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("off", "guard off", {"OTEL_BREAKER_LOOP_LIMIT": "1000"}),
    ("reject", "reject (default)", {}),
    ("stop", "stop", {"OTEL_BREAKER_LOOP_ACTION": "stop"}),
)


class _ArgumentError(ValueError):
    """The framework's "arguments do not match the schema" error."""


class _Adapter:
    """The framework's facts, as an adapter gives them to the call path."""

    def result_error(self, call: Any, result: Any) -> str | None:
        return None

    def rejection(self, call: Any, info: Any) -> str:
        return info.message

    def exception_hint(self, call: Any, exc: BaseException) -> str | None:

        return MISTAKE if isinstance(exc, _ArgumentError) else None


def _lookup_order(order_id: Any) -> str:
    if not isinstance(order_id, int):
        raise _ArgumentError(VALIDATION_ERROR)
    return SUCCESS


@dataclass
class LoopResult:
    """What one case of the loop cost."""

    key: str
    label: str
    model_turns: int = 0
    model_tokens: int = 0
    tool_calls: int = 0
    """Calls the model made (the ones the guard did not run included)."""
    ran: int = 0
    """Calls that ran the tool."""
    rejected: int = 0
    outcome: str = ""
    #: The prompt (input tokens) at each model turn, in order.
    prompts: list[int] = field(default_factory=list)


def run_loop_case(key: str, label: str, env: dict[str, str]) -> LoopResult:
    """One case on the default registry, cleared before and after; the process's
    settings are put back afterwards."""

    result = LoopResult(key, label)
    settings = get_settings()
    registry = default_registry()
    set_settings(load_settings(env))
    registry.clear(keep_counts=False)
    loops.reset()
    guard, adapter = Guard(registry), _Adapter()
    transcript = PROMPT_TOKENS
    arguments: dict[str, Any] = {"order_id": "A-1042"}

    def turn(output: int) -> None:
        result.model_turns += 1
        result.prompts.append(transcript)
        result.model_tokens += transcript + output

    try:
        while True:
            if result.tool_calls >= TURN_LIMIT:
                result.outcome = f"turn limit ({TURN_LIMIT} calls), no answer"
                break
            turn(CALL_TOKENS)
            result.tool_calls += 1
            call = ToolCall(TOOL, agent_name="support_agent", arguments=dict(arguments))

            def lookup_order(order_id: Any) -> str:
                result.ran += 1
                return _lookup_order(order_id)

            try:
                answer = guard.call(call, lookup_order, (arguments["order_id"],), adapter=adapter)
            except _ArgumentError as exc:
                answer = str(exc)
            except ToolLoopError:
                result.outcome = "stopped: ToolLoopError raised to the caller"
                break
            transcript += CALL_TOKENS + text_tokens(answer)
            if answer == SUCCESS:
                turn(ANSWER_TOKENS)
                result.outcome = "answered"
                break
            if "this exact call" in answer:
                result.rejected += 1
                arguments = {"order_id": 1042}  # the model reads the loop message and corrects itself
    finally:
        registry.clear(keep_counts=False)
        loops.reset()
        set_settings(settings)
    return result


def compare_loop_cases() -> list[LoopResult]:
    """Every case of :data:`LOOP_CASES`, in order."""
    return [run_loop_case(key, label, env) for key, label, env in LOOP_CASES]


def savings(off: LoopResult, guarded: LoopResult) -> dict[str, int]:
    """Tokens the guard saved against ``off``: measured, and the two estimates.

    * ``flat``: the old estimate, each avoided tool call worth ``OTEL_BREAKER_TOKENS_PER_CALL``
      (its default) whatever the size of the prompt;
    * ``context``: the avoided turns priced at the prompt of the turn the guard acted at,
      growing by one repeat (call and error) a turn (:func:`repeated_turns_tokens`).
    """
    avoided_calls = max(0, off.ran - guarded.ran)
    avoided_turns = max(0, off.model_turns - guarded.model_turns)
    start = min(guarded.model_turns, len(off.prompts) - 1)  # the first turn of ``off`` the guarded run did not need
    growth = CALL_TOKENS + text_tokens(VALIDATION_ERROR)
    return {
        "measured": off.model_tokens - guarded.model_tokens,
        "flat": avoided_calls * DEFAULT_TOKENS_PER_CALL,
        "context": repeated_turns_tokens(off.prompts[start], growth, avoided_turns, CALL_TOKENS) if start >= 0 else 0,
    }
