"""The demo's two runs: the same agent and script, without and with breakers.

The run with breakers uses the process's default registry (on a simulated-clock
store), the real guard and the global telemetry, so whatever the process
exports (``--otlp``, ``--serve-metrics``) shows it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from otel_breaker import breaker as breaker_module
from otel_breaker import degrade
from otel_breaker.breaker import CircuitBreakerConfig
from otel_breaker.guards import Guard
from otel_breaker.registry import default_registry
from otel_breaker.simulation.agent import Agent, Invoke, Ledger
from otel_breaker.simulation.world import (
    AGENT,
    BACKUP,
    FETCH,
    MODEL,
    PRIMARY,
    SimClock,
    SimStore,
    World,
    round_trip_tokens,
)
from otel_breaker.telemetry import TELEMETRY
from otel_breaker.toolcall import ToolCall


def unguarded(tool: str, fn: Callable[[str], str], query: str) -> tuple[str, Any]:
    """Run the tool as an agent without breakers does."""
    try:
        return "ok", fn(query)
    except Exception as exc:
        return "failed", exc


def install_breakers(registry: Any) -> None:
    """The demo's breakers: ``fast_api`` (3 failures, 30 s cooldown) for every
    tool, ``web_search`` falling back to ``backup_search``; keyed as the agent's
    calls find them (agent name and tool)."""

    registry.breaker_for(agent_call(PRIMARY), CircuitBreakerConfig.preset("fast_api", fallbacks=(BACKUP,)))
    registry.breaker_for(agent_call(BACKUP), CircuitBreakerConfig.preset("fast_api"))
    registry.breaker_for(agent_call(FETCH), CircuitBreakerConfig.preset("fast_api"))


def agent_call(tool: str, call_id: str | None = None) -> Any:
    """A call of the demo's agent to ``tool``."""

    return ToolCall(tool, agent_name=AGENT, call_id=call_id)


def guarded(guard: Any, ledger: Ledger, on_rejected: Callable[[str], None] | None = None) -> Invoke:
    """Run each tool call through ``guard``; a rejection is the guard's own value."""

    def invoke(tool: str, fn: Callable[[str], str], query: str) -> tuple[str, Any]:
        try:
            result = guard.call(agent_call(tool, f"call_{ledger.attempted}"), fn, (query,))
        except Exception as exc:
            return "failed", exc
        if isinstance(result, dict) and result.get("circuit_open"):
            if on_rejected is not None:
                on_rejected(tool)
            return "rejected", result
        return "ok", result

    return invoke


def run_without_breakers(steps: int, on_step: Callable[[int], None]) -> Ledger:
    ledger = Ledger("without breakers")
    Agent(World(SimClock()), ledger, unguarded).work(steps, on_step)
    return ledger


@dataclass
class Moment:
    """One breaker state change, at simulated time ``at``."""

    at: float
    tool: str
    from_state: str
    to_state: str
    reason: str


def run_with_breakers(
    steps: int, on_step: Callable[[int], None], timeline: list[Moment], prompt_sample: list[str]
) -> Ledger:
    """The run with breakers. ``timeline`` receives every state change;
    ``prompt_sample`` the tool-status block and the rejection message at the
    first rejection. Its breakers stay in the default registry (for the
    telemetry to export); the registry's store is put back afterwards."""

    ledger = Ledger("with breakers")
    clock = SimClock()
    world = World(clock)
    registry = default_registry()
    store = registry.store
    registry.use_store(SimStore(clock, AGENT))
    install_breakers(registry)

    def listener(change: Any) -> None:
        timeline.append(
            Moment(change.at, change.breaker.name, change.from_state.value, change.to_state.value, change.reason)
        )

    def sample(tool: str) -> None:
        if not prompt_sample:
            prompt_sample.append(degrade.tool_status_block())
            prompt_sample.append(degrade.Rejection(registry.breaker_for(agent_call(tool)), agent_call(tool)).message)

    run_guarded = guarded(Guard(registry), ledger, sample)

    def invoke(tool: str, fn: Callable[[str], str], query: str) -> tuple[str, Any]:
        tokens_in, tokens_out = round_trip_tokens(agent.step)
        TELEMETRY.estimator.observe(tool, tokens_in, tokens_out, MODEL)
        return run_guarded(tool, fn, query)

    def step_done(step: int) -> None:
        TELEMETRY.settle_savings()
        on_step(step)

    agent = Agent(world, ledger, invoke)
    breaker_module.add_global_listener(listener)
    try:
        agent.work(steps, step_done)
    finally:
        breaker_module.remove_global_listener(listener)
        registry.use_store(store)  # breakers made later read the real clock again
    TELEMETRY.settle_savings()
    ledger.tokens_saved = TELEMETRY.estimator.total_saved()
    return ledger
