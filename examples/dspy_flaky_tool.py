"""A DSPy ReAct agent's flaky tool trips its circuit breaker, the model is told why, and the breaker recovers.

Offline: the model is DSPy's own scripted ``DummyLM``.
Run:  pip install -e ".[dspy]"   (dspy)
      (in a clone of this repository; once released: pip install "otel-breaker[dspy]")
      python examples/dspy_flaky_tool.py
"""

from __future__ import annotations

import time

import dspy
from dspy.utils import DummyLM

from otel_breaker.config import load_settings, set_settings
from otel_breaker.instrumentation import BreakerInstrumentor
from otel_breaker.registry import default_registry

BACKEND_UP = False
BODY_RUNS = 0


def weather(city: str) -> str:
    """Current weather for a city."""
    global BODY_RUNS
    BODY_RUNS += 1
    if not BACKEND_UP:
        raise ConnectionError("weather service unreachable")
    return f"sunny in {city}"


def script(calls: int) -> DummyLM:
    """Asks for the weather ``calls`` times, then finishes and answers."""
    steps = [{"next_thought": "ask", "next_tool_name": "weather", "next_tool_args": {"city": "Paris"}}] * calls
    steps += [{"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {}}]
    return DummyLM([*steps, {"reasoning": "done", "answer": "ok"}])


def observations(prediction: dspy.Prediction) -> None:
    for key, value in prediction.trajectory.items():
        if key.startswith("observation_") and value != "Completed.":
            text = str(value)
            print(f"    model read: {text.splitlines()[0] if 'unavailable' in text else text.splitlines()[-1]}")


def main() -> None:
    # Open after 2 consecutive failures; try one probe call 1 second later.
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2", "OTEL_BREAKER_RECOVERY_TIMEOUT": "1"}))
    BreakerInstrumentor().instrument(frameworks=["dspy"])
    global BACKEND_UP

    agent = dspy.ReAct("question -> answer", tools=[weather])
    agent.name = "planner"  # the breaker scope and gen_ai.agent.name
    print("1) the weather service is down; the model calls the tool 4 times:")
    with dspy.context(lm=script(4)):
        observations(agent(question="What's the weather in Paris?"))
    print(f"   tool body ran {BODY_RUNS} times for 4 calls")

    print("2) the service comes back; after the 1 s cooldown a probe call closes the breaker:")
    BACKEND_UP = True
    time.sleep(1.1)
    with dspy.context(lm=script(2)):
        observations(agent(question="And now?"))
    (breaker,) = default_registry().find("weather")
    print(f"   tool body ran {BODY_RUNS} times in total; breaker is {breaker.state.value}")


if __name__ == "__main__":
    main()
