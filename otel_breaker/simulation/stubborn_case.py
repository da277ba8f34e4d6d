"""What the waste budget saves: a stubborn model that keeps calling an open tool.

A tool's breaker is already open (its backend is down). A scripted model asks for
it anyway, and after every rejection asks again, as reports of runaway agents
describe, until the run's turn limit (:data:`TURN_LIMIT` calls). It answers the user
only once the tool is no longer on its menu. The script runs three times, switched
by ``OTEL_BREAKER_*`` settings, inside one run (:func:`otel_breaker.run`) through the
real call path (``Guard.call``), waste budget and menu (:func:`otel_breaker.menu.visible_tools`):

1. budget off (``OTEL_BREAKER_RUN_REJECTIONS=off``): every call is rejected by the
   breaker, and the run ends at its turn limit without an answer;
2. ``hide`` (the default): after 3 rejections the tool leaves this run's menu, and
   the model answers with what it has;
3. ``stop``: the 4th call ends the run with ``RunBudgetError``.

The cost model is the loop case's (:mod:`otel_breaker.simulation.loop_case`): each
model turn re-sends the whole transcript, which grows by the call and its answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from otel_breaker import loops, menu, run_budget
from otel_breaker.config import get_settings, load_settings, set_settings
from otel_breaker.guards import Guard
from otel_breaker.registry import default_registry
from otel_breaker.run_budget import RunBudgetError
from otel_breaker.runs import run
from otel_breaker.simulation.loop_case import ANSWER_TOKENS, CALL_TOKENS, PROMPT_TOKENS, TURN_LIMIT
from otel_breaker.simulation.world import text_tokens
from otel_breaker.toolcall import ToolCall

TOOL = "track_parcel"
OTHER_TOOL = "contact_carrier"
DOWN = "carrier API unreachable: connection refused"

STUBBORN_CASES: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("off", "budget off", {"OTEL_BREAKER_RUN_REJECTIONS": "off"}),
    ("hide", "hide (default)", {}),
    ("stop", "stop", {"OTEL_BREAKER_RUN_ACTION": "stop"}),
)


class CarrierDown(ConnectionError):
    """The tool's backend is down."""


class _Adapter:
    """The framework's facts, as an adapter gives them to the call path."""

    def result_error(self, call: Any, result: Any) -> str | None:
        return None

    def rejection(self, call: Any, info: Any) -> str:
        return info.message


def _track_parcel(parcel: str) -> str:
    raise CarrierDown(DOWN)


@dataclass
class StubbornResult:
    """What one case of the stubborn model cost."""

    key: str
    label: str
    model_turns: int = 0
    model_tokens: int = 0
    tool_calls: int = 0
    """Calls of the open tool the model made."""
    rejected: int = 0
    outcome: str = ""


def run_stubborn_case(key: str, label: str, env: dict[str, str]) -> StubbornResult:
    """One case on the default registry, cleared before and after; the process's
    settings are put back afterwards."""

    result = StubbornResult(key, label)
    settings = get_settings()
    registry = default_registry()
    set_settings(load_settings({**env, "OTEL_BREAKER_FAILURE_THRESHOLD": "1", "OTEL_BREAKER_RECOVERY_TIMEOUT": "600"}))
    registry.clear(keep_counts=False)
    loops.reset()
    guard, adapter = Guard(registry), _Adapter()
    call = ToolCall(TOOL, agent_name="support_agent", arguments={"parcel": "JD014600"})
    try:
        guard.call(call, _track_parcel, ("JD014600",), adapter=adapter)  # an earlier run opened the breaker
    except CarrierDown:
        pass
    transcript = PROMPT_TOKENS

    def turn(output: int) -> None:
        result.model_turns += 1
        result.model_tokens += transcript + output

    try:
        with run():
            while True:
                offered = menu.visible_tools([TOOL, OTHER_TOOL], str)
                if TOOL not in offered:
                    turn(ANSWER_TOKENS)
                    result.outcome = "answered without the tool"
                    break
                if result.tool_calls >= TURN_LIMIT:
                    result.outcome = f"turn limit ({TURN_LIMIT} calls), no answer"
                    break
                turn(CALL_TOKENS)
                result.tool_calls += 1
                try:
                    answer = guard.call(call, _track_parcel, ("JD014600",), adapter=adapter)
                except RunBudgetError:
                    result.outcome = "stopped: RunBudgetError raised to the caller"
                    break
                result.rejected += 1
                transcript += CALL_TOKENS + text_tokens(answer)
    finally:
        registry.clear(keep_counts=False)
        loops.reset()
        run_budget.reset()
        set_settings(settings)
    return result


def compare_stubborn_cases() -> list[StubbornResult]:
    """Every case of :data:`STUBBORN_CASES`, in order."""
    return [run_stubborn_case(key, label, env) for key, label, env in STUBBORN_CASES]
