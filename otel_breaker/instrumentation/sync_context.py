"""Context variables where a sync framework would lose them: generator steps and worker threads.

A context variable set by a patch reaches the tool wrapper below it only if the
framework runs that code in the same context. Two sync shapes break this, and both
recur: an agent loop written as a generator (it runs in its consumer's context, so a
variable set once would leak into the consumer between steps), and a decorator that
runs the decorated call in a fresh worker thread (which copies no context).
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Generator
from typing import Any


def scoped_generator(gen: Generator, var: contextvars.ContextVar[Any], value: Any) -> Generator:
    """Iterate ``gen`` with ``var`` set to ``value`` only while ``gen`` runs a step
    (values sent in and exceptions thrown in reach it as they would unwrapped)."""
    method, arg = gen.send, None
    while True:
        token = var.set(value)
        try:
            item = method(arg)
        except StopIteration as stop:
            return stop.value
        finally:
            var.reset(token)
        try:
            arg = yield item
            method = gen.send
        except GeneratorExit:
            gen.close()
            raise
        except BaseException as exc:
            method, arg = gen.throw, exc


def generator_wrapper(var: contextvars.ContextVar[Any], value: Callable[[Any, tuple, dict], Any]) -> Callable[..., Any]:
    """A ``wrapt`` wrapper for a method returning a generator: its steps run with ``var``
    set to ``value(instance, args, kwargs)`` (None from ``value``: left alone)."""

    def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        gen = wrapped(*args, **kwargs)
        try:
            current = value(instance, args, kwargs)
        except Exception:
            current = None
        if current is None or not hasattr(gen, "send"):
            return gen
        return scoped_generator(gen, var, current)

    return wrapper


def decorator_in_caller_context(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """A ``wrapt`` wrapper for a decorator factory whose decorated function runs in another
    thread: the function is decorated and called right away in the caller's thread, so the
    caller's context (the agent mark, the current span) is captured then and carried over."""
    decorator = wrapped(*args, **kwargs)
    if not callable(decorator):
        return decorator

    def decorate(func: Any) -> Any:
        context = contextvars.copy_context()

        @functools.wraps(func)
        def in_caller_context(*a: Any, **k: Any) -> Any:
            return context.copy().run(func, *a, **k)

        return decorator(in_caller_context)

    return decorate
