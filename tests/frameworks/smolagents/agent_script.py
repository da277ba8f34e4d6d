"""An ordinary offline smolagents program, with no breaker code in it.

A scripted model asks a ToolCallingAgent to call a tool whose backend is down
five times, then to answer "done". It prints one JSON line: how often the tool
body ran, the tool results the model read and the final answer, so a test can
see whether the calls were guarded when the program is started with
``OTEL_BREAKER_ENABLED=true`` or through ``opentelemetry-instrument``.
"""

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from smolagents import ToolCallingAgent, tool
from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole, Model
from smolagents.monitoring import LogLevel

BODY_RUNS = [0]
CALLS = 5


@tool
def inventory(sku: str) -> str:
    """Looks up the stock of a product.

    Args:
        sku: the product id
    """
    BODY_RUNS[0] += 1
    raise ConnectionError("inventory service unreachable")


def _text(message):
    content = message.content
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


class ScriptedModel(Model):
    def __init__(self):
        super().__init__(model_id="scripted")
        self.step, self.seen = 0, []

    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kwargs):
        self.seen = [_text(m) for m in messages if m.role == MessageRole.TOOL_RESPONSE]
        self.step += 1
        if self.step <= CALLS:
            name, arguments = "inventory", {"sku": f"A{self.step}"}
        else:
            name, arguments = "final_answer", {"answer": "done"}
        call = ChatMessageToolCall(
            id=f"call_{self.step}",
            type="function",
            function=ChatMessageToolCallFunction(name=name, arguments=arguments),
        )
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])


def main():
    model = ScriptedModel()
    agent = ToolCallingAgent(tools=[inventory], model=model, max_steps=8, verbosity_level=LogLevel.OFF, name="shop")
    final = agent.run("check the stock of five products")
    print(json.dumps({"body_runs": BODY_RUNS[0], "tool_results": model.seen, "final": final}))


if __name__ == "__main__":
    main()
