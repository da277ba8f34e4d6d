"""Which breaker guards a call: key -> breaker, with scopes and a memory bound.

Scopes:

* process: one breaker per tool name;
* agent (default): one per (agent object, tool), so two agents exposing a
  same-named tool never share a breaker. The agent is held weakly and its
  breakers are pruned when it is garbage-collected (``weakref.finalize``) or
  on :meth:`BreakerRegistry.release`; calls with no known agent fall back to
  the process scope;
* session: one per (session, tool). ``breaker_scope(session_id)`` opens a
  session for the code inside it and drops its breakers when it ends; with
  ``OTEL_BREAKER_SCOPE=session``, framework session ids (thread ids, run ids)
  key breakers too, and idle sessions are pruned.

The registry never grows without bound: past ``max_breakers`` new keys share
one overflow breaker and a warning is logged once. Counts of pruned breakers
are kept per tool so exported counters never go backwards.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import uuid
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from otel_breaker.breaker import CircuitBreaker, CircuitBreakerConfig, Clock, all_breakers
from otel_breaker.config import Settings, get_settings
from otel_breaker.store import BreakerStore, store_from_url
from otel_breaker.store.memory import MemoryStore
from otel_breaker.toolcall import ToolCall

logger = logging.getLogger("otel_breaker")

OVERFLOW_TOOL = "_overflow"
SESSION_IDLE_SECONDS = 3600.0

_session: contextvars.ContextVar[str | None] = contextvars.ContextVar("otel_breaker_session", default=None)

CountsKey = tuple[str, str | None, str]
"""(tool, agent name, mode) of a breaker's exported counts."""


class BreakerRegistry:
    """Hands out breakers by tool, agent and session."""

    def __init__(
        self,
        *,
        store: BreakerStore | None = None,
        settings: Settings | None = None,
        clock: Clock | None = None,
        max_breakers: int | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock
        self._max = max_breakers
        self._lock = threading.RLock()
        self._by_tool: dict[str, CircuitBreaker] = {}
        self._by_agent: dict[int, dict[str, CircuitBreaker]] = {}
        self._agent_finalizers: dict[int, weakref.finalize] = {}
        self._by_agent_name: dict[tuple[str, str], CircuitBreaker] = {}
        self._by_session: dict[str, dict[str, CircuitBreaker]] = {}
        self._session_seen: dict[str, float] = {}
        self._session_depth: dict[str, int] = {}
        self._count = 0
        self._overflow: CircuitBreaker | None = None
        self._retired: dict[CountsKey, list[int]] = {}
        self._created_listeners: list[Callable[[CircuitBreaker], None]] = []

    # -- settings ------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        return self._settings if self._settings is not None else get_settings()

    @property
    def store(self) -> BreakerStore:
        """The store new breakers are created in: the one given, else the one
        ``OTEL_BREAKER_STORE`` names (memory when unset or unusable)."""
        store = self._store
        if store is None:
            with self._lock:
                if self._store is None:
                    self._store = _store_from_settings(self.settings)
                store = self._store
        return store

    @property
    def clock(self) -> Clock | None:
        """The clock given to :meth:`use_clock` (None: breakers use ``time.monotonic``)."""
        return self._clock

    def use_clock(self, clock: Clock | None) -> None:
        """Create future breakers with ``clock`` (None: ``time.monotonic``).

        For tests and simulations of agents whose breakers come from the
        registry (framework adapters, ``@guard``): cooldowns then pass when the
        clock says so, without sleeping.
        """
        self._clock = clock

    def use_store(self, store: BreakerStore) -> None:
        """Create future breakers in ``store`` (existing ones are kept)."""
        self._store = store

    @property
    def max_breakers(self) -> int:
        return self._max if self._max is not None else self.settings.max_breakers

    def on_created(self, listener: Callable[[CircuitBreaker], None]) -> None:
        self._created_listeners.append(listener)

    # -- lookups ---------------------------------------------------------------

    def get(self, tool: str, config: CircuitBreakerConfig | None = None) -> CircuitBreaker:
        """The process-scope breaker for ``tool``.

        A different ``config`` for an existing breaker is applied to it (and
        logged), never silently ignored.
        """
        breaker = self._get(tool, config)
        if config is not None:
            wanted = self.settings.config_for(tool, config)
            if wanted != breaker.config:
                logger.info("otel-breaker: applying a new configuration to breaker %r", tool)
                breaker.configure(wanted)
        return breaker

    def _get(
        self, tool: str, config: CircuitBreakerConfig | None, source: str | None = None, key: str | None = None
    ) -> CircuitBreaker:
        """The process-scope breaker, created with ``config`` if it is new."""
        key = tool if key is None else key
        breaker = self._by_tool.get(key)
        if breaker is None:
            with self._lock:
                breaker = self._by_tool.get(key)
                if breaker is None:
                    breaker = self._new(tool, config, None, None, source)
                    if breaker.name != OVERFLOW_TOOL:
                        self._by_tool[key] = breaker
        return breaker

    def breaker_for(self, call: ToolCall, config: CircuitBreakerConfig | None = None) -> CircuitBreaker:
        """The breaker that guards ``call``, by the configured scope."""
        session = _session.get()
        if session is not None:
            return self._session_breaker(session, call, config)
        agent = call.agent
        if agent is None:
            if call.session_id is not None and self.settings.scope == "session":
                return self._session_breaker(call.session_id, call, config, explicit=False)
            key = tool_key(call)
            breaker = self._by_tool.get(key)
            return breaker if breaker is not None else self._get(call.tool, config, call.source, key)
        scope = self.settings.scope
        if scope == "agent":
            return self._agent_breaker(agent, call, config)
        if scope == "session" and call.session_id is not None:
            return self._session_breaker(call.session_id, call, config, explicit=False)
        key = tool_key(call)
        breaker = self._by_tool.get(key)
        return breaker if breaker is not None else self._get(call.tool, config, call.source, key)

    def _agent_breaker(self, agent: Any, call: ToolCall, config: CircuitBreakerConfig | None) -> CircuitBreaker:
        key = id(agent)
        name = tool_key(call)
        tools = self._by_agent.get(key)
        if tools is not None:
            breaker = tools.get(name)
            if breaker is not None:
                return breaker
        with self._lock:
            tools = self._by_agent.get(key)
            if tools is None:
                try:
                    finalizer = weakref.finalize(agent, self._drop_agent, key)
                except TypeError:
                    return self._named_agent_breaker(agent, call, config)
                finalizer.atexit = False
                self._agent_finalizers[key] = finalizer
                tools = self._by_agent[key] = {}
            breaker = tools.get(name)
            if breaker is None:
                breaker = self._new(call.tool, config, call.agent_name, None, call.source)
                tools[name] = breaker
            return breaker

    def _named_agent_breaker(self, agent: Any, call: ToolCall, config: CircuitBreakerConfig | None) -> CircuitBreaker:
        """Agents that cannot be weakly referenced are keyed by name instead."""
        name = call.agent_name or type(agent).__name__
        breaker = self._by_agent_name.get((name, tool_key(call)))
        if breaker is None:
            breaker = self._new(call.tool, config, name, None, call.source)
            self._by_agent_name[(name, tool_key(call))] = breaker
        return breaker

    def _session_breaker(
        self, session: str, call: ToolCall, config: CircuitBreakerConfig | None, explicit: bool = True
    ) -> CircuitBreaker:
        name = tool_key(call)
        tools = self._by_session.get(session)
        if tools is not None:
            breaker = tools.get(name)
            if breaker is not None:
                if not explicit:
                    self._session_seen[session] = self._now()
                return breaker
        with self._lock:
            if not explicit:
                self._prune_idle_sessions()
                self._session_seen[session] = self._now()
            tools = self._by_session.setdefault(session, {})
            breaker = tools.get(name)
            if breaker is None:
                breaker = self._new(call.tool, config, call.agent_name, session, call.source)
                tools[name] = breaker
            return breaker

    def _now(self) -> float:
        import time

        return (self._clock or time.monotonic)()

    def _new(
        self,
        tool: str,
        config: CircuitBreakerConfig | None,
        agent_name: str | None,
        session: str | None,
        source: str | None = None,
    ) -> CircuitBreaker:
        if self._count >= self.max_breakers:
            return self._overflow_breaker()
        breaker = self.store.create(
            tool,
            self.settings.config_for(tool, config),
            clock=self._clock,
            agent_name=agent_name,
            session_id=session,
        )
        if source is not None:
            breaker.source = source
        self._count += 1
        for listener in self._created_listeners:
            listener(breaker)
        return breaker

    def _overflow_breaker(self) -> CircuitBreaker:
        if self._overflow is None:
            logger.warning(
                "otel-breaker: more than %d breakers; new tools now share the %r breaker. "
                "Raise OTEL_BREAKER_MAX_BREAKERS or use a coarser OTEL_BREAKER_SCOPE.",
                self.max_breakers,
                OVERFLOW_TOOL,
            )
            self._overflow = self.store.create(OVERFLOW_TOOL, self.settings.defaults, clock=self._clock)
        return self._overflow

    # -- pruning -------------------------------------------------------------------

    def release(self, agent: Any) -> None:
        """Drop ``agent``'s breakers now instead of waiting for garbage collection."""
        finalizer = self._agent_finalizers.get(id(agent))
        if finalizer is not None:
            finalizer()

    def _drop_agent(self, key: int) -> None:
        with self._lock:
            self._agent_finalizers.pop(key, None)
            tools = self._by_agent.pop(key, None)
            if tools:
                self._retire(tools.values())

    def _drop_session(self, session: str) -> None:
        with self._lock:
            self._session_seen.pop(session, None)
            tools = self._by_session.pop(session, None)
            if tools:
                self._retire(tools.values())

    def _prune_idle_sessions(self) -> None:
        now = self._now()
        for session, seen in list(self._session_seen.items()):
            if now - seen > SESSION_IDLE_SECONDS and session not in self._session_depth:
                self._drop_session(session)

    def _retire(self, breakers: Any) -> None:
        """Fold the lifetime counts of dropped breakers into per-tool totals."""
        for breaker in breakers:
            self._count -= 1
            breaker.retired = True
            key = counts_key(breaker)
            if key not in self._retired and len(self._retired) >= self.max_breakers:
                key = (OVERFLOW_TOOL, None, key[2])
            totals = self._retired.setdefault(key, [0, 0, 0, 0, 0])
            for index, value in enumerate(breaker.lifetime_counts()):
                totals[index] += value
            close = getattr(breaker, "close", None)
            if close is not None:
                close()

    @contextlib.contextmanager
    def session(self, session_id: str | None = None) -> Iterator[str]:
        """Breakers created inside are per session and dropped when it ends."""
        session = session_id or uuid.uuid4().hex
        with self._lock:
            self._session_depth[session] = self._session_depth.get(session, 0) + 1
        token = _session.set(session)
        try:
            yield session
        finally:
            _session.reset(token)
            with self._lock:
                depth = self._session_depth[session] - 1
                if depth:
                    self._session_depth[session] = depth
                else:
                    del self._session_depth[session]
                    self._drop_session(session)

    # -- views -----------------------------------------------------------------------

    def breakers(self) -> list[CircuitBreaker]:
        """Every breaker this registry holds now."""
        with self._lock:
            found = list(self._by_tool.values()) + list(self._by_agent_name.values())
            for tools in (*self._by_agent.values(), *self._by_session.values()):
                found.extend(tools.values())
            if self._overflow is not None:
                found.append(self._overflow)
        return found

    def __len__(self) -> int:
        return self._count + (self._overflow is not None)

    def retired_counts(self) -> dict[CountsKey, list[int]]:
        """Lifetime (success, failure, ignored, rejected-open, rejected-half-open) of
        pruned breakers per (tool, agent name, mode): exported counters add these to
        the live breakers' counts so they never go backwards."""
        with self._lock:
            return {key: list(values) for key, values in self._retired.items()}

    def breakers_of(self, agent: Any) -> list[CircuitBreaker]:
        """The per-agent breakers of ``agent`` (an agent object held in agent scope)."""
        with self._lock:
            return list(self._by_agent.get(id(agent), {}).values())

    def find(self, tool: str) -> list[CircuitBreaker]:
        """Every breaker guarding ``tool`` (all agents and sessions)."""
        return [b for b in self.breakers() if b.name == tool]

    def reset_all(self) -> None:
        """Reset every breaker, including ones created outside this registry."""
        for breaker in all_breakers():
            breaker.reset()

    def clear(self, *, keep_counts: bool = True) -> None:
        """Forget every breaker. Their counts are kept for telemetry unless
        ``keep_counts=False`` (a clean slate, e.g. between tests)."""
        with self._lock:
            self._retire(self.breakers())
            if not keep_counts:
                self._retired.clear()
            for finalizer in list(self._agent_finalizers.values()):
                finalizer.detach()
            self._by_tool.clear()
            self._by_agent.clear()
            self._agent_finalizers.clear()
            self._by_agent_name.clear()
            self._by_session.clear()
            self._session_seen.clear()
            self._overflow = None
            self._count = 0


def _store_from_settings(settings: Settings) -> BreakerStore:
    if not settings.store or settings.store == "memory":
        return MemoryStore()
    try:
        return store_from_url(settings.store, settings)
    except Exception as exc:
        logger.error("otel-breaker: OTEL_BREAKER_STORE unusable (%s); using per-process breakers", exc)
        return MemoryStore()


def tool_key(call: ToolCall) -> str:
    """The registry key of a call's tool: its name, qualified by its source when it has one."""
    return call.tool if call.source is None else f"{call.tool}\x00{call.source}"


def counts_key(breaker: CircuitBreaker) -> CountsKey:
    return (breaker.name, breaker.agent_name, breaker.config.mode)


_default = BreakerRegistry()


def default_registry() -> BreakerRegistry:
    return _default


def get_circuit_breaker(name: str, config: CircuitBreakerConfig | None = None) -> CircuitBreaker:
    """The process-wide breaker for tool ``name`` (created on first use)."""
    return _default.get(name, config)


def reset_all_circuit_breakers() -> None:
    """Reset every breaker in the process, registered or not."""
    _default.reset_all()


def breaker_scope(session_id: str | None = None) -> contextlib.AbstractContextManager[str]:
    """Per-session breakers for the code inside; they go when the session ends."""
    return _default.session(session_id)


def release(agent: Any) -> None:
    """Drop an agent's breakers now (they also go when it is garbage-collected)."""
    _default.release(agent)


def current_session() -> str | None:
    return _session.get()
