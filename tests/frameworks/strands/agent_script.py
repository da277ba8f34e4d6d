"""An ordinary offline Strands agent whose tool always fails (no otel-breaker import).

Prints JSON: how often the tool body ran, what the model read back, its final answer.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from scripted_model import ScriptedModel
from strands import Agent, tool

BODY_RUNS = 0


@tool
def weather(city: str) -> str:
    """Looks up the weather."""
    global BODY_RUNS
    BODY_RUNS += 1
    raise RuntimeError("weather service down")


def main() -> None:
    model = ScriptedModel([*(("weather", {"city": "Oslo"}) for _ in range(5)), "done"])
    agent = Agent(model=model, tools=[weather], system_prompt="You help.", name="forecaster", callback_handler=None)
    final = str(agent("weather in Oslo?")).strip()
    seen = model.requests[-1]["tool_results"]
    print(json.dumps({"body_runs": BODY_RUNS, "tool_results": seen, "final": final}))


if __name__ == "__main__":
    main()
