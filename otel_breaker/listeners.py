"""The listeners every breaker's transitions reach, kept apart from the state machine.

A module with no imports of its own: what subscribes to transitions (telemetry, health
checks, shared stores) need not load the state machine to do so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Listeners for every breaker (telemetry, health checks, shared stores), called with a ``StateChange``.
GLOBAL_LISTENERS: list[Callable[[Any], None]] = []


def add_global_listener(listener: Callable[[Any], None]) -> None:
    """Subscribe to the transitions of every breaker in the process."""
    if listener not in GLOBAL_LISTENERS:
        GLOBAL_LISTENERS.append(listener)


#: Called as ``listener(breaker, from_state, to_state)`` when a breaker follows a
#: change another process made in a shared store. That process counted the
#: transition; these listeners only tell this process's log where the breaker lives.
FOLLOW_LISTENERS: list[Callable[[Any, Any, Any], None]] = []


def add_follow_listener(listener: Callable[[Any, Any, Any], None]) -> None:
    """Subscribe to changes breakers follow from a shared store (telemetry does)."""
    if listener not in FOLLOW_LISTENERS:
        FOLLOW_LISTENERS.append(listener)


def remove_global_listener(listener: Callable[[Any], None]) -> None:
    if listener in GLOBAL_LISTENERS:
        GLOBAL_LISTENERS.remove(listener)
