"""The scripted model and the agent loop around it.

The model is a fixed policy, written down in :class:`ScriptedModel`, so every
figure the demo prints can be traced to a rule rather than to a language
model's mood. The loop charges each model turn the tokens of what it was sent
(:func:`turn_tokens`) and runs each tool call through ``invoke``: directly, or
through the library's guard.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from otel_breaker.degrade import STATUS_HEADER
from otel_breaker.simulation.world import (
    FETCH,
    MAX_ATTEMPTS,
    SEARCH_TOOLS,
    THINK_SECONDS,
    TOOL_DEFINITION_TOKENS,
    TOOLS,
    World,
    outage,
    round_trip_tokens,
    text_tokens,
)

SYSTEM_PROMPT = "You are a research agent. For each question: search, fetch the top page, then answer."

Invoke = Callable[[str, Callable[[str], str], str], tuple[str, Any]]
"""``invoke(tool, fn, query) -> (outcome, value)``: outcome ``ok``, ``failed`` or ``rejected``."""


@dataclass(frozen=True)
class Turn:
    """What one model request carries."""

    menu: tuple[str, ...]
    """The tools offered to the model, by name."""
    system_prompt: str
    """The system prompt, with the tool-status block when the library added one."""
    open_tools: frozenset[str] | None = None
    """The tools whose breakers were open when the request was built (observed
    for checks, not shown to the model); None when not observed."""


def full_menu() -> Turn:
    """A request with every tool and the plain system prompt."""
    return Turn(TOOLS, SYSTEM_PROMPT)


def turn_tokens(step: int, turn: Turn) -> tuple[int, int]:
    """(input, output) tokens of one model turn at question ``step``:
    :func:`~otel_breaker.simulation.world.round_trip_tokens`, less the
    definitions of tools missing from the menu, plus whatever the system prompt
    carries beyond :data:`SYSTEM_PROMPT` (the tool-status block)."""
    tokens_in, tokens_out = round_trip_tokens(step)
    tokens_in -= TOOL_DEFINITION_TOKENS * (len(TOOLS) - len(turn.menu))
    extra = turn.system_prompt[len(SYSTEM_PROMPT) :] if turn.system_prompt.startswith(SYSTEM_PROMPT) else ""
    return tokens_in + text_tokens(extra.strip()), tokens_out


@dataclass
class Question:
    """What the model knows while it works on one question (it forgets it after)."""

    given_up: set[str] = field(default_factory=set)
    current: str | None = None
    """The search tool the model used last."""
    failures: int = 0
    named: tuple[str, ...] = ()
    found: bool = False
    fetched: bool = False


_STATUS_LINE = re.compile(r"^- '(?P<tool>[^']+)'(?: on server '[^']*')? \((?P<state>open|half-open)\):", re.MULTILINE)


class ScriptedModel:
    """The demo's model. Its whole policy, per question:

    1. It searches with the first of ``web_search``, ``backup_search`` that is
       on the menu it was sent, that the tool-status block in its system prompt
       (if there is one) does not list as *open*, and that it has not given up
       on for this question. It keeps using a tool until it gives it up; after a
       rejection it tries the alternative the rejection names first. A tool the
       block lists as *half-open* ("one trial call may be made now") may be used.
    2. A failed call is retried until :data:`MAX_ATTEMPTS` failures; then it
       gives the tool up for this question.
    3. A rejection: it gives the tool up; when the rejection names no
       alternative it reports the capability degraded instead of searching on.
    4. With a search result it fetches the top page (if ``fetch_page`` is on the
       menu), then writes the answer: one more turn. With nothing left to search
       with, it writes the answer (degraded) in the turn it finds that out.
    5. It remembers nothing between questions: what it knows of broken tools
       comes from the menu, the status block and this question's results.
    """

    @staticmethod
    def listed_open(system_prompt: str) -> frozenset[str]:
        """Tools the tool-status block in ``system_prompt`` lists as open."""

        if STATUS_HEADER not in system_prompt:
            return frozenset()
        block = system_prompt[system_prompt.index(STATUS_HEADER) :]
        return frozenset(m["tool"] for m in _STATUS_LINE.finditer(block) if m["state"] == "open")

    def next_action(self, turn: Turn, question: Question) -> str | None:
        """The tool the model calls in ``turn``, or None: it writes the answer."""
        if question.found:
            return FETCH if not question.fetched and FETCH in turn.menu else None
        avoided = self.listed_open(turn.system_prompt)
        for tool in (question.current, *question.named, *SEARCH_TOOLS):
            if tool is not None and tool in turn.menu and tool not in avoided and tool not in question.given_up:
                return tool
        return None


@dataclass
class Ledger:
    """What one run cost."""

    label: str
    attempted: int = 0
    ran: int = 0
    failed: int = 0
    rejected: int = 0
    tokens_spent: int = 0
    tokens_failed: int = 0
    tokens_saved: int = 0
    dead_wait: float = 0.0
    fallbacks_used: int = 0
    degraded_reported: int = 0
    session_seconds: float = 0.0
    steps: int = 0
    saved_measured: int | None = None
    model_turns: int = 0
    """Every model request: one per tool call, one per answer."""
    model_tokens: int = 0
    """Estimated tokens of all model turns (:func:`turn_tokens`)."""
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    menus: list[tuple[tuple[str, ...], frozenset[str]]] = field(default_factory=list)
    """(menu offered, tools open at that moment) of every observed turn."""


class Agent:
    """A plain-Python agent loop: per question, the model's turns (search, fetch,
    answer), each tool call run through ``invoke``.

    ``request`` builds what each model turn is sent (default: every tool, the
    plain system prompt); the demo's menu cases build it with the library's menu
    filter and tool-status block.
    """

    def __init__(
        self,
        world: World,
        ledger: Ledger,
        invoke: Invoke,
        request: Callable[[], Turn] = full_menu,
        model: ScriptedModel | None = None,
    ) -> None:
        self.world = world
        self.ledger = ledger
        self.invoke = invoke
        self.request = request
        self.model = model or ScriptedModel()
        self.step = 0

    def turn(self) -> Turn:
        """One model request: built now, charged, and the model's thinking time passes."""
        turn = self.request()
        self.world.clock.advance(THINK_SECONDS)
        tokens_in, tokens_out = turn_tokens(self.step, turn)
        self.ledger.model_turns += 1
        self.ledger.model_tokens += tokens_in + tokens_out
        if turn.open_tools is not None:
            self.ledger.menus.append((turn.menu, turn.open_tools))
        return turn

    def call(self, tool: str, query: str) -> tuple[str, Any]:
        """The tool call the model made in the turn just taken."""
        ledger = self.ledger
        clock = self.world.clock
        tokens_in, tokens_out = round_trip_tokens(self.step)
        ledger.attempted += 1
        ledger.tokens_spent += tokens_in + tokens_out
        started = clock()
        outcome, value = self.invoke(tool, self.world.tool(tool), query)
        if outcome == "rejected":
            ledger.rejected += 1
            return outcome, value
        ledger.ran += 1
        ledger.outcomes.append({"tool": tool, "ts": round(started, 3), "ok": outcome == "ok"})
        if outcome == "failed":
            ledger.failed += 1
            ledger.tokens_failed += tokens_in + tokens_out
            ledger.dead_wait += clock() - started
        return outcome, value

    def answer(self, number: int) -> None:
        """Work on question ``number`` until the model writes its answer."""
        question = Question()
        while True:
            turn = self.turn()
            tool = self.model.next_action(turn, question)
            if tool is None:
                if not question.found:
                    self.ledger.degraded_reported += 1
                return
            if tool == FETCH:
                self.call(FETCH, f"top page for question {number}")
                question.fetched = True
                continue
            if tool != question.current:
                if question.current is not None:  # moving on from a search tool: a fallback
                    self.ledger.fallbacks_used += 1
                question.current, question.failures = tool, 0
            self._observe(question, tool, *self.call(tool, f"question {number}"))

    @staticmethod
    def _observe(question: Question, tool: str, outcome: str, value: Any) -> None:
        """What the model learns from a search call's result (rules 2 and 3)."""
        if outcome == "ok":
            question.found = True
            return
        if outcome == "rejected":
            question.given_up.add(tool)
            named = tuple(a for a in value.get("alternatives", ()) if a != tool)
            if named:
                question.named = named
            else:
                question.given_up.update(SEARCH_TOOLS)  # report the degradation, as the rejection says
            return
        question.failures += 1
        if question.failures >= MAX_ATTEMPTS:
            question.given_up.add(tool)

    def work(self, steps: int, on_step: Callable[[int], None]) -> None:
        first, last = outage(steps)
        for step in range(steps):
            self.step = step
            self.world.broken = first <= step + 1 <= last
            self.answer(step + 1)
            self.ledger.steps += 1
            on_step(step)
        self.ledger.session_seconds = self.world.clock()
