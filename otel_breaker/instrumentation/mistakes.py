"""The model's mistakes a framework answers itself, brought to the loop guard.

Arguments a tool's schema refuses and a tool name no tool has are answered by many
frameworks before (or instead of) the tool path an adapter guards: the breaker must
not count them (they say nothing about the tool), but the loop guard must, or a
model repeating the same invalid call is never told to stop. The adapters route
such calls here:

* :func:`run_invalid` / :func:`arun_invalid`: a call whose arguments the framework
  refuses. It runs as it would (the framework writes its own answer), and the loop
  guard counts what ``raised`` or ``returned`` recognise as the refusal; past the
  limit an identical call gets the adapter's rejection or raises ``ToolLoopError``;
* :func:`run_unknown` / :func:`arun_unknown`: a call of a name no tool has, keyed
  by the name. ``answered`` reads the framework's own answer (the error text when
  it refused the name as unknown, else None); past the limit the call gets ``reject`` (the adapter's
  rejection form for a name, built from the loop guard's text) or ``ToolLoopError``.

:func:`wrong_arguments` tells an adapter's ``exception_hint`` that a ``TypeError``
came from the framework handing the model's arguments to a tool that does not take them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from otel_breaker import loops
from otel_breaker.classify import CONTROL, IGNORED_RESULT, MISTAKE
from otel_breaker.degrade import Rejection
from otel_breaker.toolcall import ToolCall


def wrong_arguments(exc: BaseException, path: str) -> bool:
    """A ``TypeError`` whose innermost frame is in the framework's file ``path`` (``/``
    separated, ``"smolagents/tools.py"``), where it hands the model's arguments to the
    tool: arguments the tool does not take, refused before its body ran."""
    tb = exc.__traceback__ if isinstance(exc, TypeError) else None
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_filename.replace("\\", "/").endswith(path)


class Refusals:
    """An adapter as the loop guard sees a call the framework may refuse: what
    ``raised`` or ``returned`` recognise is the model's mistake, everything else
    is left to the breaker's own path (not counted here)."""

    __slots__ = ("adapter", "raised", "returned")

    def __init__(
        self,
        adapter: Any,
        raised: Callable[[BaseException], bool] | None = None,
        returned: Callable[[Any], bool] | None = None,
    ) -> None:
        self.adapter = adapter
        self.raised = raised
        self.returned = returned

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        if self.raised is not None and isinstance(exc, Exception) and self.raised(exc):
            return MISTAKE
        return CONTROL  # another path counts it, or nobody does

    def result_hint(self, call: ToolCall, result: Any) -> str | None:
        return MISTAKE if self.returned is not None and self.returned(result) else None

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        # Not a success either: a guarded path below may be counting this signature.
        return IGNORED_RESULT

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        return self.adapter.rejection(call, info)


def run_invalid(adapter: Any, call: ToolCall, view: Refusals, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """``fn(*args, **kwargs)``, a call the framework may refuse, through the loop guard only."""
    breaker = adapter.guard.breaker_for(call)
    if breaker is None:
        return fn(*args, **kwargs)
    return loops.run_judged(breaker, call, view, fn, args, kwargs)


async def arun_invalid(
    adapter: Any, call: ToolCall, view: Refusals, fn: Callable[..., Any], args: tuple, kwargs: dict
) -> Any:
    """The awaited :func:`run_invalid`."""
    breaker = adapter.guard.breaker_for(call)
    if breaker is None:
        return await fn(*args, **kwargs)
    return await loops.arun_judged(breaker, call, view, fn, args, kwargs)


class _Named:
    """The rejection of an unknown name, in the form ``reject`` builds from the text."""

    def __init__(self, reject: Callable[[str], Any]) -> None:
        self.reject = reject

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        return self.reject(info.message)


def run_unknown(
    call: ToolCall,
    reject: Callable[[str], Any],
    answered: Callable[[Any], str | None],
    fn: Callable[..., Any],
    args: tuple,
    kwargs: dict,
) -> Any:
    """``fn(*args, **kwargs)``, which answers a call of a name no tool has, through the loop guard."""
    answer = loops.check_unknown(call, _Named(reject))
    if answer is not loops.RUN:
        return answer
    result = fn(*args, **kwargs)
    _answered(call, answered, result)
    return result


async def arun_unknown(
    call: ToolCall,
    reject: Callable[[str], Any],
    answered: Callable[[Any], str | None],
    fn: Callable[..., Any],
    args: tuple,
    kwargs: dict,
) -> Any:
    """The awaited :func:`run_unknown`."""
    answer = loops.check_unknown(call, _Named(reject))
    if answer is not loops.RUN:
        return answer
    result = await fn(*args, **kwargs)
    _answered(call, answered, result)
    return result


def _answered(call: ToolCall, answered: Callable[[Any], str | None], result: Any) -> None:
    try:
        error = answered(result)
    except Exception:
        return
    if error is not None:
        loops.unknown_tool_called(call, str(error))
