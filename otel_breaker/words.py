"""The words that mean yes and no, for every reader of a switch.

Environment variables (``config``) and Redis URL options (``store.redis_setup``)
read switches; with one list, a word that works in one place works in all.
"""

from __future__ import annotations

#: Words read as true (compared lower-cased).
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
#: Words read as false (compared lower-cased). An empty environment variable is
#: also false, but that is the environment's rule, kept in ``config``.
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


def parse_switch(text: str) -> bool | None:
    """True or False for a yes/no word (any case, surrounding blanks ignored); None for anything else."""
    lowered = text.strip().lower()
    if lowered in TRUE_WORDS:
        return True
    if lowered in FALSE_WORDS:
        return False
    return None
