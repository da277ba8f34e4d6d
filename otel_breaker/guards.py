"""``Guard`` and ``@guard``: thin faces of the one call path (``call_path.py``).

``Guard.call``/``acall`` hand a described call to :class:`~otel_breaker.call_path.CallPath`;
``@guard`` does the same for a decorated function, sync or async alike, and
keeps the registry's breaker while the registry says it cannot change (no
session scope, the same settings, no upstream), so a healthy call skips the lookup
and goes straight to the call path's driver.

The module is ``guards`` and the decorator ``guard``: ``otel_breaker.guard`` is the
decorator, and ``import otel_breaker.guards`` gives this module.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from otel_breaker import config as _config
from otel_breaker.breaker import CircuitBreaker, CircuitBreakerConfig, Clock
from otel_breaker.call_path import DIRECT, CallPath
from otel_breaker.call_steps import (  # noqa: F401 - the names adapters and users import from here
    IGNORED_RESULT,
    INVALID_RESULT_ERROR_TYPE,
    TIMEOUT_ERROR_TYPE,
    Adapter,
    ToolTimeoutError,
)
from otel_breaker.loglines import bookkeeping_failed
from otel_breaker.registry import BreakerRegistry, default_registry
from otel_breaker.registry import session_of_context as _session
from otel_breaker.toolcall import ToolCall, agent_display_name


class Guard(CallPath):
    """Runs tool calls through the breakers of one registry (adapters use this):
    :meth:`call`/:meth:`acall` are the call path's ``run``/``arun``."""

    def call(
        self,
        call: ToolCall,
        fn: Callable[..., Any],
        args: tuple = (),
        kwargs: dict | None = None,
        adapter: Any = None,
        config: CircuitBreakerConfig | None = None,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` as tool call ``call`` (``config`` for a breaker created now)."""
        return self.run(call, fn, args, kwargs, adapter, config)

    async def acall(
        self,
        call: ToolCall,
        fn: Callable[..., Any],
        args: tuple = (),
        kwargs: dict | None = None,
        adapter: Any = None,
        config: CircuitBreakerConfig | None = None,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` (awaited when it returns an awaitable) as tool call ``call``."""
        return await self.arun(call, fn, args, kwargs, adapter, config)


_default_guard = Guard()


def default_guard() -> Guard:
    return _default_guard


def _holds_for_good(registry: BreakerRegistry, call: ToolCall, breaker: CircuitBreaker) -> bool:
    try:
        return registry.holds_for_good(call, breaker)
    except Exception:
        bookkeeping_failed("finding a breaker")
        return False


class _Kept:
    """The registry's breaker of one decorated function, kept while the registry says it
    cannot change (no session scope, the same settings, no upstream): a healthy call then
    skips the lookup and goes straight to the call path's driver."""

    __slots__ = ("breaker", "settings_version")

    def __init__(self) -> None:
        self.breaker: CircuitBreaker | None = None
        #: The version of the settings the breaker was found under: new settings may give
        #: another breaker (``config.settings_version``).
        self.settings_version = -1


def guard(
    tool: str | Callable[..., Any] | None = None,
    *,
    config: CircuitBreakerConfig | None = None,
    agent: Any = None,
    agent_name: str | None = None,
    clock: Clock | None = None,
    registry: BreakerRegistry | None = None,
) -> Any:
    """Guard a tool function (sync or async) with its breaker.

    ``@guard`` names the breaker after the function; ``@guard("web_search",
    config=..., agent=...)`` names it explicitly. With ``clock`` the breaker is
    private to this function (for tests and simulations); otherwise it comes
    from the registry, so every guarded call of that tool shares it.
    """
    if callable(tool):
        return guard()(tool)

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        if _config.get_settings().status_addr:  # the server module (http.server) only when asked for
            from otel_breaker.status_server import start_from_settings

            start_from_settings()  # once, never raises
        name = tool or getattr(fn, "__name__", "tool")
        if clock is not None:
            settings = (registry if registry is not None else default_registry()).settings
            breaker = CircuitBreaker(name, settings.config_for(name, config), clock=clock, agent_name=agent_name)
            return DIRECT.decorate(breaker, fn)
        reg = registry if registry is not None else default_registry()
        call = ToolCall(name, agent=agent, agent_name=agent_name or agent_display_name(agent))
        if config is not None:
            reg.breaker_for(call, config)  # create it now with this config
        path = CallPath(reg)
        kept = _Kept()

        def find() -> tuple[CircuitBreaker | None, CircuitBreaker | None]:
            """(breaker, upstream) from the registry, keeping the breaker when it holds for good."""
            settings_version = _config.settings_version  # before the lookup: a change during it is seen next time
            breaker = path.breaker_for(call, config)
            if breaker is None:
                return None, None
            upstream = path.upstream_for(call)
            if upstream is None and _holds_for_good(reg, call, breaker):
                kept.breaker = breaker
                kept.settings_version = settings_version
            else:
                kept.breaker = None
            return breaker, upstream

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_guarded(*args: Any, **kwargs: Any) -> Any:
                breaker = kept.breaker
                if (
                    breaker is not None
                    and not breaker.retired
                    and kept.settings_version == _config.settings_version
                    and _session() is None
                ):
                    return await path.adrive(breaker, fn, args, kwargs, call)
                breaker, upstream = find()
                if breaker is None:
                    return await fn(*args, **kwargs)
                return await path.adrive(breaker, fn, args, kwargs, call, None, upstream)

            return async_guarded

        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            breaker = kept.breaker
            # The kept breaker still answers the lookup: not retired, the same settings, no
            # session scope (read inline: every call asks).
            if (
                breaker is not None
                and not breaker.retired
                and kept.settings_version == _config.settings_version
                and _session() is None
            ):
                return path.drive(breaker, fn, args, kwargs, call)
            breaker, upstream = find()
            if breaker is None:
                return fn(*args, **kwargs)
            return path.drive(breaker, fn, args, kwargs, call, None, upstream)

        return guarded

    return decorate
