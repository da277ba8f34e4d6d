"""Drives ``dspy.ReAct`` offline with DSPy's own scripted model, ``DummyLM``."""

from __future__ import annotations

import pathlib
import re
import textwrap
from typing import Any

import dspy
from contract import PROMPT, Sent, Step, Tool
from dspy.utils import DummyLM

_LISTED = re.compile(r"^\s*\(\d+\) (\w+), whose description is (.*)$", re.M)
_OBSERVATION = re.compile(r"\[\[ ## observation_\d+ ## \]\]\n(.*?)(?=\n\n\[\[ ## |\n\nRespond with |\Z)", re.S)


def dspy_tool(tool: Tool) -> dspy.Tool:
    def fn(x: int) -> str:
        return tool(x)

    fn.__name__ = tool.name
    fn.__doc__ = f"Looks up {tool.name} for x."
    return dspy.Tool(fn, name=tool.name)


def answers(steps: list[Step]) -> list[dict[str, Any]]:
    """DummyLM answers: one ReAct step per tool call; a final text is ReAct's
    ``finish`` step and then the extraction of the answer."""
    scripted: list[dict[str, Any]] = []
    for step in steps:
        if isinstance(step, str):
            scripted.append({"next_thought": "finish", "next_tool_name": "finish", "next_tool_args": {}})
            scripted.append({"reasoning": "all done", "answer": step})
        else:
            name, arguments = step
            scripted.append({"next_thought": "call it", "next_tool_name": name, "next_tool_args": arguments})
    return scripted


def _error_line(observation: str) -> str:
    """An observation, with the traceback ReAct writes for a tool's exception cut to the
    exception's own line: the stack frames it lists (the first five from the loop) include
    any wrapper around ``Tool.__call__``, so they are not what the contract compares."""
    observation = observation.strip()
    if "\nTraceback (most recent call last):" not in observation:
        return observation
    head, _, rest = observation.partition("\n")
    return f"{head} {rest.strip().splitlines()[-1]}"


def _instructions(react: dspy.ReAct, system: str) -> str:
    """The user's instructions as the model read them: ReAct's fixed text taken out."""
    objective = system.split("your objective is: ", 1)[1].split("\n")[1:]
    text = "\n".join(line[8:] if line.startswith(" " * 8) else line for line in objective)
    base = textwrap.dedent(react.react.signature.instructions)
    return PROMPT + text[len(base) :] if text.startswith(base) else text


class DSPyDriver:
    framework = "dspy"
    script = pathlib.Path(__file__).with_name("agent_script.py")

    def build(self, tools: list[Tool], steps: list[Step], *, name: str = "assistant", instructions: str = PROMPT):
        signature = dspy.Signature("question -> answer", instructions)
        react = dspy.ReAct(signature, tools=[dspy_tool(t) for t in tools], max_iters=len(steps) + 2)
        react.name = name
        react.lm_under_test = DummyLM(answers(steps))
        return react

    def run(self, agent: Any, prompt: str = "go") -> str:
        with dspy.context(lm=agent.lm_under_test):
            return agent(question=prompt).answer

    async def arun(self, agent: Any, prompt: str = "go") -> str:
        with dspy.context(lm=agent.lm_under_test):
            return (await agent.acall(question=prompt)).answer

    def sent(self, agent: Any) -> list[Sent]:
        sent = []
        for entry in agent.lm_under_test.history:
            system, user = entry["messages"][0]["content"], entry["messages"][-1]["content"]
            if "next_tool_name" not in system:
                continue  # the final answer extraction, not a step of the loop
            sent.append(Sent(_instructions(agent, system), [_error_line(r) for r in _OBSERVATION.findall(user)]))
        return sent

    def tools_sent(self, agent: Any) -> list[dict[str, Any]]:
        """The tools each step's instructions list (name -> its line, without the number)."""
        menus = []
        for entry in agent.lm_under_test.history:
            system = entry["messages"][0]["content"]
            if "next_tool_name" in system:
                menus.append({name: rest for name, rest in _LISTED.findall(system) if name != "finish"})
        return menus
