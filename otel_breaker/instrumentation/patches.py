"""What an adapter may patch, declared: the shared shapes of a framework patch point.

An adapter holds its framework's facts only. Four shapes recur in every
framework, and each is one declaration here, built into a wrapper by
:class:`~otel_breaker.instrumentation.spec.SpecAdapter`:

* :func:`tool_patch`: where the framework runs one tool call (guarded, through
  the one call path; the adapter's ``describe`` says which call it is);
* :func:`prompt_patch`: a model call whose instructions get the tool-status block
  while ``OTEL_BREAKER_STATUS_IN_PROMPT`` is on;
* :func:`menu_patch`: a call carrying (or returning) the tools offered to the
  model, which loses the open ones while ``OTEL_BREAKER_HIDE_OPEN_TOOLS`` is on,
  and the tools the run's waste budget took out of it;
* :func:`context_patch`: a framework call during which a context variable holds
  something the framework knows there and not where a tool runs (the agent of a
  turn, the model's tool call id, "a model request is being prepared").

A fifth, :func:`observe_patch`, is a call whose result the adapter only looks at
(what the framework built, for later calls), whatever the settings. A sixth,
:func:`run_patch`, is the framework's top-level invocation of an agent or graph:
a run (:mod:`otel_breaker.runs`), the unit of the loop guard and the waste budget.

A prompt or menu patch names the adapter method that amends the call (its
``hook``). On the arguments (the default) the hook is ``hook(instance, args,
kwargs)`` and returns new ``(args, kwargs)``; on the result (``after=True``) it
is ``hook(instance, args, kwargs, result)`` and returns the new result. Either
returns None to leave the call alone, and is called only while its setting is
on; when it raises, the call goes on unchanged (logged at debug level).

This module holds the declarations, helpers for a wrapped call's arguments and
callbacks, and the context and run wrappers, none of which need an adapter; it
imports nothing of ours but :mod:`.sync_context` (which imports nothing) and
:mod:`otel_breaker.runs`, so any adapter module may use it.
"""

from __future__ import annotations

import contextvars
import functools
import types
from collections.abc import AsyncGenerator, Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, NamedTuple

from otel_breaker.instrumentation.sync_context import scoped_generator
from otel_breaker.runs import Run, async_steps_in_run, close_run, joined_or_new, open_run, run_closed, steps_in_run

Kind = Literal["sync", "async", "asyncgen", "gen"]
Role = Literal["tool", "prompt", "menu", "context", "observe", "run"]

#: Returned by a :func:`context_patch` value function: leave the variable as it is.
SKIP: Any = object()


class Patch(NamedTuple):
    """One method or function to wrap: ``module:qualname``.

    ``kind`` says how the wrapped callable runs (``sync``, ``async`` or
    ``asyncgen``: a call returning an async iterator; for a context patch also
    ``gen``, a call returning a generator), so the right wrapper is built without
    inspecting it. ``role`` is which of the shapes it is;
    ``hook``, ``after``, ``var`` and ``value`` are that shape's details (see the
    factory functions, which are the way to make one).
    """

    module: str
    qualname: str
    kind: Kind = "async"
    role: Role = "tool"
    #: prompt/menu: the name of the adapter method that amends the call (observe: that looks at it).
    hook: str | None = None
    #: prompt/menu: the hook amends the call's result rather than its arguments (observe: always).
    after: bool = False
    #: context: the variable set for the duration of the call.
    var: contextvars.ContextVar[Any] | None = None
    #: context: ``value(instance, args, kwargs)``, the variable's value (or :data:`SKIP`).
    value: Callable[[Any, tuple, dict], Any] | None = None


def tool_patch(module: str, qualname: str, kind: Kind = "async") -> Patch:
    """The place where the framework runs one tool call: guarded, once per logical call."""
    return Patch(module, qualname, kind, "tool")


def prompt_patch(
    module: str, qualname: str, kind: Kind = "async", hook: str = "with_status", after: bool = False
) -> Patch:
    """A model call whose instructions get the tool-status block.

    On the arguments, ``hook`` (default :meth:`SpecAdapter.with_status`) amends
    them while ``OTEL_BREAKER_STATUS_IN_PROMPT`` is on, and then
    :meth:`SpecAdapter.without_open_tools` while ``OTEL_BREAKER_HIDE_OPEN_TOOLS``
    is on (a model call usually carries its menu too). With ``after=True``,
    ``hook(instance, args, kwargs, result)`` amends what the call returned (the
    instructions a framework builds), for ``sync`` and ``async`` calls.
    """
    return Patch(module, qualname, kind, "prompt", hook, after)


def menu_patch(
    module: str, qualname: str, kind: Kind = "sync", hook: str = "without_open_tools", after: bool = False
) -> Patch:
    """A call carrying the tools offered to the model, amended by ``hook`` (default
    :meth:`SpecAdapter.without_open_tools`) while ``OTEL_BREAKER_HIDE_OPEN_TOOLS``
    is on: its arguments, or with ``after=True`` its result (a tool listing)."""
    return Patch(module, qualname, kind, "menu", hook, after)


def observe_patch(module: str, qualname: str, hook: str, kind: Kind = "sync") -> Patch:
    """A call whose result ``hook(instance, args, kwargs, result)`` looks at, whatever
    the settings (to remember what the framework built); the result goes back unchanged,
    and a failing hook is logged at debug level. For ``sync`` and ``async`` calls."""
    return Patch(module, qualname, kind, "observe", hook, True)


def context_patch(
    module: str,
    qualname: str,
    var: contextvars.ContextVar[Any],
    value: Callable[[Any, tuple, dict], Any],
    kind: Kind = "async",
) -> Patch:
    """A framework call run with ``var`` set to ``value(instance, args, kwargs)``.

    This is how a fact the framework knows at one call (the agent whose turn runs,
    the tool call id of a workflow step) reaches the tool wrapper or hook deeper
    down that cannot see it. The variable is reset when the call ends; for an
    ``asyncgen`` or ``gen`` call it is set only while the generator runs a step
    (tasks it creates copy it), so the consumer's context never sees it. ``value`` returns
    :data:`SKIP` (or raises) to run the call without touching the variable. For
    an ``async`` call ``value`` may be a coroutine function: a fact the framework
    only hands out awaited (a workflow's state store) is read before the call.
    ``var`` is the adapter's own module-level ``ContextVar``.
    """
    return Patch(module, qualname, kind, "context", var=var, value=value)


def run_patch(module: str, qualname: str, kind: Kind = "async") -> Patch:
    """The framework's top-level invocation of an agent or graph: a run (``runs.py``).
    The loop guard and the waste budget count within it; an invocation inside a run
    already open (a sub-agent, a handoff, a nested graph) joins it. For a ``gen`` or
    ``asyncgen`` call the run is current only while the stream runs a step, and ends
    with its last one."""
    return Patch(module, qualname, kind, "run")


def run_wrapper(patch: Patch) -> Callable[..., Any]:
    """The ``wrapt`` wrapper of a :func:`run_patch`."""
    if patch.kind == "sync":

        def sync(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
            token = open_run(framework=patch.module)[1]
            try:
                return wrapped(*args, **kwargs)
            finally:
                close_run(token)

        return sync

    if patch.kind == "async":

        async def run_async(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
            token = open_run(framework=patch.module)[1]
            try:
                return await wrapped(*args, **kwargs)
            finally:
                close_run(token)

        return run_async

    def stream(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        iterator = wrapped(*args, **kwargs)
        opened = joined_or_new(framework=patch.module)
        if patch.kind == "gen" and hasattr(iterator, "send"):
            return steps_in_run(iterator, opened)
        if patch.kind == "asyncgen" and hasattr(iterator, "asend"):
            return async_steps_in_run(iterator, opened)
        return iterator

    return stream


def run_in_tasks(wrapped: Any, args: tuple, kwargs: dict, framework: str) -> tuple[Any, Run | None]:
    """Call ``wrapped``, a call that starts the run's work in tasks and returns at once
    (a streamed result, a workflow's handler), with a run open while it starts them:
    a task copies the context it is created in, so the run goes on in the tasks while
    the caller's context is left as it was. ``(result, run)``: ``run`` is None where a
    run was open already (joined); else the caller ends it with :func:`ending_with`."""
    opened, token = open_run(framework=framework)
    if token is None:
        return wrapped(*args, **kwargs), None
    try:
        result = wrapped(*args, **kwargs)
    except BaseException:
        close_run(token)
        raise
    token.var.reset(token)
    return result, opened


def ending_with(task: Any, opened: Run | None) -> None:
    """End ``opened`` (from :func:`run_in_tasks`) when ``task`` is done; at once where
    ``task`` is not one (the work's tasks still hold the run, only its ending is early)."""
    if opened is None:
        return
    if not callable(getattr(task, "add_done_callback", None)):
        run_closed(opened)
        return
    task.add_done_callback(functools.partial(_task_done, opened))


def _task_done(opened: Run, task: Any) -> None:
    run_closed(opened)


def argument(args: tuple, kwargs: dict, index: int, name: str, default: Any = None) -> Any:
    """A wrapped call's argument given by position ``index`` or keyword ``name``."""
    return args[index] if len(args) > index else kwargs.get(name, default)


def with_argument(args: tuple, kwargs: dict, index: int, name: str, value: Any) -> tuple[tuple, dict]:
    """``(args, kwargs)`` with that argument replaced (copies; the caller's are untouched)."""
    if len(args) > index:
        return (*args[:index], value, *args[index + 1 :]), kwargs
    return args, {**kwargs, name: value}


def closure_value(fn: Any, name: str) -> Any:
    """What the closure of function ``fn`` holds for its free variable ``name``."""
    return fn.__closure__[fn.__code__.co_freevars.index(name)].cell_contents


def rebind(fn: Any, name: str, value: Any) -> types.FunctionType:
    """A copy of function ``fn`` whose free variable ``name`` holds ``value``: a framework
    callback amended without touching the closure it shares with its maker."""
    closure = list(fn.__closure__)
    closure[fn.__code__.co_freevars.index(name)] = types.CellType(value)
    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, tuple(closure))


# -- context wrappers ----------------------------------------------------------------------


@contextmanager
def scoped(var: contextvars.ContextVar[Any], value: Any) -> Iterator[None]:
    """``var`` set to ``value`` within the block, and back to what it was after (a fact
    an adapter reads at one framework call for the tool calls under it)."""
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


def context_wrapper(patch: Patch) -> Callable[..., Any]:
    """The ``wrapt`` wrapper of a :func:`context_patch`."""
    var, value = patch.var, patch.value
    assert var is not None and value is not None, "a context patch needs var and value"

    def read(instance: Any, args: tuple, kwargs: dict) -> Any:
        try:
            return value(instance, args, kwargs)
        except Exception:
            return SKIP

    if patch.kind == "sync":

        def sync(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
            current = read(instance, args, kwargs)
            if current is SKIP:
                return wrapped(*args, **kwargs)
            token = var.set(current)
            try:
                return wrapped(*args, **kwargs)
            finally:
                var.reset(token)

        return sync

    if patch.kind == "async":

        async def run_async(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
            current = read(instance, args, kwargs)
            if hasattr(current, "__await__"):
                try:
                    current = await current
                except Exception:
                    current = SKIP
            if current is SKIP:
                return await wrapped(*args, **kwargs)
            token = var.set(current)
            try:
                return await wrapped(*args, **kwargs)
            finally:
                var.reset(token)

        return run_async

    # A generator (``gen``) or an async generator (``asyncgen``): the variable is set around each step.
    scoped, step = (scoped_generator, "send") if patch.kind == "gen" else (scoped_steps, "asend")

    def steps(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        current = read(instance, args, kwargs)
        iterator = wrapped(*args, **kwargs)
        if current is SKIP or not hasattr(iterator, step):
            return iterator
        return scoped(iterator, var, current)

    return steps


async def scoped_steps(agen: Any, var: contextvars.ContextVar[Any], value: Any) -> AsyncGenerator[Any, Any]:
    """Iterate ``agen`` with ``var`` set to ``value`` only while ``agen`` runs a step
    (values sent in and exceptions thrown in reach it as they would unwrapped)."""
    method, arg = agen.asend, None
    while True:
        token = var.set(value)
        try:
            item = await method(arg)
        except StopAsyncIteration:
            return
        finally:
            var.reset(token)
        try:
            arg = yield item
            method = agen.asend
        except GeneratorExit:
            await agen.aclose()
            raise
        except BaseException as exc:
            method, arg = agen.athrow, exc
