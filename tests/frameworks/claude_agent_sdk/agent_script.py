"""An ordinary offline Claude Agent SDK program whose in-process tool always fails (no
otel-breaker import): three requests, each a new client and a new in-process server, each
calling the tool three times, against the local fake of the Messages API.

Prints JSON: how often the tool body ran, what the model read back in each request, and
whether each result reached it as an error.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from driver import Tool, ask, call, options, server
from fake_messages_api import FakeMessagesAPI

REQUESTS = 3
CALLS_PER_REQUEST = 3


def main() -> None:
    api = FakeMessagesAPI().start()
    tool = Tool.failing("weather")
    read, flagged, finals = [], [], []
    try:
        for request in range(REQUESTS):
            steps = [call("weather", x=request * CALLS_PER_REQUEST + i) for i in range(CALLS_PER_REQUEST)]
            script = api.play([*steps, "done"])
            finals.append(ask(options(api.url, {"tools": server([tool])})))
            read.append(script.requests[-1].tool_results)
            flagged.append(script.requests[-1].errors)
    finally:
        api.stop()
    print(json.dumps({"body_runs": tool.runs, "tool_results": read, "errors": flagged, "finals": finals}))


if __name__ == "__main__":
    main()
