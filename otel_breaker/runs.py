"""The run: one top-level invocation of an agent or graph, the unit of the loop guard
and of the waste budget.

A breaker remembers a broken tool across requests, because a dead backend is dead
for everyone. A model's repeated mistakes and the calls it wastes on an open tool
belong to one conversation: a model in another run has never seen that error. So
the loop guard counts identical failed calls per run, and the waste budget counts
per run how often the breaker already rejected a tool.

Adapters open a run around the top-level invocation of their framework (a graph's
``invoke``, ``Runner.run``, ``agent.run``, a crew's kickoff); a handoff or a
sub-agent inside it joins the same run. Outside any framework run, code opens one
with :func:`run` (a context manager and a decorator). Where no run is open, a call
is a run of its own.

A :class:`Run` lives in a context variable, so asyncio tasks and the threads a
framework starts with a copied context see it; nothing here is shared between
runs, so it needs no lock. What a run remembers lives on the object: an abandoned
run (a stream never finished, a task cancelled) is forgotten with it, and the loop
guard's ledger forgets its entries by its own bounds.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import os
import threading
import uuid
import weakref
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Generator
from typing import Any, TypeVar

from otel_breaker.sanitize import strip_controls

logger = logging.getLogger("otel_breaker")

#: The longest run identity kept; a longer one given by a user or a request is cut.
MAX_RUN_ID_CHARS = 128

F = TypeVar("F", bound=Callable[..., Any])


class Run:
    """One run: its identity, and what it remembers of the calls it made."""

    __slots__ = ("__weakref__", "budget_spent", "framework", "hidden", "id", "rejecting", "rejections")

    def __init__(self, run_id: str, framework: str | None = None) -> None:
        self.id = run_id
        self.framework = framework
        #: How often a breaker rejected each tool in this run, by (tool, where it runs).
        self.rejections: dict[tuple[str, str | None], int] = {}
        #: The breaker that last rejected each tool (the tool's own, or its upstream's).
        self.rejecting: dict[tuple[str, str | None], Any] = {}
        #: Tools taken out of this run's menu by the waste budget, by (tool, source): what a
        #: menu knows of a tool (an MCP server's tools have a source, a local function none),
        #: with the breaker whose recovery brings the tool back and the tool's (tool, where).
        self.hidden: dict[tuple[str, str | None], tuple[Any, tuple[str, str | None]]] = {}
        #: Tools whose waste budget was reported spent in this run (reported once each).
        self.budget_spent: set[tuple[str, str | None]] = set()

    def rejected(self, tool: str, where: str | None, by: Any = None) -> int:
        """Breaker ``by`` rejected a call of ``tool`` in this run: how many times it has now."""
        key = (tool, where)
        count = self.rejections.get(key, 0) + 1
        self.rejections[key] = count
        self.rejecting[key] = by
        return count

    def rejections_of(self, tool: str, where: str | None) -> int:
        return self.rejections.get((tool, where), 0)

    def hide(self, tool: str, source: str | None, where: str | None) -> None:
        """Take ``tool`` out of this run's menu until the breaker that rejected it recovers."""
        self.hidden[(tool, source)] = (self.rejecting.get((tool, where)), (tool, where))

    def hides(self, tool: str, source: str | None = None) -> bool:
        """Whether the waste budget took ``tool`` (from ``source``) out of this run's menu. A
        tool whose breaker has recovered since (no longer open: half-open lets its probe
        through) is back, with its budget whole: the waste was calling it while it was open."""
        if not self.hidden:
            return False
        entry = self.hidden.get((tool, source))
        if entry is None:
            return False
        breaker, key = entry
        if breaker is None or not _recovered(breaker):
            return True
        self.hidden.pop((tool, source), None)
        self.rejections.pop(key, None)
        self.budget_spent.discard(key)
        return False

    def __repr__(self) -> str:
        return f"Run({self.id!r})"


def _recovered(breaker: Any) -> bool:
    """Whether ``breaker`` no longer rejects: its state read with the cooldown applied is not
    open. A breaker that cannot be read counts as still open (the tool stays out)."""
    try:
        state = breaker.state
    except Exception:
        return False
    return getattr(state, "value", state) != "open"


_current: contextvars.ContextVar[Run | None] = contextvars.ContextVar("otel_breaker_run", default=None)
#: The variable holding the run open in a context: for an adapter's ``context_patch``
#: that puts a framework call inside a run it knows (an MCP session's listing).
RUN_VARIABLE = _current


def current_run() -> Run | None:
    """The run open in this context, if any."""
    return _current.get()


def run_identity(value: Any) -> str | None:
    """A run identity given by a user or a request (``_meta``), made safe: a string or
    a number, without control characters, at most :data:`MAX_RUN_ID_CHARS` characters.
    None for anything else, or nothing left."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    text = strip_controls(str(value)).strip()
    if not text:
        return None
    return text[:MAX_RUN_ID_CHARS]


def new_run_id() -> str:
    """A fresh run identity: random, so runs of different processes never meet."""
    return uuid.uuid4().hex


def open_run(run_id: Any = None, framework: str | None = None) -> tuple[Run, contextvars.Token | None]:
    """Open a run in this context, or join the one already open (a sub-agent, a nested
    graph): ``(run, token)``; ``token`` is None for a joined run. Pass the token to
    :func:`close_run`."""
    outer = _current.get()
    if outer is not None:
        return outer, None
    opened = Run(run_identity(run_id) or new_run_id(), framework)
    return opened, _current.set(opened)


#: Called with a run when it closes (the loop guard's ledger forgets what it kept of it).
#: A listener that raises is skipped: closing a run never fails the caller.
CLOSE_LISTENERS: list[Callable[[Run], None]] = []


def close_run(token: contextvars.Token | None) -> None:
    """Close a run :func:`open_run` opened (nothing for a joined one)."""
    if token is None:
        return
    closed = token.var.get()
    try:
        _current.reset(token)
    except ValueError:
        # Opened in another context (a generator resumed elsewhere): leave this one as it is.
        pass
    if closed is not None:
        run_closed(closed)


def run_closed(closed: Run) -> None:
    """Tell the listeners ``closed`` ended (a stream's run ends with its last step)."""
    for listener in CLOSE_LISTENERS:
        try:
            listener(closed)
        except Exception:  # one listener's failure must not skip the next
            logger.debug("otel-breaker: a run-closed listener failed", exc_info=True)


# -- runs that are an object, or a name ------------------------------------------------------------
#
# Some runs are not a call: an MCP client session is one run while it lives, and a
# request may name its run (MCP ``_meta``). Their calls enter the run with :func:`enter`
# and leave it with :func:`leave`, which does not end it: an object's run ends when the
# object is collected, a named run when it is pushed out of the bounded table.

#: Named runs kept at most (the least recently used is forgotten first).
MAX_NAMED_RUNS = 4096

_owned: weakref.WeakKeyDictionary[Any, Run] = weakref.WeakKeyDictionary()
_named: OrderedDict[str, Run] = OrderedDict()
_tables_lock = threading.Lock()


def run_of(owner: Any, framework: str | None = None) -> Run | None:
    """The run object ``owner`` is (an MCP client session), made on first use and ended
    when ``owner`` is collected; None for an object that cannot be held weakly."""
    with _tables_lock:
        try:
            found = _owned.get(owner)
        except TypeError:
            return None
        if found is not None:
            return found
        found = Run(new_run_id(), framework)
        try:
            _owned[owner] = found
        except TypeError:
            return None
    weakref.finalize(owner, run_closed, found)
    return found


def named_run(run_id: Any, framework: str | None = None) -> Run | None:
    """The run a request names (cleaned by :func:`run_identity`); None when the name is no
    usable identity. The same name finds the same run, in any session."""
    identity = run_identity(run_id)
    if identity is None:
        return None
    ended: Run | None = None
    with _tables_lock:
        found = _named.get(identity)
        if found is not None:
            _named.move_to_end(identity)
            return found
        found = _named[identity] = Run(identity, framework)
        if len(_named) > MAX_NAMED_RUNS:
            ended = _named.popitem(last=False)[1]
    if ended is not None:
        run_closed(ended)
    return found


def enter(opened: Run) -> contextvars.Token | None:
    """Make ``opened`` current for a call, unless a run is open already (a framework's run
    wins: the call joins it). Pass the token to :func:`leave`."""
    if _current.get() is not None:
        return None
    return _current.set(opened)


def leave(token: contextvars.Token | None) -> None:
    """Leave the run :func:`enter` made current; the run goes on."""
    if token is None:
        return
    try:
        _current.reset(token)
    except ValueError:
        pass


def _reinit_after_fork() -> None:
    """A lock another thread held at a fork stays held in the child: a new one."""
    global _tables_lock
    _tables_lock = threading.Lock()


os.register_at_fork(after_in_child=_reinit_after_fork)


class run:
    """Open a run for the code inside: the loop guard and the waste budget count within it,
    and a new run starts clean. Inside a run already open, it joins that run.

    ``run_id`` names the run (a conversation or request id; bounded and cleaned of
    control characters); without one, a random identity is made. It is never a metric
    label. Works with ``with`` and ``async with``, and as a decorator of functions,
    coroutine functions and generators (a generator's run spans its whole iteration).
    """

    def __init__(self, run_id: Any = None) -> None:
        self.run_id = run_id
        self._tokens: list[contextvars.Token | None] = []

    def __enter__(self) -> Run:
        opened, token = open_run(self.run_id)
        self._tokens.append(token)
        return opened

    def __exit__(self, *exc_info: Any) -> None:
        close_run(self._tokens.pop())

    async def __aenter__(self) -> Run:
        return self.__enter__()

    async def __aexit__(self, *exc_info: Any) -> None:
        self.__exit__(*exc_info)

    def __call__(self, fn: F) -> F:
        run_id = self.run_id
        if inspect.isasyncgenfunction(fn):

            @functools.wraps(fn)
            def async_generator(*args: Any, **kwargs: Any) -> Any:
                return async_steps_in_run(fn(*args, **kwargs), joined_or_new(run_id))

            return async_generator  # type: ignore[return-value]
        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def generator(*args: Any, **kwargs: Any) -> Any:
                return steps_in_run(fn(*args, **kwargs), joined_or_new(run_id))

            return generator  # type: ignore[return-value]
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def coroutine(*args: Any, **kwargs: Any) -> Any:
                with run(run_id):
                    return await fn(*args, **kwargs)

            return coroutine  # type: ignore[return-value]

        @functools.wraps(fn)
        def function(*args: Any, **kwargs: Any) -> Any:
            with run(run_id):
                return fn(*args, **kwargs)

        return function  # type: ignore[return-value]


def joined_or_new(run_id: Any = None, framework: str | None = None) -> Run:
    """The run open in this context, or a new one (not made current: for a stream,
    whose steps enter it one at a time with :func:`steps_in_run`)."""
    outer = _current.get()
    if outer is not None:
        return outer
    return Run(run_identity(run_id) or new_run_id(), framework)


def steps_in_run(generator: Generator[Any, Any, Any], opened: Run) -> Generator[Any, Any, Any]:
    """``generator``'s items, each step taken inside ``opened``. A generator runs in its
    consumer's context, so a run set across a ``yield`` would leak into the consumer (and
    stay there if the stream is abandoned); here it is current only while a step runs."""
    owned = _current.get() is not opened
    sending: Any = None
    throwing: BaseException | None = None
    while True:
        token = _current.set(opened)
        try:
            item = generator.throw(throwing) if throwing is not None else generator.send(sending)
        except StopIteration as stop:
            if owned:
                run_closed(opened)
            return stop.value
        finally:
            _current.reset(token)
        sending = None
        throwing = None
        try:
            sending = yield item
        except GeneratorExit:
            generator.close()
            raise
        except BaseException as exc:
            throwing = exc


async def async_steps_in_run(generator: AsyncGenerator[Any, Any], opened: Run) -> AsyncGenerator[Any, Any]:
    """:func:`steps_in_run` for an async generator."""
    owned = _current.get() is not opened
    sending: Any = None
    throwing: BaseException | None = None
    while True:
        token = _current.set(opened)
        try:
            item = await (generator.athrow(throwing) if throwing is not None else generator.asend(sending))
        except StopAsyncIteration:
            if owned:
                run_closed(opened)
            return
        finally:
            _current.reset(token)
        sending = None
        throwing = None
        try:
            sending = yield item
        except GeneratorExit:
            await generator.aclose()
            raise
        except BaseException as exc:
            throwing = exc


__all__ = [
    "CLOSE_LISTENERS",
    "MAX_NAMED_RUNS",
    "MAX_RUN_ID_CHARS",
    "RUN_VARIABLE",
    "Run",
    "async_steps_in_run",
    "close_run",
    "current_run",
    "enter",
    "joined_or_new",
    "leave",
    "named_run",
    "new_run_id",
    "open_run",
    "run",
    "run_closed",
    "run_identity",
    "run_of",
    "steps_in_run",
]
