"""A CrewAI crew's flaky tool trips its circuit breaker, the model is told why, and the breaker recovers.

Offline: the model is a scripted subclass of CrewAI's own ``BaseLLM`` that asks for the tool.
Run:  pip install -e ".[crewai]"   (crewai)
      (in a clone of this repository; once released: pip install "otel-breaker[crewai]")
      python examples/crewai_flaky_tool.py
"""

from __future__ import annotations

import json
import logging
import os
import time

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("OPENAI_API_KEY", "unused")

from crewai import Agent, Crew, Task
from crewai.llms.base_llm import BaseLLM
from crewai.tools import tool
from pydantic import PrivateAttr

from otel_breaker.breaker import add_global_listener
from otel_breaker.config import load_settings, set_settings
from otel_breaker.instrumentation import BreakerInstrumentor
from otel_breaker.registry import default_registry

BACKEND_UP = False
BODY_RUNS = 0


@tool("weather")
def weather(city: str) -> str:
    """Current weather for a city."""
    global BODY_RUNS
    BODY_RUNS += 1
    if not BACKEND_UP:
        raise ConnectionError("weather service unreachable")
    return f"sunny in {city}"


class ScriptedLLM(BaseLLM):
    """Asks for the weather ``calls`` times with native tool calls, printing what it read back, then answers."""

    calls: int = 4
    _step: int = PrivateAttr(default=0)

    def supports_function_calling(self) -> bool:
        return True

    def call(self, messages, tools=None, callbacks=None, available_functions=None, **kwargs):
        if self._step:
            print(f"    model read: {str(messages[-1].get('content'))[:150]}")
        self._step += 1
        if self._step <= self.calls:
            function = {"name": "weather", "arguments": json.dumps({"city": "Paris"})}
            return [{"id": f"call_{self._step}", "type": "function", "function": function}]
        return "Here is the forecast."

    async def acall(self, *args, **kwargs):
        return self.call(*args, **kwargs)


def main() -> None:
    global BACKEND_UP
    logging.disable(logging.WARNING)  # CrewAI warns that a scripted model has no token counter
    # Open after 2 failed calls; let one probe through 1 second later; one good probe closes it.
    set_settings(
        load_settings(
            {
                "OTEL_BREAKER_FAILURE_THRESHOLD": "2",
                "OTEL_BREAKER_RECOVERY_TIMEOUT": "1",
                "OTEL_BREAKER_SUCCESS_THRESHOLD": "1",
            }
        )
    )
    BreakerInstrumentor().instrument(frameworks=["crewai"])
    add_global_listener(
        lambda change: print(
            f"  breaker {change.breaker.name!r} of agent {change.breaker.agent_name!r}: "
            f"{change.from_state.value} -> {change.to_state.value} ({change.reason})"
        )
    )
    planner = Agent(
        role="planner",
        goal="plan the day",
        backstory="checks the weather first",
        llm=ScriptedLLM(model="scripted", calls=4),
        tools=[weather],
        verbose=False,
    )
    crew = Crew(
        agents=[planner],
        tasks=[Task(description="What's the weather in Paris?", expected_output="a forecast", agent=planner)],
        verbose=False,
    )

    print("1) the weather service is down; the model calls the tool 4 times:")
    crew.kickoff()
    print(f"   tool body ran {BODY_RUNS} times for 4 calls")

    print("2) the service comes back; after the 1 s cooldown a probe call closes the breaker:")
    BACKEND_UP = True
    time.sleep(1.1)
    planner.llm = ScriptedLLM(model="scripted", calls=2)
    answer = crew.kickoff()
    (breaker,) = default_registry().find("weather")
    print(f"   answer: {answer.raw!r}; tool body ran {BODY_RUNS} times in total; breaker is {breaker.state.value}")


if __name__ == "__main__":
    main()
