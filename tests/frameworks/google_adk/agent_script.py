"""An ordinary offline Google ADK agent whose tool always fails (no otel-breaker import).

Prints JSON: how often the tool body ran, what the model read back, its final answer.
"""

import asyncio
import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
logging.disable(logging.WARNING)

from google.adk.agents import LlmAgent  # noqa: E402
from scripted_model import ScriptedLlm, error_response, run  # noqa: E402

BODY_RUNS = 0


def weather(city: str) -> str:
    """Looks up the weather."""
    global BODY_RUNS
    BODY_RUNS += 1
    raise RuntimeError("weather service down")


def main() -> None:
    model = ScriptedLlm(steps=[*(("weather", {"city": "Oslo"}) for _ in range(5)), "done"], requests=[])
    agent = LlmAgent(
        name="forecaster", model=model, instruction="You help.", tools=[weather], on_tool_error_callback=error_response
    )
    final = asyncio.run(run(agent, "weather in Oslo?"))
    seen = model.requests[-1]["tool_results"]
    print(json.dumps({"body_runs": BODY_RUNS, "tool_results": seen, "final": final}))


if __name__ == "__main__":
    main()
