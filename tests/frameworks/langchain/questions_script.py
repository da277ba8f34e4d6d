"""An ordinary offline LangGraph agent asked three questions, each answered with one healthy
tool call (no otel-breaker import, no OpenTelemetry set-up of its own).

Prints JSON: how often the tool body ran and the final answers.
"""

import json
import warnings

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

warnings.filterwarnings("ignore")
from langgraph.prebuilt import ToolNode, create_react_agent  # noqa: E402

BODY_RUNS = 0
CITIES = ("Oslo", "Rome", "Lima")


@tool
def weather(city: str) -> str:
    """Looks up the weather."""
    global BODY_RUNS
    BODY_RUNS += 1
    return f"sunny in {city}"


class ScriptedModel(FakeMessagesListChatModel):
    def bind_tools(self, tools, **kwargs):
        return self


def main() -> None:
    responses = []
    for i, city in enumerate(CITIES):
        call = {"name": "weather", "args": {"city": city}, "id": f"c{i}"}
        responses += [AIMessage("", tool_calls=[call]), AIMessage(f"sunny in {city}")]
    graph = create_react_agent(ScriptedModel(responses=responses), ToolNode([weather], handle_tool_errors=True))
    answers = []
    for i, city in enumerate(CITIES):
        config = {"configurable": {"thread_id": f"q{i}"}}
        result = graph.invoke({"messages": [HumanMessage(f"weather in {city}?")]}, config)
        answers.append(result["messages"][-1].content)
    print(json.dumps({"body_runs": BODY_RUNS, "answers": answers}))


if __name__ == "__main__":
    main()
