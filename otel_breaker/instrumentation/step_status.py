"""The status block for one step of a run whose messages the framework keeps in a
mutable state: added before the step's model call, taken out after the step.

Some frameworks (Haystack's Agent) hold the run's message list in a state the
step reads and appends to, rather than passing it to the model call. The block
then goes into that list for the step, and afterwards the run's own system
message replaces it again, so the history the framework keeps never carries it
and the next step gets a fresh one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from otel_breaker.instrumentation.spec import MessageDialect, insert_status_block


def status_for_step(read_state: Callable[[], Any], key: str, dialect: MessageDialect, agent: Any) -> Callable[[], None]:
    """Put the status block into ``read_state()[key]`` (a message list); returns the undo.
    A state that cannot be read or amended is left alone."""
    try:
        state = read_state()
        original = state[key]
        amended = insert_status_block(original, dialect, agent)
    except Exception:
        amended = None
    if amended is None:
        return lambda: None
    added = next(m for m, o in zip(amended, [*original, None], strict=False) if m is not o)
    state[key] = amended

    def undo() -> None:
        # The step appended its replies after the block: only the block is replaced.
        now = state[key]
        position = next((i for i, m in enumerate(now) if m is added), None)
        if position is not None:
            now[position : position + 1] = [o for o in original if dialect.is_system(o)][:1]
            state[key] = now

    return undo
