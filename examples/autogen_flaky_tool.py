"""An AutoGen AssistantAgent's flaky tool trips its circuit breaker, the model is told why, and the breaker recovers.

Offline: the model is autogen-ext's ReplayChatCompletionClient, scripted to call the tool.
Run:  pip install -e ".[autogen]"   (autogen-core, autogen-agentchat, autogen-ext)
      (in a clone of this repository; once released: pip install "otel-breaker[autogen]")
      python examples/autogen_flaky_tool.py
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import warnings

os.environ.setdefault("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.messages import ToolCallExecutionEvent
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, RequestUsage
from autogen_core.tools import FunctionTool
from autogen_ext.models.replay import ReplayChatCompletionClient

from otel_breaker.breaker import add_global_listener
from otel_breaker.config import load_settings, set_settings
from otel_breaker.instrumentation import BreakerInstrumentor
from otel_breaker.registry import default_registry

logging.getLogger("autogen_core").setLevel(logging.ERROR)
warnings.filterwarnings("ignore")

BACKEND_UP = False
BODY_RUNS = 0
MODEL_INFO = {
    "vision": False,
    "function_calling": True,
    "json_output": False,
    "family": "unknown",
    "structured_output": False,
}


async def weather(city: str) -> str:
    """Current weather for a city."""
    global BODY_RUNS
    BODY_RUNS += 1
    if not BACKEND_UP:
        raise ConnectionError("weather service unreachable")
    return f"sunny in {city}"


def scripted_model(calls: int) -> ReplayChatCompletionClient:
    """Asks for the weather ``calls`` times, then answers."""
    usage = RequestUsage(prompt_tokens=0, completion_tokens=0)
    script = [
        CreateResult(
            finish_reason="function_calls",
            usage=usage,
            cached=False,
            content=[FunctionCall(id=f"call_{i}", name="weather", arguments=json.dumps({"city": "Paris"}))],
        )
        for i in range(calls)
    ]
    return ReplayChatCompletionClient([*script, "ok"], model_info=MODEL_INFO)


async def ask(calls: int) -> None:
    agent = AssistantAgent(
        "planner",
        model_client=scripted_model(calls),
        tools=[FunctionTool(weather, description="weather")],
        max_tool_iterations=calls + 1,
    )
    async for event in agent.run_stream(task="What's the weather in Paris?"):
        if isinstance(event, ToolCallExecutionEvent):
            for result in event.content:
                print(f"    model read ({'error' if result.is_error else 'result'}): {result.content}")


async def main() -> None:
    # Open after 2 consecutive failures; try one probe call 1 second later. Each question below builds a
    # new agent, so the breaker is shared per process (the default scope keeps one per agent).
    set_settings(
        load_settings(
            {
                "OTEL_BREAKER_FAILURE_THRESHOLD": "2",
                "OTEL_BREAKER_RECOVERY_TIMEOUT": "1",
                "OTEL_BREAKER_SCOPE": "process",
            }
        )
    )
    BreakerInstrumentor().instrument(frameworks=["autogen"])
    add_global_listener(
        lambda change: print(
            f"  breaker {change.breaker.name!r}: {change.from_state.value} -> {change.to_state.value} ({change.reason})"
        )
    )
    global BACKEND_UP

    print("1) the weather service is down; the model calls the tool 4 times:")
    await ask(4)
    print(f"   tool body ran {BODY_RUNS} times for 4 calls")

    print("2) the service comes back; after the 1 s cooldown a probe call closes the breaker:")
    BACKEND_UP = True
    time.sleep(1.1)
    await ask(2)
    (breaker,) = default_registry().find("weather")
    print(f"   tool body ran {BODY_RUNS} times in total; breaker is {breaker.state.value}")


if __name__ == "__main__":
    asyncio.run(main())
