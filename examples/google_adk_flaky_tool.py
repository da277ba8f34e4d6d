"""A Google ADK agent's flaky tool trips its circuit breaker, the model is told why, and the breaker recovers.

Offline: the model is a small scripted ``BaseLlm`` that asks for the tool a set number
of times. ADK hands a tool's exception to ``on_tool_error_callback``; this agent turns
it into an error response for the model, as production agents usually do.
Run:  pip install -e ".[google-adk]"   (google-adk)
      (in a clone of this repository; once released: pip install "otel-breaker[google-adk]")
      python examples/google_adk_flaky_tool.py
"""

from __future__ import annotations

import asyncio
import logging
import time

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types

from otel_breaker.breaker import add_global_listener
from otel_breaker.config import load_settings, set_settings
from otel_breaker.instrumentation import BreakerInstrumentor
from otel_breaker.registry import default_registry

BACKEND_UP = False
BODY_RUNS = 0


class ScriptedLlm(BaseLlm):
    """Asks for ``stock_level`` until the conversation holds ``calls`` tool results, then answers."""

    model: str = "scripted"
    calls: int = 4

    async def generate_content_async(self, llm_request, stream=False):
        results = [
            p.function_response.response for c in llm_request.contents for p in c.parts or [] if p.function_response
        ]
        if results:
            print(f"    model read: {str(results[-1])[:150]}")
        if len(results) < self.calls:
            part = types.Part.from_function_call(name="stock_level", args={})
        else:
            part = types.Part.from_text(text="Here is what I found.")
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


def stock_level() -> str:
    """Current stock level of the warehouse."""
    global BODY_RUNS
    BODY_RUNS += 1
    if not BACKEND_UP:
        raise ConnectionError("warehouse service unreachable")
    return "42 units"


def tool_error(tool, args, tool_context, error):
    return {"error": f"{type(error).__name__}: {error}"}


async def ask(runner: InMemoryRunner, session_id: str, text: str) -> str:
    message = types.Content(role="user", parts=[types.Part.from_text(text=text)])
    answer = ""
    async for event in runner.run_async(user_id="user", session_id=session_id, new_message=message):
        for part in (event.content.parts if event.content else None) or []:
            answer = part.text or answer
    return answer


async def main() -> None:
    global BACKEND_UP
    logging.disable(logging.WARNING)
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
    BreakerInstrumentor().instrument(frameworks=["google_adk"])
    add_global_listener(
        lambda change: print(
            f"  breaker {change.breaker.name!r} of agent {change.breaker.agent_name!r}: "
            f"{change.from_state.value} -> {change.to_state.value} ({change.reason})"
        )
    )
    model = ScriptedLlm(calls=4)
    agent = LlmAgent(
        name="stock_clerk",
        model=model,
        instruction="Report the stock level.",
        tools=[stock_level],
        on_tool_error_callback=tool_error,
    )
    runner = InMemoryRunner(agent=agent, app_name="warehouse")
    session = await runner.session_service.create_session(app_name="warehouse", user_id="user")

    print("1) the warehouse service is down; the model calls the tool 4 times:")
    await ask(runner, session.id, "How much stock is left?")
    print(f"   tool body ran {BODY_RUNS} times for 4 calls")

    print("2) the service comes back; after the 1 s cooldown a probe call closes the breaker:")
    BACKEND_UP = True
    model.calls = 4 + 2  # the conversation holds 4 results; 2 more calls
    time.sleep(1.1)
    answer = await ask(runner, session.id, "And now?")
    (breaker,) = default_registry().find("stock_level")
    print(f"   answer: {answer!r}; tool body ran {BODY_RUNS} times in total; breaker is {breaker.state.value}")
    assert BODY_RUNS == 4 and breaker.state.value == "closed"


if __name__ == "__main__":
    asyncio.run(main())
