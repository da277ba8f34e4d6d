"""The small shared base every framework adapter builds on.

An adapter names its patch points, turns a framework call into a
:class:`~otel_breaker.toolcall.ToolCall`, spots failures the framework
swallows, and builds the rejection value the framework's loop accepts. The
base does the rest: version checks, patching (:mod:`.patch`), restoring exactly
what it patched, the re-entrancy guard that counts one logical call once, and
the hand-off to the one guarded call path.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from otel_breaker.classify import IGNORED_RESULT
from otel_breaker.instrumentation.patch import distribution_version, make_wrapper, version_in_range
from otel_breaker.loglines import logger

if TYPE_CHECKING:
    from otel_breaker.degrade import Rejection
    from otel_breaker.guards import Guard

from otel_breaker.toolcall import (  # noqa: F401 - adapters import them from here
    GuardedCall,
    ToolCall,
    active_call,
    active_call_var,
    agent_display_name,
    guarded_call,
)


class DidNotEnable(Exception):
    """The framework is missing, or its version is outside the tested range."""


# ``active_call_var`` holds the guarded call in progress in this context. A wrapper
# entered while a call of the same tool is already guarded passes straight through:
# one logical call is counted once even when frameworks nest (an MCP tool inside an
# agent SDK, a tool runner that calls another patched layer).
# (The variable lives in toolcall, so the span processor reads it without importing adapters.)


# Set-up deferred until the first guarded framework call (the SDK from OTEL_*
# variables when the program configured none, the span processor). Calls that
# race to be first all wait until every step has run: a call that slipped past
# while the SDK was still being set up would lose its span and metric points.
_first_use: list[Callable[[], None]] = []
_first_use_lock = threading.RLock()  # re-entrant: a step may itself make a guarded call
_first_use_pending = False


def before_first_call(callback: Callable[[], None]) -> None:
    """Run ``callback`` once, just before the first guarded framework call."""
    global _first_use_pending
    with _first_use_lock:
        _first_use.append(callback)
        _first_use_pending = True


def _run_first_use() -> None:
    global _first_use_pending
    with _first_use_lock:
        while _first_use:
            callback = _first_use.pop(0)
            try:
                callback()
            except Exception:
                logger.exception("otel-breaker: start-up step %r failed", callback)
        _first_use_pending = False


def _reinit_first_use_lock_after_fork() -> None:
    """In a forked child only the forking thread exists: a thread that was running the
    start-up steps at the fork holds this lock there forever, and the child's first
    guarded call would wait on it. The child gets a fresh lock (the steps not yet run
    stay queued and run at its first call)."""
    global _first_use_lock
    _first_use_lock = threading.RLock()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_reinit_first_use_lock_after_fork)


class _OuterCall(GuardedCall):
    """The guarded call in progress, and the adapter as the guard sees it for that
    call: its own checks first, then what nested layers of the same call reported
    (an MCP error result inside an agent SDK's function tool, which the outer
    layer only sees as text, counts as the outer call's failure)."""

    __slots__ = ("adapter",)

    def __init__(self, adapter: FrameworkAdapter, call: ToolCall) -> None:
        super().__init__(call)
        self.adapter = adapter

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        err = self.adapter.result_error(call, result)
        if err is None and self.nested:
            return self.nested[0]
        return err

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        return self.adapter.rejection(call, info)

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        return self.adapter.exception_hint(call, exc)

    def result_hint(self, call: ToolCall, result: Any) -> str | None:
        return self.adapter.result_hint(call, result)

    def unknown_outcome(self, call: ToolCall, exc: BaseException, message: str) -> Any:
        return self.adapter.unknown_outcome(call, exc, message)

    def unknown_outcome_result(self, call: ToolCall, result: Any, message: str) -> Any:
        return self.adapter.unknown_outcome_result(call, result, message)

    def retried(self, call: ToolCall, failure: Any, note: str) -> Any:
        return self.adapter.retried(call, failure, note)

    @property
    def error_results_are_answers(self) -> bool:
        return self.adapter.error_results_are_answers


def nested_failure() -> bool:
    """Whether a nested layer of the guarded call in progress (the MCP session below a
    framework's MCP tool) has seen the tool fail; for an adapter whose framework turns
    that failure into something neutral, such as a request to retry."""
    frame = active_call_var.get()
    return frame is not None and bool(frame.nested)


def note(key: str, value: Any) -> bool:
    """Note ``(key, value)`` on the guarded call in progress (False outside one), for the
    adapter's checks of its outcome: what the framework showed of it elsewhere (a failure
    it turned into text, seen where it formats it, perhaps in a task of its own)."""
    frame = active_call_var.get()
    if frame is not None:
        frame.notes.append((key, value))
    return frame is not None


def noted(key: str) -> tuple[str, Any] | None:
    """The first note ``(key, value)`` on the guarded call in progress, if any."""
    frame = active_call_var.get()
    return next((n for n in frame.notes if n[0] == key), None) if frame is not None else None


@contextlib.contextmanager
def not_a_tool_call(name: str, framework: str | None = None) -> Iterator[None]:
    """Within the block, what runs is not a tool call of ours, though the framework
    may present it as one (a prompt function run as a plugin function, a model
    call behind a tool interface): patched tool wrappers of the same name pass
    through unguarded and the span processor leaves its ``execute_tool`` spans
    alone, exactly as for the inner layers of a call already being guarded."""
    token = active_call_var.set(GuardedCall(ToolCall(name, framework=framework)))
    try:
        yield
    finally:
        active_call_var.reset(token)


def same_logical_call(active: ToolCall | None, call: ToolCall) -> bool:
    """Whether ``call`` is an inner layer of the guarded ``active`` call: the same tool
    name, or the same known source (a framework's MCP tool, perhaps renamed or
    prefixed there, reaching the MCP session that sends it to its server)."""
    if active is None:
        return False
    return active.tool == call.tool or (active.source is not None and active.source == call.source)


class PatchTarget(NamedTuple):
    """``module:qualname`` to wrap with ``wrapper(wrapped, instance, args, kwargs)``."""

    module: str
    qualname: str
    wrapper: Callable[..., Any]
    #: The wrapper itself passes the call straight through while the adapter is
    #: disabled (``FrameworkAdapter.enabled``), so no pass-through layer is added.
    checks_enabled: bool = False


class Patched(NamedTuple):
    """One attribute an adapter replaced with its wrapper: what :meth:`FrameworkAdapter.unpatch`
    restores, if the wrapper is still the one in place. An adapter that replaces an attribute
    itself (a property, say) records it in ``patched_points`` too."""

    owner: Any
    attribute: str
    original: Any
    wrapper: Any


class FrameworkAdapter:
    """Base of one framework's adapter.

    Subclasses set ``name``, ``distribution``, ``version_range`` and implement
    ``targets()``; they override ``result_error`` and ``rejection`` where the
    framework has its own failure and rejection values.
    """

    #: Identifier used in ``OTEL_BREAKER_FRAMEWORKS`` and logs.
    name: str = ""
    #: The PyPI distribution whose version is checked.
    distribution: str = ""
    #: PEP 440 specifier of the versions this adapter was tested with.
    version_range: str = ""
    #: Modules whose import triggers patching (post-import hooks).
    modules: tuple[str, ...] = ()
    #: Whether an error result is the upstream's own answer (MCP's ``isError``: the
    #: server answered) rather than a tool exception the framework turned into a value.
    #: False: an upstream breaker reads the error's text (``classify.is_transport_text``).
    error_results_are_answers: bool = False

    def __init__(self, guard: Guard | None = None) -> None:
        if guard is not None:
            self.guard = guard
        #: Every attribute this adapter replaced, in order, for :meth:`unpatch` to restore.
        self.patched_points: list[Patched] = []
        self._enabled = False

    @functools.cached_property
    def guard(self) -> Guard:
        """The process's guard, loaded at the first tool call: patching at a framework's
        import loads none of the call path."""
        from otel_breaker.guards import default_guard

        return default_guard()

    # -- what subclasses provide ---------------------------------------------------

    def targets(self) -> list[PatchTarget]:
        raise NotImplementedError

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        """``error.type`` when a returned value is the framework's way of saying the tool failed."""
        return None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        """The value returned to the framework instead of running the tool."""
        return info.message

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        """``classify.MISTAKE`` / ``RETRY_REQUEST`` / ``CONTROL`` for an exception that
        is the model's mistake or control flow in this framework, else None."""
        return None

    def unknown_outcome(self, call: ToolCall, exc: BaseException, message: str) -> Any:
        """The framework's own error carrying ``message``, for a destructive tool's call whose
        outcome is unknown (``exc``: what it raised), where the framework hands such errors to
        the model in a form of its own (or the failed value it answers with); None:
        ``OutcomeUnknownError``."""
        return None

    def unknown_outcome_result(self, call: ToolCall, result: Any, message: str) -> Any:
        """The framework's failed value carrying ``message`` instead of ``result``, a failed
        value of a destructive tool's call in doubt; None: ``result`` as it is."""
        return None

    def retried(self, call: ToolCall, failure: Any, note: str) -> Any:
        """The last failure of a call retried below the model (an exception, or a failed
        value) carrying ``note``, the number of attempts, where the framework shows the
        model a form of its own; None: the call path's default (``call_steps.with_attempts``)."""
        return None

    def result_hint(self, call: ToolCall, result: Any) -> str | None:
        """``classify.MISTAKE`` / ``RETRY_REQUEST`` for a returned value that is the
        framework's answer to the model's mistake (arguments its schema rejects), else
        None. Neutral for the breaker either way; the loop guard counts it."""
        return None

    # -- version check -----------------------------------------------------------------

    def installed_version(self) -> str | None:
        return distribution_version(self.distribution)

    def check_version(self) -> str:
        """The installed version; raises :class:`DidNotEnable` when absent or untested."""
        version = self.installed_version()
        if version is None:
            raise DidNotEnable(f"{self.distribution} is not installed")
        if self.version_range and not version_in_range(version, self.version_range):
            raise DidNotEnable(
                f"{self.distribution} {version} is outside the tested range {self.version_range}; not patched"
            )
        return version

    # -- patching ---------------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        """Whether the wrappers guard calls: True from :meth:`patch` until :meth:`unpatch`.
        A wrapper left in place after unpatching (someone re-wrapped over it) checks this
        and passes the call straight through."""
        return self._enabled

    def patch(self) -> list[str]:
        """Wrap every target that exists; returns the ones skipped, with reasons."""
        self._enabled = True
        skipped = []
        for target in self.targets():
            reason = self._wrap(target)
            if reason:
                skipped.append(f"{target.module}:{target.qualname}: {reason}")
                logger.debug("otel-breaker: %s: skipped %s:%s (%s)", self.name, target.module, target.qualname, reason)
        return skipped

    def patch_module(self, module_name: str) -> list[str]:
        """Wrap the targets that live in ``module_name`` (for post-import hooks)."""
        self._enabled = True
        skipped = []
        for target in self.targets():
            if target.module == module_name:
                reason = self._wrap(target)
                if reason:
                    skipped.append(f"{target.module}:{target.qualname}: {reason}")
        return skipped

    def describe_targets(self) -> list[tuple[str, str]]:
        """(``module:qualname``, "found" or why not) for every target, without
        patching anything (imports the framework's modules)."""
        rows = []
        for target in self.targets():
            where = f"{target.module}:{target.qualname}"
            try:
                owner: Any = importlib.import_module(target.module)
            except Exception as exc:
                rows.append((where, f"cannot import ({type(exc).__name__}: {exc})"))
                continue
            for part in target.qualname.split("."):
                owner = getattr(owner, part, None)
                if owner is None:
                    break
            rows.append((where, "found" if owner is not None else "not found in this version"))
        return rows

    def _wrap(self, target: PatchTarget) -> str | None:
        try:
            module = importlib.import_module(target.module)
        except ImportError as exc:
            return f"cannot import ({exc})"
        owner: Any = module
        *path, attribute = target.qualname.split(".")
        for part in path:
            owner = getattr(owner, part, None)
            if owner is None:
                return "not found"
        original = owner.__dict__.get(attribute) if isinstance(owner, type) else getattr(owner, attribute, None)
        if original is None:
            return "not found"
        if any(p.owner is owner and p.attribute == attribute for p in self.patched_points):
            return "already patched"
        adapter = self

        def passthrough_when_disabled(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
            if not adapter._enabled:
                return wrapped(*args, **kwargs)
            return target.wrapper(wrapped, instance, args, kwargs)

        outer = target.wrapper if target.checks_enabled else passthrough_when_disabled
        wrapper = make_wrapper(original, outer, on_class=isinstance(owner, type))
        setattr(owner, attribute, wrapper)
        self.patched_points.append(Patched(owner, attribute, original, wrapper))
        return None

    def unpatch(self) -> None:
        """Restore exactly what this adapter wrapped.

        Where another instrumentation wrapped the same method after us, its
        wrapper stays in place and ours becomes a pass-through, so neither
        instrumentation is broken.
        """
        self._enabled = False
        for patched in reversed(self.patched_points):
            current = (
                patched.owner.__dict__.get(patched.attribute)
                if isinstance(patched.owner, type)
                else getattr(patched.owner, patched.attribute, None)
            )
            if current is patched.wrapper:
                setattr(patched.owner, patched.attribute, patched.original)
            else:
                logger.debug(
                    "otel-breaker: %s.%s was re-wrapped by someone else; leaving ours as a pass-through",
                    getattr(patched.owner, "__name__", patched.owner),
                    patched.attribute,
                )
        self.patched_points.clear()

    def patched(self) -> Iterator[str]:
        for patched in self.patched_points:
            owner = patched.owner
            owner_name = getattr(owner, "__qualname__", None) or getattr(owner, "__name__", str(owner))
            yield f"{getattr(owner, '__module__', '')}.{owner_name}.{patched.attribute}"

    # -- the call path for wrappers ------------------------------------------------------

    def run_sync(self, call: ToolCall, wrapped: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """Run a sync framework call through its breaker (once per logical call)."""
        if _first_use_pending:
            _run_first_use()
        active = active_call_var.get()
        if active is not None and same_logical_call(active.call, call):
            result = wrapped(*args, **kwargs)
            self._report_nested(active, call, result)
            return result
        frame = _OuterCall(self, call)
        token = active_call_var.set(frame)
        try:
            return self.guard.call(call, wrapped, args, kwargs, adapter=frame)
        finally:
            active_call_var.reset(token)

    async def run_async(self, call: ToolCall, wrapped: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """Run an async framework call through its breaker (once per logical call)."""
        if _first_use_pending:
            _run_first_use()
        active = active_call_var.get()
        if active is not None and same_logical_call(active.call, call):
            result = await wrapped(*args, **kwargs)
            self._report_nested(active, call, result)
            return result
        frame = _OuterCall(self, call)
        token = active_call_var.set(frame)
        try:
            return await self.guard.acall(call, wrapped, args, kwargs, adapter=frame)
        finally:
            active_call_var.reset(token)

    def _report_nested(self, active: GuardedCall, call: ToolCall, result: Any) -> None:
        """A nested layer's view of the result: a failure it sees counts for the outer call."""
        try:
            err = self.result_error(call, result)
        except Exception:
            return
        if err is not None and err != IGNORED_RESULT:
            active.nested.append(err)

    def safe_tool_call(self, build: Callable[[], ToolCall | None]) -> ToolCall | None:
        """Build a ToolCall, or None (call passes through unguarded) if the
        framework's objects are not shaped as expected."""
        try:
            return build()
        except Exception:
            logger.debug(
                "otel-breaker: %s: could not describe a tool call; running it unguarded", self.name, exc_info=True
            )
            return None
