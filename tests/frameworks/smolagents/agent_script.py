"""An ordinary offline smolagents program, with no breaker code in it.

A scripted model asks a ToolCallingAgent and a CodeAgent to call a tool whose
backend is down four times each, then to answer "done". It prints one JSON line:
how often the tool body ran and what the model read back, so a test can see
whether the calls were guarded when the program is started with
``OTEL_BREAKER_ENABLED=true`` or through ``opentelemetry-instrument``.
"""

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from smolagents import CodeAgent, ToolCallingAgent, tool
from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole, Model
from smolagents.monitoring import LogLevel

BODY_RUNS = {"tool_calling": 0, "code": 0}
CURRENT = ["tool_calling"]


@tool
def inventory(sku: str) -> str:
    """Looks up the stock of a product.

    Args:
        sku: the product id
    """
    BODY_RUNS[CURRENT[0]] += 1
    raise ConnectionError("inventory service unreachable")


def _text(message):
    content = message.content
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


class ScriptedModel(Model):
    def __init__(self, code: bool, calls: int = 4):
        super().__init__(model_id="scripted")
        self.code, self.calls, self.step, self.seen = code, calls, 0, []

    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kwargs):
        if self.step:
            self.seen.append(_text(messages[-1]))
        self.step += 1
        if self.code:
            body = f'inventory(sku="A{self.step}")' if self.step <= self.calls else 'final_answer("done")'
            return ChatMessage(role=MessageRole.ASSISTANT, content=f"Thought: go\n<code>\n{body}\n</code>")
        if self.step <= self.calls:
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
    report = {}
    for kind, agent_class in (("tool_calling", ToolCallingAgent), ("code", CodeAgent)):
        CURRENT[0] = kind
        model = ScriptedModel(code=kind == "code")
        agent = agent_class(tools=[inventory], model=model, max_steps=8, verbosity_level=LogLevel.OFF, name="shop")
        final = agent.run("check the stock of four products")
        report[kind] = {"final": final, "body_runs": BODY_RUNS[kind], "model_saw": model.seen}
    print(json.dumps({"smolagents_report": report}))


if __name__ == "__main__":
    main()
