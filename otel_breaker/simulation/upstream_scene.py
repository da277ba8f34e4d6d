"""The demo's second scene: the host two tools run behind refuses connections, then comes back.

``page_read`` and ``page_links`` run behind the upstream ``pages_host`` (the
grouping ``OTEL_BREAKER_UPSTREAMS`` configures). While the host refuses
connections every call fails with a transport error, which the upstream's one
breaker counts for both tools together: it opens after ``failure_threshold``
of them, the remaining calls to either tool are rejected without a round trip,
and once the host answers again a probe closes it. The scene's breakers are made
before the demo's main run (:func:`prepare`), so an exporter sees their series
from the start and dashboards see the opening as an increase.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from otel_breaker.breaker import CircuitBreakerConfig
from otel_breaker.guards import Guard
from otel_breaker.simulation.world import AGENT, MODEL, SimClock, SimStore, round_trip_tokens
from otel_breaker.telemetry import TELEMETRY
from otel_breaker.toolcall import ToolCall
from otel_breaker.upstream import UPSTREAM_PREFIX

UPSTREAM = "pages_host"
TOOLS = ("page_read", "page_links")
#: Calls the scene makes, alternating between its two tools.
CALLS = 24
#: The host refuses connections for these calls (0-based, end excluded).
DOWN = (4, 16)
#: Simulated seconds between two calls (a model turn and the call).
CALL_SECONDS = 5.0


@dataclass
class SceneResult:
    calls: int = 0
    reached_dead_host: int = 0
    rejected: int = 0
    ok: int = 0


class _Scene:
    def __init__(self) -> None:
        self.clock = SimClock()


_scene: _Scene | None = None


def upstreams() -> dict[str, tuple[str, ...]]:
    """The grouping the scene needs in the settings (``OTEL_BREAKER_UPSTREAMS``)."""
    return {UPSTREAM: TOOLS}


def prepare(registry: Any) -> None:
    """Make the scene's breakers (``fast_api``, on the scene's simulated clock) in ``registry``."""
    global _scene

    _scene = _Scene()
    store = registry.store
    registry.use_store(SimStore(_scene.clock))  # an upstream serves every agent: no agent name
    try:
        registry.get(UPSTREAM_PREFIX + UPSTREAM, CircuitBreakerConfig.preset("fast_api"))
        registry.use_store(SimStore(_scene.clock, AGENT))
        for tool in TOOLS:
            registry.get(tool, CircuitBreakerConfig.preset("fast_api"))
    finally:
        registry.use_store(store)


def run(registry: Any, on_call: Callable[[int], None] | None = None) -> SceneResult:
    """Play the scene through the real guarded call path (after :func:`prepare`)."""

    scene = _scene or _Scene()
    result = SceneResult()
    guard = Guard(registry)
    for index in range(CALLS):
        tool = TOOLS[index % len(TOOLS)]
        down = DOWN[0] <= index < DOWN[1]

        def call(url: str, down: bool = down) -> str:
            if down:
                result.reached_dead_host += 1
                raise ConnectionRefusedError(111, f"{UPSTREAM} refused the connection")
            return f"contents of {url}"

        tokens_in, tokens_out = round_trip_tokens(index)
        TELEMETRY.estimator.observe(tool, tokens_in, tokens_out, MODEL)
        result.calls += 1
        try:
            answer = guard.call(ToolCall(tool, agent_name=AGENT, call_id=f"page_{index}"), call, (f"page-{index}",))
        except ConnectionRefusedError:
            pass
        else:
            if isinstance(answer, dict) and answer.get("circuit_open"):
                result.rejected += 1
            else:
                result.ok += 1
        scene.clock.advance(CALL_SECONDS)
        TELEMETRY.settle_savings()
        if on_call is not None:
            on_call(index)
    return result
