"""Declarative framework adapters: a framework is described, not re-implemented.

An adapter built on :class:`SpecAdapter` states

* ``requires``: one PEP 508 requirement (``"strands-agents>=1.62,<2"``), the one
  source of its tested range: the version check, ``otel-breaker doctor``, the
  instrumentor's dependencies (``instrumentor.instruments_any``) and the pyproject
  extras test all read it;
* ``patches``: what to wrap, declared with :mod:`otel_breaker.instrumentation.patches`
  (:func:`tool_patch`, :func:`prompt_patch`, :func:`menu_patch`,
  :func:`context_patch`, :func:`observe_patch`), each a module, a qualname and
  how it runs (``sync``, ``async`` or ``asyncgen``);
* ``describe(instance, args, kwargs) -> ToolCall | None``: who calls which tool;
* optionally ``is_neutral(exc)``: exceptions a tool raises that are control flow
  or the caller's mistake (neither failure nor success), and
  ``without_open_tools(instance, args, kwargs)``: a model call's tool menu
  without the open tools (``OTEL_BREAKER_HIDE_OPEN_TOOLS``, see
  :mod:`otel_breaker.menu`), on a :func:`prompt_patch` or :func:`menu_patch`.

The base builds every wrapper from those: the sync, async and async-generator
tool wrappers (once per logical call, through the one guarded call path), the
prompt and menu wrappers that call their hooks only while
``OTEL_BREAKER_STATUS_IN_PROMPT`` / ``OTEL_BREAKER_HIDE_OPEN_TOOLS`` is on (a
failing hook leaves the call unchanged), and the context wrappers. ``result_error`` (failures the framework
turns into a value) and ``rejection`` (the framework's own error value, so its
loop goes on) stay overridable, as does anything else a framework needs.

The status block goes in through one inserter: :func:`insert_status_block` for a
list of messages in a framework's :class:`MessageDialect`, or
:func:`status_text` for a plain instructions string.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, NamedTuple

from otel_breaker.catalogue import BY_ID
from otel_breaker.classify import CONTROL
from otel_breaker.degrade import augment_instructions, status_in_prompt_enabled
from otel_breaker.instrumentation.base import FrameworkAdapter, PatchTarget
from otel_breaker.instrumentation.patches import (  # noqa: F401 - the declarations adapters make
    SKIP,
    Kind,
    Patch,
    argument,
    context_patch,
    context_wrapper,
    menu_patch,
    observe_patch,
    prompt_patch,
    run_patch,
    run_wrapper,
    tool_patch,
    with_argument,
)
from otel_breaker.loglines import logger
from otel_breaker.menu import menu_may_change
from otel_breaker.toolcall import ToolCall

# -- the one status-block inserter -----------------------------------------------------


class MessageDialect(NamedTuple):
    """How a framework spells a message list, for :func:`insert_status_block`.

    ``text`` returns a message's text, or None when its content is not plain
    text (then it is left alone); ``with_text`` returns the message with new
    text (a copy, so the framework's own history is never edited); ``system``
    builds a new system message.
    """

    is_system: Callable[[Any], bool]
    text: Callable[[Any], str | None]
    with_text: Callable[[Any, str], Any]
    system: Callable[[str], Any]


def status_text(text: str | None, agent: Any = None) -> str | None:
    """``text`` (instructions) with the current status block; None when unchanged.

    Off (None) unless ``OTEL_BREAKER_STATUS_IN_PROMPT`` is on. An earlier block
    is replaced, so amending on every turn never stacks blocks.
    """
    if not status_in_prompt_enabled():
        return None
    new = augment_instructions(text, agent)
    if new == text or (not new and not text):
        return None
    return new or ""


def insert_status_block(messages: Iterable[Any], dialect: MessageDialect, agent: Any = None) -> list[Any] | None:
    """A new list with the status block in the first system message (one is put
    first when there is none), or None when nothing would change."""
    if not status_in_prompt_enabled():
        return None
    messages = list(messages)
    index = next((i for i, m in enumerate(messages) if dialect.is_system(m)), None)
    if index is None:
        block = status_text(None, agent)
        return [dialect.system(block), *messages] if block else None
    current = dialect.text(messages[index])
    if current is None:
        return None
    new = status_text(current, agent)
    if new is None:
        return None
    messages[index] = dialect.with_text(messages[index], new)
    return messages


# -- the adapter -----------------------------------------------------------------------------


class SpecAdapter(FrameworkAdapter):
    """A framework adapter from a declaration; subclasses set ``name``,
    ``requires`` and ``patches`` and implement :meth:`describe`."""

    #: PEP 508 requirement with the tested range; a catalogued framework's comes
    #: from :mod:`otel_breaker.catalogue`, the one source of it.
    requires: str = ""
    #: What to wrap.
    patches: tuple[Patch, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.requires and cls.name in BY_ID:  # the catalogue holds our frameworks' requirements
            cls.requires = BY_ID[cls.name].requirement
        if cls.requires:
            cls.distribution, cls.version_range = split_requirement(cls.requires)
        if cls.patches and not cls.modules:
            cls.modules = tuple(dict.fromkeys(p.module for p in cls.patches))

    # -- what subclasses provide ----------------------------------------------------------

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        """The tool call a wrapped tool method is about to make; None runs it unguarded
        (not a tool call we guard: an unknown tool, a framework-internal call)."""
        raise NotImplementedError

    def with_status(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """A prompt patch's ``(args, kwargs)`` with the status block in its instructions,
        or None to leave the call alone. Called only while the setting is on."""
        return None

    def without_open_tools(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """A prompt or menu patch's ``(args, kwargs)`` with the open tools off the
        menu (:func:`otel_breaker.menu.visible_tools`), or None to leave the call
        alone. Called only while ``OTEL_BREAKER_HIDE_OPEN_TOOLS`` is on."""
        return None

    def is_neutral(self, exc: BaseException) -> bool:
        """True for an exception a tool raises that says nothing about the tool's
        health (control flow, a pause for a person, the caller's mistake): it
        propagates unchanged and counts neither as failure nor success."""
        return False

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        """``CONTROL`` for what :meth:`is_neutral` accepts (an override that reads
        other exceptions returns ``super().exception_hint(...)`` for the rest)."""
        try:
            return CONTROL if self.is_neutral(exc) else None
        except Exception:
            logger.debug("otel-breaker: %s: is_neutral failed", self.name, exc_info=True)
            return None

    def stream_result(self, events: list[Any]) -> Any:
        """The result of an ``asyncgen`` tool call, from the events it yielded (the last one)."""
        return events[-1] if events else None

    # -- wrappers built from the declaration ----------------------------------------------

    def targets(self) -> list[PatchTarget]:
        """One target per patched method. Patches declared on the same method nest, the
        first innermost (a context patch scoping the call, a menu patch on its result)."""
        targets: dict[tuple[str, str], PatchTarget] = {}
        for p in self.patches:
            wrapper, inner = self._wrapper(p), targets.get((p.module, p.qualname))
            if inner is not None:
                wrapper = _around(wrapper, inner.wrapper)
            checks = p.role == "tool" and (inner is None or inner.checks_enabled)
            targets[(p.module, p.qualname)] = PatchTarget(p.module, p.qualname, wrapper, checks_enabled=checks)
        return list(targets.values())

    def _wrapper(self, patch: Patch) -> Callable[..., Any]:
        if patch.role == "context":
            return context_wrapper(patch)
        if patch.role == "run":
            return run_wrapper(patch)
        if patch.role in ("prompt", "menu", "observe"):
            if patch.after:
                return self._after_wrapper(patch)
            if patch.role == "prompt" and patch.hook in (None, "with_status"):
                return self._prompt_call
            hook = getattr(self, patch.hook or "without_open_tools")
            enabled = status_in_prompt_enabled if patch.role == "prompt" else menu_may_change

            def amend_arguments(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
                if enabled():
                    args, kwargs = self._amend(hook, f"amend {patch.qualname}", instance, args, kwargs)
                return wrapped(*args, **kwargs)

            return amend_arguments
        return {"sync": self._tool_sync, "async": self._tool_async, "asyncgen": self._tool_stream}[patch.kind]

    def _after_wrapper(self, patch: Patch) -> Callable[..., Any]:
        """The wrapper of a prompt, menu or observe patch on the call's result."""
        hook = getattr(self, patch.hook or ("with_status" if patch.role == "prompt" else "without_open_tools"))
        enabled = {"prompt": status_in_prompt_enabled, "menu": menu_may_change}.get(patch.role, _always)
        observe = patch.role == "observe"
        what = f"{'observe' if observe else 'amend'} the result of {patch.qualname}"

        def amended(instance: Any, args: tuple, kwargs: dict, result: Any) -> Any:
            try:
                new = hook(instance, args, kwargs, result)
            except Exception:
                logger.debug("otel-breaker: %s: could not %s", self.name, what, exc_info=True)
                return result
            return result if new is None or observe else new

        if patch.kind == "async":

            async def after_async(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
                result = await wrapped(*args, **kwargs)
                return amended(instance, args, kwargs, result) if enabled() else result

            return after_async

        def after_sync(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
            result = wrapped(*args, **kwargs)
            return amended(instance, args, kwargs, result) if enabled() else result

        return after_sync

    def call_of(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        """:meth:`describe`, or None (the call runs unguarded) when the adapter is
        disabled or the framework's objects are not shaped as expected
        (``safe_tool_call``, inlined: per call).

        The tool wrappers ask this first, so they pass a call straight through while
        the adapter is disabled (``PatchTarget.checks_enabled``: no pass-through
        layer under them). An override that does work before asking (a context
        variable, say) must stay harmless while disabled."""
        if not self.enabled:
            return None
        try:
            return self.describe(instance, args, kwargs)
        except Exception:
            logger.debug(
                "otel-breaker: %s: could not describe a tool call; running it unguarded", self.name, exc_info=True
            )
            return None

    def _tool_sync(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        call = self.call_of(instance, args, kwargs)
        if call is None:
            return wrapped(*args, **kwargs)
        return self.run_sync(call, wrapped, args, kwargs)

    async def _tool_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        call = self.call_of(instance, args, kwargs)
        if call is None:
            return await wrapped(*args, **kwargs)
        return await self.run_async(call, wrapped, args, kwargs)

    def _tool_stream(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> AsyncIterator[Any]:
        call = self.call_of(instance, args, kwargs)
        if call is None:
            return wrapped(*args, **kwargs)
        return self._run_stream(call, wrapped, args, kwargs)

    async def _run_stream(self, call: ToolCall, wrapped: Any, args: tuple, kwargs: dict) -> AsyncIterator[Any]:
        """Guard an async generator: its events pass through one by one as it yields
        them (the tool runs in lockstep with the consumer, as unguarded), the breaker
        judges the result picked by :meth:`stream_result`, and a rejected call
        yields the single rejection value instead of running.

        The guarded call runs in a task (the guard takes a coroutine), which
        hands each event over and waits until the consumer asks for the next. A
        breaker ``timeout`` therefore covers the whole stream, including the time
        the consumer spends between events.
        """
        import asyncio  # streams only: a framework's import does not pay for asyncio

        handoff: asyncio.Queue[tuple[Any, asyncio.Event]] = asyncio.Queue(maxsize=1)
        ran = False

        async def body() -> Any:
            nonlocal ran
            ran = True
            events: list[Any] = []
            stream = wrapped(*args, **kwargs)
            try:
                async for event in stream:
                    events.append(event)
                    taken = asyncio.Event()
                    await handoff.put((event, taken))
                    await taken.wait()
            finally:
                await stream.aclose()
            return self.stream_result(events)

        task = asyncio.ensure_future(self.run_async(call, body, (), {}))
        try:
            while True:
                getter = asyncio.ensure_future(handoff.get())
                await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    event, taken = getter.result()
                    yield event
                    taken.set()
                    continue
                getter.cancel()
                outcome = task.result()  # the tool's exception, or the guard's, propagates
                if not ran:
                    yield outcome  # the rejection value
                return
        finally:
            if not task.done():
                task.cancel()
                try:
                    await task
                except BaseException:
                    pass

    def _prompt_call(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """A model call (sync, async or streaming: whatever it returns is returned),
        made with the status block in its instructions and the open tools off its
        menu, each only while its setting is on."""
        if status_in_prompt_enabled():
            args, kwargs = self._amend(self.with_status, "add the tool-status block", instance, args, kwargs)
        if menu_may_change():
            args, kwargs = self._amend(self.without_open_tools, "hide open tools", instance, args, kwargs)
        return wrapped(*args, **kwargs)

    def _amend(self, hook: Callable[..., Any], what: str, instance: Any, args: tuple, kwargs: dict) -> tuple:
        """``hook``'s new ``(args, kwargs)``, or the call unchanged when it declines or fails."""
        try:
            amended = hook(instance, args, kwargs)
        except Exception:
            amended = None
            logger.debug("otel-breaker: %s: could not %s", self.name, what, exc_info=True)
        return (args, kwargs) if amended is None else amended


def _always() -> bool:
    return True


def _around(outer: Callable[..., Any], inner: Callable[..., Any]) -> Callable[..., Any]:
    """The wrapper ``outer`` around the wrapper ``inner`` of the same call."""

    def nested(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        return outer(lambda *a, **k: inner(wrapped, instance, a, k), instance, args, kwargs)

    return nested


# -- version requirements: one source -----------------------------------------------------


_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*((?:[<>=!~]=?[^,;\s]+\s*,?\s*)*)$")


def split_requirement(requirement: str) -> tuple[str, str]:
    """``("google-adk", "<3,>=2.13")`` from ``"google-adk>=2.13,<3"`` (the specifiers
    sorted, as ``packaging`` prints them). Each adapter class is declared with one, so
    this runs when a framework is imported: a name and version specifiers only, read
    without ``packaging.requirements`` (tens of milliseconds to import)."""
    match = _REQUIREMENT.match(requirement)
    if match is None:
        raise ValueError(f"not a 'name<specifiers>' requirement: {requirement!r}")
    specifiers = sorted(part.replace(" ", "") for part in match.group(2).split(",") if part.strip())
    return match.group(1), ",".join(specifiers)


def requirement_of(adapter_class: type[FrameworkAdapter]) -> str:
    """The PEP 508 requirement an adapter was tested with."""
    requires = getattr(adapter_class, "requires", "")
    if requires:
        return requires
    from packaging.specifiers import SpecifierSet

    # Sorted like packaging prints a specifier, so both adapter styles read alike.
    return f"{adapter_class.distribution}{SpecifierSet(adapter_class.version_range or '')}"
