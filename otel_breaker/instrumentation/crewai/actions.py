"""CrewAI's ReAct path: one action of the model, retried, judged as one tool call.

On the ReAct text path CrewAI runs the model's chosen tool call as an *action*: the
entry ``ToolUsage.use`` (``ause``) calls the attempt ``ToolUsage._use`` (``_ause``),
which invokes ``CrewStructuredTool.invoke`` and, on an error, calls the entry again,
up to six times. The breaker must judge one call, once, and a rejection must reach the
model the way CrewAI reports a tool's result (its ``last_failure``, its events). So:

* the outermost entry opens an :class:`Action`; an entry inside it (a retry, or an
  action the tool itself starts) joins it (:meth:`Actions.patches` declares the entry
  and the attempt);
* the first attempt is the guarded call (:meth:`Actions.claim`); the later ones run
  unguarded inside it, and so do CrewAI's own invocations of the tool
  (:meth:`RetriedAction.joins_action`): the action counts them;
* a rejected attempt (:meth:`Actions.rejected`) runs again with every tool invocation
  in it answered by the rejection, so CrewAI records it its own way.

An :class:`Action` is one object shared by every context copied from the entry's (a
guarded call's worker thread or task marks it too), so it is changed in place.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from otel_breaker.instrumentation.patches import SKIP, Kind, Patch, context_patch, tool_patch
from otel_breaker.toolcall import ToolCall

if TYPE_CHECKING:
    from otel_breaker.degrade import Rejection


def _nothing_recorded(owner: Any) -> None:
    """The default record read when an action opens: none, so every outcome is the action's."""
    return None


class Action:
    """The action in progress: who runs it, what they had recorded before it, its guarded call."""

    __slots__ = ("before", "call", "fallback", "mistake", "owner", "rejection", "tool")

    def __init__(self, owner: Any, before: Any) -> None:
        self.owner = owner  # the ToolUsage running the action
        self.before = before  # what the owner had recorded when the action opened
        self.call: ToolCall | None = None  # the first attempt's, once claimed
        self.tool: Any = None  # CrewAI's tool object the action runs
        self.rejection: Any = None  # once rejected: what every invocation of the re-run gets
        self.fallback: Any = None  # and the answer should the re-run itself fail
        self.mistake = False  # CrewAI refused the model's arguments during it


class Actions:
    """The actions of one path: the one in progress, in the context variable ``var``.
    ``before(owner)`` reads what the entry's object had recorded when the action opened
    (its last failure), so the outcome is what the action added."""

    def __init__(self, name: str, before: Callable[[Any], Any] = _nothing_recorded) -> None:
        self.var: contextvars.ContextVar[Action | None] = contextvars.ContextVar(name, default=None)
        self.before = before

    def patches(self, module: str, entry: str, attempt: str, kind: Kind) -> tuple[Patch, Patch]:
        """The entry (opens an action, or joins the one in progress) and the attempt (a tool patch)."""
        return context_patch(module, entry, self.var, self._opened, kind), tool_patch(module, attempt, kind)

    def _opened(self, owner: Any, args: tuple, kwargs: dict) -> Any:
        """A new action for the outermost entry; an entry inside one leaves it in place."""
        if self.var.get() is not None:
            return SKIP
        return Action(owner, self.before(owner))

    def claim(self, call: ToolCall, tool: Any = None) -> ToolCall | None:
        """``call`` for the first attempt of the action in progress, which it becomes the guarded
        call of; None for a later attempt, or outside an action (both run unguarded)."""
        action = self.var.get()
        if action is None or action.call is not None:
            return None
        action.call = call
        action.tool = tool
        return call

    def of(self, call: ToolCall) -> Action | None:
        """The action ``call`` is the guarded call of (None for another call, such as a tool
        the action's tool calls in its body)."""
        action = self.var.get()
        if action is not None and action.call is call:
            return action
        return None

    def rejected(self, call: ToolCall, info: Rejection, value: Any) -> Any:
        """``value``, CrewAI's form of the rejection ``info`` of ``call``; if ``call`` is an
        action's, its attempt runs again with every tool invocation answered by ``value`` (and
        should the re-run fail, the answer is the rejection's text)."""
        action = self.of(call)
        if action is not None:
            action.rejection = value
            action.fallback = info.message
        return value

    def mistaken(self, *_: Any) -> None:
        """The action in progress refused the model's arguments: the tool never ran."""
        action = self.var.get()
        if action is not None:
            action.mistake = True


class RetriedAction:
    """Mixin for a :class:`~otel_breaker.instrumentation.spec.SpecAdapter` (before it in the
    bases) whose tool wrappers take part in ``actions``: an invocation inside a claimed
    action passes through or gets the rejection, and a rejected attempt runs again."""

    actions: ClassVar[Actions]

    def joins_action(self, tool: Any) -> bool:
        """Whether ``tool`` is CrewAI's own invocation an action makes (inside a claimed
        action it passes through: the action counts it)."""
        return False

    def _answered(self, instance: Any) -> Action | None:
        """The claimed action in progress, if it answers this invocation (rejected, or its own)."""
        action = self.actions.var.get()
        if action is None or action.call is None:
            return None
        if action.rejection is not None or self.joins_action(instance):
            return action
        return None

    def _rerun(self, result: Any) -> Action | None:
        """The action in progress, if ``result`` is its rejection (its attempt runs again)."""
        action = self.actions.var.get()
        if action is not None and result is not None and result is action.rejection:
            return action
        return None

    def _tool_sync(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        action = self._answered(instance)
        if action is not None:
            if action.rejection is not None:
                return action.rejection
            return wrapped(*args, **kwargs)
        result = super()._tool_sync(wrapped, instance, args, kwargs)  # type: ignore[misc]
        action = self._rerun(result)
        if action is None:
            return result
        # The attempt again, every invocation in it answered by the rejection: CrewAI records it.
        with contextlib.suppress(Exception):
            return wrapped(*args, **kwargs)
        return action.fallback

    async def _tool_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        action = self._answered(instance)
        if action is not None:
            if action.rejection is not None:
                return action.rejection
            return await wrapped(*args, **kwargs)
        result = await super()._tool_async(wrapped, instance, args, kwargs)  # type: ignore[misc]
        action = self._rerun(result)
        if action is None:
            return result
        with contextlib.suppress(Exception):
            return await wrapped(*args, **kwargs)
        return action.fallback
