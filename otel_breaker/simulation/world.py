"""The simulated world: a clock, three tools (one of which dies) and what a model turn costs.

Every number the demo reports follows from the constants here, so they are the
whole of its assumptions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from otel_breaker.breaker import CircuitBreaker

AGENT = "research_agent"
PRIMARY = "web_search"
BACKUP = "backup_search"
FETCH = "fetch_page"
MODEL = "demo-model"
UPSTREAM = "search_api"
"""The host ``web_search`` runs behind: while it hangs, every call times out, a transport
failure that the upstream's breaker counts as well as the tool's."""
PRICE_PER_TOKEN = (3e-6, 15e-6)
"""USD per input and per output token of :data:`MODEL` (a typical list price of a large
model), so the telemetry estimates what rejected calls saved in money too."""
TOOLS = (PRIMARY, BACKUP, FETCH)
"""The agent's tools, in the order its menu lists them."""
SEARCH_TOOLS = (PRIMARY, BACKUP)
"""The tools the model searches with, in its order of preference."""

TOOL_TIMEOUT = 30.0
"""A dead tool hangs until this timeout (simulated seconds)."""
THINK_SECONDS = 2.0
"""One model round-trip (issue a tool call, read its result)."""
MAX_ATTEMPTS = 3
"""The agent retries a failing tool this many times before switching to the backup."""
TOOL_SECONDS = {PRIMARY: 1.5, BACKUP: 3.0, FETCH: 1.0}
DEFAULT_STEPS = 60

TOOL_DEFINITION_TOKENS = 150
"""Tokens one tool's definition (name, description, parameter schema) adds to a
model request; :func:`round_trip_tokens` counts all of :data:`TOOLS`, so a
request whose menu lacks a tool costs this much less."""
CHARS_PER_TOKEN = 4
"""The usual rule of thumb for English text, used for the tool-status block."""


class SimClock:
    """Monotonic simulated seconds; tools advance it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class SimStore:
    """A breaker store whose breakers read the simulated clock.

    ``agent_name``: the one agent of the simulated world, named on every breaker made
    here (its tools serve no other agent), so its series carry ``gen_ai.agent.name``."""

    name = "memory"

    def __init__(self, clock: SimClock, agent_name: str | None = None) -> None:
        self.clock = clock
        self.agent_name = agent_name

    def create(
        self, key: str, config: Any, *, clock: Any = None, agent_name: Any = None, session_id: Any = None, **_: Any
    ):

        agent_name = agent_name or self.agent_name
        return CircuitBreaker(key, config, clock=self.clock, agent_name=agent_name, session_id=session_id)

    def close(self) -> None:
        """Nothing to release."""


class ToolTimedOut(TimeoutError):
    """What the dead tool raises once its timeout has passed."""


def outage(steps: int) -> tuple[int, int]:
    """The first and last question (1-based) during which ``web_search`` is dead."""
    return steps // 6 + 1, steps * 2 // 3


class World:
    """The tools, in simulated time. ``web_search`` is dead while ``broken``."""

    def __init__(self, clock: SimClock) -> None:
        self.clock = clock
        self.broken = False

    def tool(self, name: str) -> Callable[[str], str]:
        def run(query: str) -> str:
            if name == PRIMARY and self.broken:
                self.clock.advance(TOOL_TIMEOUT)
                raise ToolTimedOut(f"{name} did not answer within {TOOL_TIMEOUT:g}s")
            self.clock.advance(TOOL_SECONDS[name])
            return f"{name} result for {query!r}"

        run.__name__ = name
        return run


def round_trip_tokens(step: int) -> tuple[int, int]:
    """(input, output) tokens of the model round-trip around one tool call:
    the context grows as the session goes on."""
    return 1200 + 25 * step, 80


def text_tokens(text: str) -> int:
    """Estimated tokens of ``text`` added to a prompt (:data:`CHARS_PER_TOKEN`)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)
