"""A Strands agent's flaky tool trips its circuit breaker, the model is told why, and the breaker recovers.

Offline: the model is a small scripted implementation of Strands' ``Model`` interface
that asks for the tool a set number of times.
Run:  pip install -e ".[strands]"   (strands-agents)
      (in a clone of this repository; once released: pip install "otel-breaker[strands]")
      python examples/strands_flaky_tool.py
"""

from __future__ import annotations

import json
import logging
import time

from strands import Agent, tool
from strands.models.model import Model

from otel_breaker.breaker import add_global_listener
from otel_breaker.config import load_settings, set_settings
from otel_breaker.instrumentation import BreakerInstrumentor
from otel_breaker.registry import default_registry

BACKEND_UP = False
BODY_RUNS = 0


class ScriptedModel(Model):
    """Asks for ``stock_level`` until the conversation holds ``calls`` tool results, then answers."""

    def __init__(self, calls: int) -> None:
        self.calls = calls

    def update_config(self, **config):
        pass

    def get_config(self):
        return {"model_id": "scripted"}

    async def structured_output(self, output_model, prompt, system_prompt=None, **kwargs):
        raise NotImplementedError
        yield

    async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs):
        results = [b["toolResult"] for m in messages for b in m["content"] if "toolResult" in b]
        if results:
            print(f"    model read: {results[-1]['content'][0]['text'][:150]}")
        yield {"messageStart": {"role": "assistant"}}
        if len(results) < self.calls:
            use = {"toolUse": {"name": "stock_level", "toolUseId": f"call_{len(results) + 1}"}}
            yield {"contentBlockStart": {"start": use}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps({})}}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "tool_use"}}
        else:
            yield {"contentBlockDelta": {"delta": {"text": "Here is what I found."}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}


@tool
def stock_level() -> str:
    """Current stock level of the warehouse."""
    global BODY_RUNS
    BODY_RUNS += 1
    if not BACKEND_UP:
        raise ConnectionError("warehouse service unreachable")
    return "42 units"


def main() -> None:
    global BACKEND_UP
    logging.disable(logging.CRITICAL)  # Strands logs every tool failure with a traceback
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
    BreakerInstrumentor().instrument(frameworks=["strands"])
    add_global_listener(
        lambda change: print(
            f"  breaker {change.breaker.name!r} of agent {change.breaker.agent_name!r}: "
            f"{change.from_state.value} -> {change.to_state.value} ({change.reason})"
        )
    )

    agent = Agent(model=ScriptedModel(calls=4), tools=[stock_level], name="stock-clerk", callback_handler=None)
    print("1) the warehouse service is down; the model calls the tool 4 times:")
    agent("How much stock is left?")
    print(f"   tool body ran {BODY_RUNS} times for 4 calls")

    print("2) the service comes back; after the 1 s cooldown a probe call closes the breaker:")
    BACKEND_UP = True
    agent.model = ScriptedModel(calls=4 + 2)  # the conversation so far holds 4 results; 2 more calls
    time.sleep(1.1)
    answer = str(agent("And now?")).strip()
    (breaker,) = default_registry().find("stock_level")
    print(f"   answer: {answer!r}; tool body ran {BODY_RUNS} times in total; breaker is {breaker.state.value}")
    assert BODY_RUNS == 4 and breaker.state.value == "closed"


if __name__ == "__main__":
    main()
