"""An OpenAI Agents SDK agent's flaky tool trips its circuit breaker, the model is told why, and the breaker recovers.

Offline: the model is the SDK's own scripted test model (agents.testing.ScriptedModel); no API key needed.
Run:  pip install -e ".[openai-agents]"   (openai-agents)
      (in a clone of this repository; once released: pip install "otel-breaker[openai-agents]")
      python examples/openai_agents_flaky_tool.py
"""

from __future__ import annotations

import time

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from otel_breaker import CircuitBreakerConfig
from otel_breaker.breaker import add_global_listener
from otel_breaker.config import configure
from otel_breaker.instrumentation import BreakerInstrumentor

set_tracing_disabled(True)  # no export to the OpenAI tracing backend

BACKEND_UP = False
BODY_RUNS = 0


@function_tool
def search(query: str) -> str:
    """Searches the product catalogue."""
    global BODY_RUNS
    BODY_RUNS += 1
    if not BACKEND_UP:
        raise ConnectionError("catalogue backend unreachable")
    return f"3 results for {query!r}"


agent = Agent(name="shop_assistant", instructions="Find products.", tools=[search])


def run_agent(n_calls: int, label: str) -> None:
    model = ScriptedModel(
        [[function_call("search", {"query": "lamps"}, call_id=f"{label}_{i}")] for i in range(n_calls)]
        + [[assistant_message("done")]]
    )
    agent.model = model  # the same agent object: its breakers are kept per agent
    result = Runner.run_sync(agent, "find lamps")
    for item in model.calls[-1].input:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            print(f"  model reads: {item['output'][:110]}")
    print(f"  agent finished: {result.final_output!r}")


def main() -> None:
    BreakerInstrumentor().instrument(frameworks=["openai_agents"])
    # Open after 2 failures; allow a probe after a short cooldown; close after one good probe.
    configure(defaults=CircuitBreakerConfig(failure_threshold=2, recovery_timeout=0.5, success_threshold=1))
    add_global_listener(
        lambda change: print(
            f"  breaker {change.breaker.name} ({change.breaker.agent_name}): "
            f"{change.from_state.value} -> {change.to_state.value}"
        )
    )
    global BACKEND_UP

    print("1) backend down: 4 tool calls")
    run_agent(4, "a")
    print(f"   tool body ran {BODY_RUNS} times (2 failures, then the breaker answered instead)")

    print("2) backend back; cooldown passes; 2 tool calls")
    BACKEND_UP = True
    time.sleep(0.6)
    run_agent(2, "b")
    print(f"   tool body ran {BODY_RUNS} times in total")


if __name__ == "__main__":
    main()
