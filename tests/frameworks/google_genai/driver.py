"""The contract driver for Google GenAI: the real client's automatic function calling
against the local fake of the Gemini API (fake_gemini.py).

google-genai has no agent object: the "agent" here is what a request is made with
(a new client, a scripted model name, the config with the Python functions), and
running it is one ``client.models.generate_content`` call, which runs every
function call the model makes before it answers.
"""

import atexit
import pathlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from contract import PROMPT, Sent, Step, Tool
from fake_gemini import FakeGemini, declarations, instructions_of, tool_results
from google import genai
from google.genai import types

#: Far above any contract scenario's calls (the SDK's default stops after 10 model calls).
MAX_REMOTE_CALLS = 64

_server: FakeGemini | None = None


def server() -> FakeGemini:
    """The fake Gemini API every driver of this process talks to (started once, 127.0.0.1 only)."""
    global _server
    if _server is None:
        _server = FakeGemini().start()
        atexit.register(_server.stop)
    return _server


def client(*, vertexai: bool = False) -> genai.Client:
    """A new client pointed at the fake API (the Vertex AI client with an API key: express mode)."""
    options = types.HttpOptions(base_url=server().base_url)
    return genai.Client(api_key="test", vertexai=vertexai or None, http_options=options)


def function(spec: Tool) -> Callable[[int], str]:
    """A Python function named after the tool, the way users hand AFC their tools."""

    def body(x: int) -> str:
        return spec(x)

    body.__name__ = spec.name
    body.__doc__ = f"The {spec.name} tool."
    return body


def config(functions: list[Any], instructions: Any = PROMPT, **more: Any) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(
        system_instruction=instructions,
        tools=functions,
        automatic_function_calling=types.AutomaticFunctionCallingConfig(maximum_remote_calls=MAX_REMOTE_CALLS),
        **more,
    )


@dataclass
class Request:
    """What one request is made with: its own client, scripted model and config."""

    client: genai.Client
    model: str
    config: types.GenerateContentConfig


class GoogleGenAIDriver:
    framework = "google_genai"
    names_agents = False
    script = pathlib.Path(__file__).with_name("agent_script.py")

    def build(self, tools: list[Tool], steps: list[Step], *, name: str = "assistant", instructions: str = PROMPT):
        return Request(client(), server().script(steps), config([function(t) for t in tools], instructions))

    def run(self, agent: Request, prompt: str = "go") -> str:
        response = agent.client.models.generate_content(model=agent.model, contents=prompt, config=agent.config)
        return (response.text or "").strip()

    def sent(self, agent: Request) -> list[Sent]:
        return [Sent(instructions_of(body), tool_results(body)) for body in server().requests(agent.model)]

    def tools_sent(self, agent: Request) -> list[dict[str, Any]]:
        return [declarations(body) for body in server().requests(agent.model)]
