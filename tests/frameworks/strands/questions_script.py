"""An ordinary offline Strands agent asked three questions, each answered with one healthy
tool call (no otel-breaker import, no OpenTelemetry set-up of its own).

Prints JSON: how often the tool body ran and the final answers.
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
    return f"sunny in {city}"


def main() -> None:
    steps = []
    for city in ("Oslo", "Rome", "Lima"):
        steps += [("weather", {"city": city}), f"sunny in {city}"]
    model = ScriptedModel(steps)
    agent = Agent(model=model, tools=[weather], system_prompt="You help.", name="forecaster", callback_handler=None)
    answers = [str(agent(f"weather in {city}?")).strip() for city in ("Oslo", "Rome", "Lima")]
    print(json.dumps({"body_runs": BODY_RUNS, "answers": answers}))


if __name__ == "__main__":
    main()
