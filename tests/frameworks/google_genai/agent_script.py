"""An ordinary offline google-genai program whose function always fails (no otel-breaker import).

The model is the local fake of the Gemini API (fake_gemini.py), started here on
127.0.0.1. Prints JSON: how often the function body ran, what the model read back,
its final answer.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from fake_gemini import FakeGemini, tool_results
from google import genai
from google.genai import types

BODY_RUNS = 0


def weather(city: str) -> str:
    """Looks up the weather."""
    global BODY_RUNS
    BODY_RUNS += 1
    raise RuntimeError("weather service down")


def main() -> None:
    server = FakeGemini().start()
    try:
        model = server.script([*(("weather", {"city": "Oslo"}) for _ in range(5)), "done"])
        client = genai.Client(api_key="test", http_options=types.HttpOptions(base_url=server.base_url))
        config = types.GenerateContentConfig(system_instruction="You help.", tools=[weather])
        response = client.models.generate_content(model=model, contents="weather in Oslo?", config=config)
        seen = tool_results(server.requests(model)[-1])
    finally:
        server.stop()
    print(json.dumps({"body_runs": BODY_RUNS, "tool_results": seen, "final": (response.text or "").strip()}))


if __name__ == "__main__":
    main()
