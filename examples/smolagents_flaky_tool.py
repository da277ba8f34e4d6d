"""A smolagents agent's flaky tool trips its circuit breaker, the model is told why, and the breaker recovers.

Offline: the model is a scripted subclass of smolagents' own ``Model`` that asks for the tool.
Run:  pip install -e ".[smolagents]"   (smolagents)
      (in a clone of this repository; once released: pip install "otel-breaker[smolagents]")
      python examples/smolagents_flaky_tool.py
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from smolagents import ToolCallingAgent, tool
from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole, Model
from smolagents.monitoring import LogLevel

from otel_breaker.breaker import add_global_listener
from otel_breaker.config import load_settings, set_settings
from otel_breaker.instrumentation import BreakerInstrumentor
from otel_breaker.registry import default_registry

BACKEND_UP = False
BODY_RUNS = 0


@tool
def weather(city: str) -> str:
    """Current weather for a city.

    Args:
        city: the city name
    """
    global BODY_RUNS
    BODY_RUNS += 1
    if not BACKEND_UP:
        raise ConnectionError("weather service unreachable")
    return f"sunny in {city}"


class ScriptedModel(Model):
    """Asks for the weather ``calls`` times, printing what it read back, then answers."""

    def __init__(self, calls: int):
        super().__init__(model_id="scripted")
        self.calls, self.step = calls, 0

    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kwargs):
        if self.step:
            content = messages[-1].content
            text = " ".join(p.get("text", "") for p in content) if isinstance(content, list) else content or ""
            lines = text.strip().splitlines()
            print(f"    model read: {lines[1] if text.startswith('Error') else lines[-1]}")
        self.step += 1
        name, arguments = (
            ("weather", {"city": "Paris"}) if self.step <= self.calls else ("final_answer", {"answer": "ok"})
        )
        call = ChatMessageToolCall(
            id=f"call_{self.step}",
            type="function",
            function=ChatMessageToolCallFunction(name=name, arguments=arguments),
        )
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])


def main() -> None:
    # Open after 2 consecutive failures; try one probe call 1 second later.
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2", "OTEL_BREAKER_RECOVERY_TIMEOUT": "1"}))
    BreakerInstrumentor().instrument(frameworks=["smolagents"])
    add_global_listener(
        lambda change: print(
            f"  breaker {change.breaker.name!r} of agent {change.breaker.agent_name!r}: "
            f"{change.from_state.value} -> {change.to_state.value} ({change.reason})"
        )
    )
    global BACKEND_UP

    agent = ToolCallingAgent(
        tools=[weather], model=ScriptedModel(calls=4), verbosity_level=LogLevel.OFF, name="planner"
    )
    print("1) the weather service is down; the model calls the tool 4 times:")
    agent.run("What's the weather in Paris?")
    print(f"   tool body ran {BODY_RUNS} times for 4 calls")

    print("2) the service comes back; after the 1 s cooldown a probe call closes the breaker:")
    BACKEND_UP = True
    time.sleep(1.1)
    agent.model = ScriptedModel(calls=2)
    agent.run("And now?", reset=False)
    (breaker,) = default_registry().find("weather")
    print(f"   tool body ran {BODY_RUNS} times in total; breaker is {breaker.state.value}")


if __name__ == "__main__":
    main()
