"""A PydanticAI agent's flaky tool trips its circuit breaker, the model is told why, and the breaker recovers.

Offline: the model is PydanticAI's own FunctionModel, scripted to call the tool; no API key needed.
Run:  pip install -e ".[pydantic-ai]"   (pydantic-ai-slim)
      (in a clone of this repository; once released: pip install "otel-breaker[pydantic-ai]")
      python examples/pydantic_ai_flaky_tool.py
"""

from __future__ import annotations

import time

from pydantic_ai import Agent
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from otel_breaker import CircuitBreakerConfig
from otel_breaker.breaker import add_global_listener
from otel_breaker.config import configure
from otel_breaker.instrumentation import BreakerInstrumentor

BACKEND_UP = False
BODY_RUNS = 0

agent = Agent(name="shop_assistant", instructions="Find products.")


@agent.tool_plain
def search(query: str) -> str:
    """Searches the product catalogue."""
    global BODY_RUNS
    BODY_RUNS += 1
    if not BACKEND_UP:
        # A plain exception ends a PydanticAI run; ToolFailed would let it carry on. Either way
        # the breaker counts it, and once open it answers with a failed tool result instead.
        raise ConnectionError("catalogue backend unreachable")
    return f"3 results for {query!r}"


def scripted(n_calls: int, label: str) -> FunctionModel:
    """Calls ``search`` ``n_calls`` times, then answers "done" (printing what it read)."""

    def respond(messages, info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
        if len(returns) < n_calls:
            call = ToolCallPart("search", {"query": "lamps"}, tool_call_id=f"{label}_{len(returns)}")
            return ModelResponse(parts=[call])
        for part in returns:
            print(f"  model reads [{part.outcome}] {str(part.content)[:110]}")
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(respond)


def run_agent(n_calls: int, label: str) -> None:
    try:
        print(f"  agent finished: {agent.run_sync('find lamps', model=scripted(n_calls, label)).output!r}")
    except ConnectionError as exc:
        print(f"  run ended by the tool's exception: {exc}")
    except UnexpectedModelBehavior as exc:
        # A rejection costs the tool's retry budget as its failure would have: a model that keeps
        # calling an open tool ends its run where it would without otel-breaker.
        print(f"  run ended by PydanticAI's retry limit: {str(exc).split('.')[0]}")


def main() -> None:
    BreakerInstrumentor().instrument(frameworks=["pydantic_ai"])
    # Open after 2 failures; allow a probe after a short cooldown; close after one good probe.
    configure(defaults=CircuitBreakerConfig(failure_threshold=2, recovery_timeout=0.5, success_threshold=1))
    add_global_listener(
        lambda change: print(
            f"  breaker {change.breaker.name} ({change.breaker.agent_name}): "
            f"{change.from_state.value} -> {change.to_state.value}"
        )
    )
    global BACKEND_UP

    print("1) backend down: three runs of 2 tool calls each")
    for run in "abc":
        run_agent(2, run)
    print(f"   tool body ran {BODY_RUNS} times (2 failures, then the breaker answered instead)")

    print("2) backend back; cooldown passes; 2 tool calls")
    BACKEND_UP = True
    time.sleep(0.6)
    run_agent(2, "d")
    print(f"   tool body ran {BODY_RUNS} times in total")


if __name__ == "__main__":
    main()
