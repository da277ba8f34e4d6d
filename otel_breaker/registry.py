"""Which breaker guards a call: tool identity -> breaker, with scopes and a memory bound.

A breaker follows the tool, not a Python object. Its key is a
:class:`~otel_breaker.identity.ToolKey`: (agent name, tool name, where the tool
runs: its MCP server or toolset, else the code behind it). A service that builds
a new agent object per request finds the same breakers on every request, every
worker process computes the same key (so a shared store shares it), and two
different tools that share a name never share a breaker.

Scopes (``OTEL_BREAKER_SCOPE``):

* agent (default): one breaker per (agent name, tool identity); a call with no
  agent name is keyed by the tool identity alone;
* process: one per tool identity, whichever agent calls it;
* instance: one per (agent *object*, tool identity), the pre-1.0 default: the
  agent is held weakly and its breakers go when it is garbage-collected or on
  :meth:`BreakerRegistry.release`;
* session: one per (session, agent name, tool identity). ``breaker_scope(session_id)``
  opens a session for the code inside it and drops its breakers when it ends;
  with ``OTEL_BREAKER_SCOPE=session``, framework session ids (thread ids, run
  ids) key breakers too, and idle sessions are pruned.

A breaker lives as long as it remembers something, never as long as a framework
object: outside ``instance`` scope nothing is dropped when an object is
collected. The registry never grows without bound, and past its cap a tool is
still judged only on its own calls. At ``max_breakers`` a new breaker first
takes the place of an idle one that remembers nothing a new breaker would not
(closed, no failure streak, no call in flight, no call since the last sweep;
never one handed out by :meth:`BreakerRegistry.get`). When none is idle the
call runs unguarded, counted under the tool name ``_unguarded``: another tool's
failures can never reject it. Each case is logged once. Counts of pruned
breakers are kept per tool so exported counters never go backwards.

Session scope costs O(1) per new session: idle sessions are found in order of
their last placement, a bounded number of steps per new session.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import os
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from otel_breaker.breaker import CircuitBreaker, CircuitBreakerConfig, Clock, all_breakers
from otel_breaker.config import Settings, get_settings
from otel_breaker.identity import ToolKey
from otel_breaker.loglines import logger
from otel_breaker.registry_bounds import (  # noqa: F401 - importable from here
    OTHER_TOOLS,
    UNGUARDED_TOOL,
    Bounds,
    CountsKey,
    counts_key,
)
from otel_breaker.store import BreakerStore, store_from_url
from otel_breaker.store.memory import MemoryStore
from otel_breaker.toolcall import ToolCall, agent_display_name

SESSION_IDLE_SECONDS = 3600.0
#: Sessions looked at per new session for idleness: the bound on the work it does.
SESSION_PRUNE_STEPS = 32

_session: contextvars.ContextVar[str | None] = contextvars.ContextVar("otel_breaker_session", default=None)


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
        # Process and agent scope: ToolKey -> breaker (plain tuples of the same values find them).
        self._by_key: dict[tuple, CircuitBreaker] = {}
        # Instance scope only: id(agent object) -> key -> breaker, dropped with the object.
        self._by_agent: dict[int, dict[tuple, CircuitBreaker]] = {}
        self._agent_finalizers: dict[int, weakref.finalize] = {}
        self._by_session: dict[str, dict[tuple, CircuitBreaker]] = {}
        # Implicit sessions: last use (written on every call, no lock) and the
        # order they were placed in (read oldest first when pruning).
        self._session_seen: dict[str, float] = {}
        self._session_order: OrderedDict[str, float] = OrderedDict()
        self._session_depth: dict[str, int] = {}
        # Every breaker held, the cap and what is left of dropped ones (registry_bounds.py).
        self._bounds = Bounds()
        self._created_listeners: list[Callable[[CircuitBreaker], None]] = []
        _REGISTRIES.add(self)

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
        """The process-scope breaker for ``tool`` (keyed by its name alone).

        A different ``config`` for an existing breaker is applied to it (and
        logged), never silently ignored.
        """
        breaker = self._keyed((None, tool, None), tool, config, None, None, None)
        self._bounds.pin(breaker)  # held by the caller: never evicted
        if config is not None:
            wanted = self.settings.config_for(tool, config)
            if wanted != breaker.config:
                logger.info("otel-breaker: applying a new configuration to breaker %r", tool)
                breaker.configure(wanted)
        return breaker

    def peek(self, key: tuple) -> CircuitBreaker | None:
        """The breaker held under ``key`` (a :class:`ToolKey`), without creating one."""
        return self._by_key.get(key)

    def _keyed(
        self,
        key: tuple,
        tool: str,
        config: CircuitBreakerConfig | None,
        agent_name: str | None,
        source: str | None,
        origin: str | None,
    ) -> CircuitBreaker:
        """The breaker under ``key`` in process/agent scope, created with ``config`` if new."""
        breaker = self._by_key.get(key)
        if breaker is None:
            with self._lock:
                breaker = self._by_key.get(key)
                if breaker is None:
                    breaker = self._new(tool, config, agent_name, None, ("key", key), source, origin)
                    if breaker is not self._bounds.unguarded:
                        self._by_key[key] = breaker
        return breaker

    def key_of(self, call: ToolCall) -> ToolKey:
        """The identity ``call``'s breaker is keyed by, in the configured scope
        (outside a session; the session, when there is one, is kept beside it)."""
        agent = None if self.settings.scope == "process" else call.agent_name
        return ToolKey(agent, call.tool, call.source if call.source is not None else call.origin)

    def breaker_for(
        self, call: ToolCall, config: CircuitBreakerConfig | None = None, settings: Settings | None = None
    ) -> CircuitBreaker:
        """The breaker that guards ``call``, by the configured scope (``settings``: this
        registry's, when the caller has read them already)."""
        session = _session.get()
        if session is not None:
            return self._session_breaker(session, call, config)
        if settings is None:
            settings = self.settings
        scope = settings.scope
        if scope == "agent":
            agent_name = call.agent_name
        elif scope == "process":
            agent_name = None
        elif scope == "session" and call.session_id is not None:
            return self._session_breaker(call.session_id, call, config, explicit=False)
        elif scope == "instance" and call.agent is not None and not isinstance(call.agent, str):
            return self._agent_breaker(call.agent, call, config)
        else:
            agent_name = call.agent_name
        where = call.source if call.source is not None else call.origin
        key = (agent_name, call.tool, where)
        breaker = self._by_key.get(key)
        if breaker is not None:
            return breaker
        return self._keyed(ToolKey(*key), call.tool, config, agent_name, call.source, call.origin)

    def holds_for_good(self, call: ToolCall, breaker: CircuitBreaker) -> bool:
        """Whether ``breaker`` (from :meth:`breaker_for`) answers every later lookup of
        ``call`` made outside a session scope, until it is retired.

        True for a tool-scope breaker of a call with no agent and no session:
        no setting changes that lookup. A caller may then keep the breaker
        (``@guard`` does) and look again only inside a session scope or once
        ``breaker.retired`` is set (cleared or evicted registry).
        """
        return (
            call.agent is None
            and call.session_id is None
            and call.agent_name is None
            and _session.get() is None
            and self._by_key.get((None, call.tool, call.where)) is breaker
        )

    def _agent_breaker(self, agent: Any, call: ToolCall, config: CircuitBreakerConfig | None) -> CircuitBreaker:
        """Instance scope: a breaker per agent object, dropped with it."""
        key = id(agent)
        name = (call.agent_name, call.tool, call.where)
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
                    # Not weakly referenceable: keyed by its name, as in agent scope.
                    return self._keyed(ToolKey(*name), call.tool, config, call.agent_name, call.source, call.origin)
                finalizer.atexit = False
                self._agent_finalizers[key] = finalizer
                tools = self._by_agent[key] = {}
            breaker = tools.get(name)
            if breaker is None:
                breaker = self._new(
                    call.tool, config, call.agent_name, None, ("agent", key, name), call.source, call.origin
                )
                if breaker is not self._bounds.unguarded:
                    tools[name] = breaker
            return breaker

    def _session_breaker(
        self, session: str, call: ToolCall, config: CircuitBreakerConfig | None, explicit: bool = True
    ) -> CircuitBreaker:
        name = (call.agent_name, call.tool, call.where)
        tools = self._by_session.get(session)
        if tools is not None:
            breaker = tools.get(name)
            if breaker is not None:
                if not explicit:
                    self._session_seen[session] = self._now()
                return breaker
        with self._lock:
            now = self._now()
            if not explicit:
                self._prune_idle_sessions(now)
            tools = self._by_session.get(session)
            breaker = tools.get(name) if tools is not None else None
            if breaker is None:
                breaker = self._new(
                    call.tool, config, call.agent_name, session, ("session", session, name), call.source, call.origin
                )
                if breaker is self._bounds.unguarded:
                    return breaker  # no session entry: memory stays bounded past the cap
                tools = self._by_session.get(session)  # making room may have dropped it
                if tools is None:
                    tools = self._by_session[session] = {}
                tools[name] = breaker
            if not explicit:
                self._session_seen[session] = now
                if session not in self._session_order:
                    self._session_order[session] = now
            return breaker

    def _now(self) -> float:
        return (self._clock or time.monotonic)()

    def _new(
        self,
        tool: str,
        config: CircuitBreakerConfig | None,
        agent_name: str | None,
        session: str | None,
        where: tuple,
        source: str | None = None,
        origin: str | None = None,
    ) -> CircuitBreaker:
        """A new breaker, indexed at ``where`` (lock held); the unguarded breaker
        when the registry is full and no breaker is idle."""
        if len(self._bounds) >= self.max_breakers and not self._make_room():
            return self._bounds.unguarded_breaker(self.max_breakers, self.settings.defaults, self._clock)
        store = self.store
        extra = {}
        if _takes_identity(store):
            extra["identity"] = ToolKey(agent_name, tool, source if source is not None else origin)
        breaker = store.create(
            tool,
            self.settings.config_for(tool, config, source),
            clock=self._clock,
            agent_name=agent_name,
            session_id=session,
            **extra,
        )
        if source is not None:
            breaker.source = source
        if origin is not None:
            breaker.origin = origin
        self._bounds.add(breaker, where)
        for listener in self._created_listeners:
            listener(breaker)
        return breaker

    def _make_room(self) -> bool:
        """Evict one idle breaker (the bounds choose it). True when one was evicted."""
        victim = self._bounds.victim(self.max_breakers)
        if victim is None:
            return False
        self._evict(*victim)
        return True

    def _evict(self, breaker: CircuitBreaker, where: tuple) -> None:
        kind = where[0]
        if kind == "key":
            self._by_key.pop(where[1], None)
        elif kind == "agent":
            self._by_agent.get(where[1], {}).pop(where[2], None)
        else:
            session = where[1]
            tools = self._by_session.get(session)
            if tools is not None:
                tools.pop(where[2], None)
                if not tools:
                    del self._by_session[session]
                    self._session_seen.pop(session, None)
                    self._session_order.pop(session, None)
        self._retire((breaker,))

    # -- pruning -------------------------------------------------------------------

    def release(self, agent: Any) -> None:
        """Instance scope: drop ``agent``'s breakers now instead of waiting for garbage
        collection. (In the other scopes breakers belong to tools, not objects.)"""
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
            self._session_order.pop(session, None)
            tools = self._by_session.pop(session, None)
            if tools:
                self._retire(tools.values())

    def _prune_idle_sessions(self, now: float) -> None:
        """Drop sessions idle for :data:`SESSION_IDLE_SECONDS`, oldest placement
        first, in at most :data:`SESSION_PRUNE_STEPS` steps (lock held).

        A session used since it was placed is placed again at the back, so
        each is looked at about once per idle period: O(1) per new session."""
        order = self._session_order
        for _ in range(SESSION_PRUNE_STEPS):
            if not order:
                return
            session = next(iter(order))
            if now - order[session] <= SESSION_IDLE_SECONDS:
                return  # every later placement is newer still
            seen = self._session_seen.get(session, order[session])
            if now - seen > SESSION_IDLE_SECONDS and session not in self._session_depth:
                self._drop_session(session)
            else:
                order.move_to_end(session)
                order[session] = now

    def _retire(self, breakers: Any) -> None:
        """Fold the lifetime counts of dropped breakers into per-tool totals."""
        self._bounds.retire(breakers, self.max_breakers)

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
            found = list(self._by_key.values())
            for tools in (*self._by_agent.values(), *self._by_session.values()):
                found.extend(tools.values())
        return found

    def __len__(self) -> int:
        """How many breakers the registry holds (at most ``max_breakers``)."""
        return len(self._bounds)

    @property
    def unguarded_calls(self) -> int:
        """Calls that ran unguarded because the registry was full and no breaker idle."""
        breaker = self._bounds.unguarded
        return 0 if breaker is None else breaker.requests

    def retired_counts(self) -> dict[CountsKey, list[int]]:
        """Lifetime (success, failure, ignored, rejected-open, rejected-half-open) of
        pruned breakers per (tool, agent name, mode): exported counters add these to
        the live breakers' counts so they never go backwards."""
        with self._lock:
            return {key: list(values) for key, values in self._bounds.retired.items()}

    def breakers_of(self, agent: Any) -> list[CircuitBreaker]:
        """The breakers that can reject ``agent``'s own calls (outside sessions): its
        per-object breakers in instance scope, else those keyed by its name."""
        with self._lock:
            own = list(self._by_agent.get(id(agent), {}).values())
            if own:
                return own
            name = agent_display_name(agent)
            if name is None:
                return []
            return [b for b in self._by_key.values() if b.agent_name == name]

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
            self._bounds.clear(self.max_breakers, keep_counts)
            for finalizer in list(self._agent_finalizers.values()):
                finalizer.detach()
            self._by_key.clear()
            self._by_agent.clear()
            self._agent_finalizers.clear()
            self._by_session.clear()
            self._session_seen.clear()
            self._session_order.clear()


_REGISTRIES: weakref.WeakSet[BreakerRegistry] = weakref.WeakSet()


def _reinit_after_fork() -> None:
    """A lock another thread held at a fork stays held in the child: replace them."""
    for registry in list(_REGISTRIES):
        registry._lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)


def _store_from_settings(settings: Settings) -> BreakerStore:
    if not settings.store or settings.store == "memory":
        return MemoryStore()
    try:
        return store_from_url(settings.store, settings)
    except Exception as exc:
        logger.error("otel-breaker: OTEL_BREAKER_STORE unusable (%s); using per-process breakers", exc)
        return MemoryStore()


_IDENTITY_AWARE: dict[type, bool] = {}


def _takes_identity(store: Any) -> bool:
    """Whether ``store.create`` accepts ``identity`` (stores written before it existed do not)."""
    kind = type(store)
    known = _IDENTITY_AWARE.get(kind)
    if known is None:
        try:
            parameters = inspect.signature(store.create).parameters
            known = "identity" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())
        except (TypeError, ValueError):
            known = False
        _IDENTITY_AWARE[kind] = known
    return known


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
    """Instance scope: drop an agent object's breakers now (they also go when it is
    garbage-collected). Other scopes key breakers by tool identity, not by object."""
    _default.release(agent)


def current_session() -> str | None:
    return _session.get()


#: ``current_session`` without the call (read on every ``@guard`` call).
session_of_context = _session.get
