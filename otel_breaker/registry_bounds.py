"""A registry's bounds: how many breakers it holds, which one makes room, and
what is left of the breakers it dropped.

Apart from the lookups (``registry.py``: identity and scope -> breaker) so that
each has one job. The registry keeps its maps and its lock; under that lock it
asks :class:`Bounds` whether a new breaker fits, which idle breaker to evict
(it removes it from its maps), and where a call goes when nothing fits: the
unguarded breaker, a mode of the same state machine that admits and counts
every call and never moves a state. Past the cap a tool is still judged only on
its own calls. Counts of dropped breakers are kept per tool so exported counters
never go backwards.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from otel_breaker.breaker import CircuitBreaker, CircuitBreakerConfig, Clock
from otel_breaker.loglines import logger

#: Tool name under which calls that ran unguarded past the cap are counted.
UNGUARDED_TOOL = "_unguarded"
#: Metric series of pruned tools beyond ``max_breakers`` distinct keys are summed under this name.
OTHER_TOOLS = "_other"
#: Breakers looked at per new breaker when the registry is full (after a look
#: that found none idle, the next EVICTION_SCAN // 2 new keys run unguarded
#: without looking): the bound on the work it does.
EVICTION_SCAN = 32

CountsKey = tuple[str, str | None, str, str | None, str | None]
"""(tool, agent name, mode, source, origin) of a breaker's exported counts."""


def counts_key(breaker: CircuitBreaker) -> CountsKey:
    return (breaker.name, breaker.agent_name, breaker.config.mode, breaker.source, breaker.origin)


class Bounds:
    """Every breaker a registry holds, oldest first, and the cap on them (used under the registry's lock)."""

    def __init__(self) -> None:
        # breaker -> [where the registry holds it, pinned, requests at the last sweep]
        self.index: OrderedDict[CircuitBreaker, list[Any]] = OrderedDict()
        self.unguarded: CircuitBreaker | None = None
        self.retired: dict[CountsKey, list[int]] = {}
        self._cap_logged = False
        self._scan_skips = 0

    def __len__(self) -> int:
        return len(self.index)

    def add(self, breaker: CircuitBreaker, where: tuple) -> None:
        self.index[breaker] = [where, False, 0]

    def pin(self, breaker: CircuitBreaker) -> None:
        """Held by a caller (``registry.get``): never evicted."""
        entry = self.index.get(breaker)
        if entry is not None:
            entry[1] = True

    def victim(self, cap: int) -> tuple[CircuitBreaker, tuple] | None:
        """At the cap: an idle breaker to evict and where it is held, looking at no more
        than :data:`EVICTION_SCAN` of the oldest; None when none is idle."""
        if not self._cap_logged:
            self._cap_logged = True
            logger.warning(
                "otel-breaker: %d breakers (OTEL_BREAKER_MAX_BREAKERS); idle closed breakers now make room "
                "for new ones, and while none is idle new tools run unguarded, counted as tool %r. "
                "Raise OTEL_BREAKER_MAX_BREAKERS or use a coarser OTEL_BREAKER_SCOPE.",
                cap,
                UNGUARDED_TOOL,
            )
        if self._scan_skips:
            self._scan_skips -= 1  # the last look found nothing to evict: do not look again at once
            return None
        index = self.index
        spare = None  # idle but used since the last sweep: evicted only if nothing idler is
        for _ in range(min(EVICTION_SCAN, len(index))):
            breaker = next(iter(index))
            entry = index[breaker]
            if not entry[1]:
                requests = breaker.requests
                if breaker.is_idle():
                    if requests == entry[2]:
                        return breaker, entry[0]
                    if spare is None:
                        spare = (breaker, entry[0])
                entry[2] = requests
            index.move_to_end(breaker)
        if spare is not None:
            return spare
        self._scan_skips = EVICTION_SCAN // 2
        return None

    def unguarded_breaker(self, cap: int, defaults: CircuitBreakerConfig, clock: Clock | None) -> CircuitBreaker:
        """Where calls go when the registry is full and no breaker is idle."""
        breaker = self.unguarded
        if breaker is None:
            logger.warning(
                "otel-breaker: %d breakers and none idle: new tools run unguarded, counted as tool %r "
                "(logged once). Raise OTEL_BREAKER_MAX_BREAKERS or use a coarser OTEL_BREAKER_SCOPE.",
                cap,
                UNGUARDED_TOOL,
            )
            breaker = self.unguarded = CircuitBreaker(UNGUARDED_TOOL, defaults, clock=clock, unguarded=True)
        return breaker

    def retire(self, breakers: Iterable[CircuitBreaker], cap: int) -> None:
        """Fold the lifetime counts of dropped breakers into per-tool totals."""
        for breaker in breakers:
            self.index.pop(breaker, None)
            breaker.retired = True
            key = counts_key(breaker)
            if key not in self.retired and len(self.retired) >= cap:
                key = (OTHER_TOOLS, None, key[2], None, None)
            totals = self.retired.setdefault(key, [0, 0, 0, 0, 0])
            for index, value in enumerate(breaker.lifetime_counts()):
                totals[index] += value
            close = getattr(breaker, "close", None)
            if close is not None:
                close()

    def clear(self, cap: int, keep_counts: bool) -> None:
        """Every breaker is dropped (the registry has emptied its maps)."""
        if self.unguarded is not None:
            self.retire((self.unguarded,), cap)
            self.unguarded = None
        if not keep_counts:
            self.retired.clear()
        self.index.clear()
        self._cap_logged = False
