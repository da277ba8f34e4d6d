"""The shared framework contract, on Semantic Kernel's own auto function calling (offline)."""

from __future__ import annotations

import asyncio
import logging
import pathlib
from typing import Any

from contract import PROMPT, FrameworkContract, Sent, Step, Tool
from loop_contract import LoopContract
from run_contract import RunContract
from scripted_service import ScriptedChatService
from semantic_kernel import Kernel
from semantic_kernel.agents import ChatCompletionAgent
from semantic_kernel.connectors.ai.function_choice_behavior import FunctionChoiceBehavior
from semantic_kernel.contents import AuthorRole, FunctionResultContent
from semantic_kernel.functions import KernelFunctionFromMethod, KernelPlugin, kernel_function

logging.getLogger("semantic_kernel").setLevel(logging.CRITICAL)  # a traceback per failed call


def _function(tool: Tool) -> KernelFunctionFromMethod:
    def body(x: int) -> str:
        return tool(x)

    return KernelFunctionFromMethod(method=kernel_function(body, name=tool.name, description=f"The {tool.name} tool."))


class SemanticKernelDriver:
    """The kernel names a tool ``Plugin-function``; the contract names tools plainly, so the
    driver's functions keep no plugin name in their metadata (their qualified name is then the
    function name). ``test_semantic_kernel.py`` covers ``Plugin-function`` names."""

    framework = "semantic_kernel"
    native_tool_spans = True
    script = pathlib.Path(__file__).with_name("agent_script.py")

    def build(self, tools: list[Tool], steps: list[Step], *, name: str = "assistant", instructions: str = PROMPT):
        turns = [[(s[0], s[1], f"call_{i}")] if isinstance(s, tuple) else s for i, s in enumerate(steps, 1)]
        kernel = Kernel()
        kernel.add_service(ScriptedChatService(turns))
        plugin = KernelPlugin(name="tools", functions=[_function(t) for t in tools])
        for function in plugin.functions.values():
            function.metadata.plugin_name = None
        kernel.plugins[plugin.name] = plugin
        auto = FunctionChoiceBehavior.Auto()
        return ChatCompletionAgent(kernel=kernel, name=name, instructions=instructions, function_choice_behavior=auto)

    def run(self, agent: Any, prompt: str = "go") -> str:
        return str(asyncio.run(agent.get_response(prompt)).message.content)

    def sent(self, agent: Any) -> list[Sent]:
        found = []
        for messages in agent.kernel.get_service().sent:
            system = messages[0].content if messages and messages[0].role == AuthorRole.SYSTEM else None
            results = [str(i.result) for m in messages for i in m.items if isinstance(i, FunctionResultContent)]
            found.append(Sent(system, results))
        return found

    def tools_sent(self, agent: Any) -> list[dict[str, Any]]:
        return agent.kernel.get_service().tools_sent


class TestContract(FrameworkContract, LoopContract, RunContract):
    driver = SemanticKernelDriver()
    guards_unknown_tools = True
    loop_calls = 5  # the kernel stops auto-invoking functions after 5 attempts
    # The kernel sends its 6th request (after 5 attempts) with no functions at all: 4 calls
    # leave a request whose menu shows the budget's answer.
    stubborn_calls = 4


class TestLoopContractUnexpectedArguments(LoopContract):
    """Arguments the function does not take: the kernel answers them itself, before any
    function runs (``Kernel.invoke_function_call``); the loop guard counts that answer."""

    driver = SemanticKernelDriver()
    invalid_arguments = {"y": 1}  # noqa: RUF012
    loop_calls = 5
    # Covered by TestContract:
    test_loop_unknown_tool_name = None
    test_loop_identical_failures_untouched_by_default_guarded_when_counted = None
