"""What hiding open tools saves: the demo's agent in four configurations.

The same script as the demo (``web_search`` dead for the middle half of the
questions, ``backup_search`` healthy) runs four times, each case switched on
the way a user would, by ``OTEL_BREAKER_*`` settings:

1. no breaker;
2. breakers only;
3. breakers + the tool-status block (``OTEL_BREAKER_STATUS_IN_PROMPT``);
4. breakers + open tools hidden (``OTEL_BREAKER_HIDE_OPEN_TOOLS``).

Before every model turn the menu comes from :func:`otel_breaker.menu.visible_tools`
and the system prompt from :func:`otel_breaker.degrade.augment_instructions`,
as the framework adapters build them; the switches decide what they change.
The model is :class:`~otel_breaker.simulation.agent.ScriptedModel`, so the
figures come from a fixed policy, not from a language model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from otel_breaker import degrade, menu
from otel_breaker.config import get_settings, load_settings, set_settings
from otel_breaker.guards import Guard
from otel_breaker.registry import default_registry
from otel_breaker.simulation.agent import SYSTEM_PROMPT, Agent, Ledger, Turn
from otel_breaker.simulation.runs import guarded, install_breakers, unguarded
from otel_breaker.simulation.world import AGENT, DEFAULT_STEPS, TOOLS, SimClock, SimStore, World


@dataclass(frozen=True)
class Case:
    """One configuration: whether tools are guarded, and the settings it runs with."""

    key: str
    label: str
    breakers: bool
    env: Mapping[str, str] = field(default_factory=dict)


CASES = (
    Case("no_breaker", "no breaker", breakers=False),
    Case("breaker", "breaker only", breakers=True),
    Case("status", "breaker + status block", breakers=True, env={"OTEL_BREAKER_STATUS_IN_PROMPT": "true"}),
    Case("hidden", "breaker + hidden tools", breakers=True, env={"OTEL_BREAKER_HIDE_OPEN_TOOLS": "true"}),
)


@dataclass
class CaseResult:
    """What one case cost."""

    case: Case
    ledger: Ledger

    @property
    def model_turns(self) -> int:
        return self.ledger.model_turns

    @property
    def model_tokens(self) -> int:
        return self.ledger.model_tokens


def configured_request() -> Turn:
    """A model request as the adapters build it under the current settings,
    with the tools open at that moment noted for checking."""

    menu_ = tuple(menu.visible_tools(TOOLS, str, agent=AGENT))
    system_prompt = degrade.augment_instructions(SYSTEM_PROMPT, agent=AGENT) or SYSTEM_PROMPT
    open_now = frozenset(tool for tool, _source in menu.open_tools(AGENT))
    return Turn(menu_, system_prompt, open_now)


def run_case(case: Case, steps: int = DEFAULT_STEPS, on_step: Callable[[int], None] | None = None) -> CaseResult:
    """Run ``case`` on the default registry (cleared before and after, on a
    simulated clock) with the settings ``case.env`` gives; the settings and
    store the process had are put back afterwards.

    State changes reach the process's telemetry like any breaker's: run the
    cases before telemetry is set up, or forget them after (the demo does).
    """

    ledger = Ledger(case.label)
    clock = SimClock()
    registry = default_registry()
    settings, store = get_settings(), registry.store
    set_settings(load_settings(case.env))
    registry.clear(keep_counts=False)
    registry.use_store(SimStore(clock))
    try:
        invoke = unguarded
        if case.breakers:
            install_breakers(registry)
            invoke = guarded(Guard(registry), ledger)
        Agent(World(clock), ledger, invoke, configured_request).work(steps, on_step or (lambda step: None))
    finally:
        registry.clear(keep_counts=False)
        registry.use_store(store)
        set_settings(settings)
    return CaseResult(case, ledger)


def compare_cases(steps: int = DEFAULT_STEPS) -> list[CaseResult]:
    """Every case of :data:`CASES`, in order."""
    return [run_case(case, steps) for case in CASES]
