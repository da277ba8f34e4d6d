"""A Haystack Agent's flaky tool trips its circuit breaker, the model is told why, and the breaker recovers.

Offline: the model is Haystack's own ``MockChatGenerator`` with a scripted reply function.
Run:  pip install -e ".[haystack]"   (haystack-ai)
      (in a clone of this repository; once released: pip install "otel-breaker[haystack]")
      python examples/haystack_flaky_tool.py
"""

from __future__ import annotations

import logging
import os
import time

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

from haystack.components.agents import Agent
from haystack.components.generators.chat.mock import MockChatGenerator
from haystack.dataclasses import ChatMessage, ToolCall
from haystack.tools import create_tool_from_function

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


class ScriptedModel:
    """Asks for the weather ``calls`` times, printing what it read back, then answers."""

    def __init__(self, calls: int) -> None:
        self.calls = calls

    def __call__(self, messages: list[ChatMessage]) -> ChatMessage:
        results = [m.tool_call_result.result for m in messages if m.tool_call_result is not None]
        if results:
            print(f"    model read: {results[-1][:110]}")
        if len(results) < self.calls:
            return ChatMessage.from_assistant(tool_calls=[ToolCall(tool_name="weather", arguments={"city": "Paris"})])
        return ChatMessage.from_assistant("ok")


def main() -> None:
    logging.getLogger("haystack").setLevel(logging.CRITICAL)  # Haystack logs every failed tool call
    # Open after 2 consecutive failures; try one probe call 1 second later.
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2", "OTEL_BREAKER_RECOVERY_TIMEOUT": "1"}))
    BreakerInstrumentor().instrument(frameworks=["haystack"])
    global BACKEND_UP

    model = ScriptedModel(calls=4)
    agent = Agent(chat_generator=MockChatGenerator(response_fn=model), tools=[create_tool_from_function(weather)])
    print("1) the weather service is down; the model calls the tool 4 times:")
    agent.run(messages=[ChatMessage.from_user("What's the weather in Paris?")])
    print(f"   tool body ran {BODY_RUNS} times for 4 calls")

    print("2) the service comes back; after the 1 s cooldown a probe call closes the breaker:")
    BACKEND_UP = True
    time.sleep(1.1)
    model.calls = 2
    agent.run(messages=[ChatMessage.from_user("And now?")])
    (breaker,) = default_registry().find("weather")
    print(f"   tool body ran {BODY_RUNS} times in total; breaker is {breaker.state.value}")


if __name__ == "__main__":
    main()
