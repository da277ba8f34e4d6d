"""Google GenAI (``google-genai``): the Python functions automatic function calling runs.

With Python functions in a request's ``config.tools``, ``generate_content`` (and its
stream), ``client.chats`` and the async client run the model's function calls
themselves (AFC). Each one goes through ``_extra_utils.invoke_function_from_dict_args``
(sync functions, also from the async client through ``asyncio.to_thread``) or
``invoke_function_from_dict_args_async`` (coroutine functions), both looked up in
their module when called: guarded there. The Vertex AI client (``vertexai=True``)
differs only in its transport and takes the same path.

Outcomes: the SDK wraps what the function raised in ``FunctionInvocationError``
(the original is its context, which the outcome rules read) and sends the model
``{"error": str(exc)}``. Arguments it refuses before the function runs (a value its
annotation rejects: ``UnknownFunctionCallArgumentError``; a required argument
missing: the ``TypeError`` of binding them) are the model's mistake: only the loop
guard counts them. A name no function has is not answered by the SDK at all (it
raises ``KeyError`` out of the request, with or without us). Rejection: raised as
``FunctionInvocationError(text)``, so the model reads ``{"error": text}``, the
SDK's own answer for a failed function.

There is no agent: a call is keyed by the function's name and code, and by the
agent of an enclosing framework's tool call when there is one. A run (the loop
guard's and the waste budget's scope) is one ``generate_content`` request, streamed or
not, or one chat's ``send_message`` calls while the chat lives (a streamed chat message
is a run of its own). Each model request
(``_generate_content`` and ``_generate_content_stream``) that offers Python
functions gets the status block in its ``system_instruction`` and loses the open
functions from its ``tools`` (a copy of the config; the request's function map keeps
them, so a call anyway is rejected as usual).
"""

from __future__ import annotations

import inspect
from typing import Any

from otel_breaker import runs
from otel_breaker.degrade import STATUS_HEADER, Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget
from otel_breaker.instrumentation.mistakes import Refusals, arun_invalid, run_invalid
from otel_breaker.instrumentation.patches import SKIP, argument, context_patch, prompt_patch, run_patch, tool_patch
from otel_breaker.instrumentation.spec import SpecAdapter, status_text
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall, active_call, named_agent

_EXTRA = "google.genai._extra_utils"
_MODELS = "google.genai.models"
_CHATS = "google.genai.chats"


class _Unnamed:
    """The caller of a request made outside any agent. It has no name, so the breakers
    that can reject its calls (the status block, the hidden tools) are those every
    caller shares: the ones with no agent name."""


_NO_AGENT = _Unnamed()


def _chat_run(chat: Any, args: tuple, kwargs: dict) -> Any:
    """A chat's ``send_message``: the chat's run, one while the chat lives (the model has
    seen every earlier turn of the conversation); a run open already wins."""
    if runs.current_run() is not None:
        return SKIP
    found = runs.run_of(chat, "google_genai")
    return SKIP if found is None else found


async def _async_stream(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``AsyncModels.generate_content_stream``, awaited for its stream: a run, made while
    the stream is set up and entered for each of its steps (its function calls run there)."""
    opened = runs.joined_or_new(framework="google_genai")
    token = runs.enter(opened)
    try:
        stream = await wrapped(*args, **kwargs)
    finally:
        runs.leave(token)
    if not hasattr(stream, "asend"):
        return stream
    return runs.async_steps_in_run(stream, opened)


def _run_id() -> str | None:
    """The identity of the run a function call is made in."""
    current = runs.current_run()
    return None if current is None else current.id


def _caller() -> Any:
    """Whom a model request is for: the agent of an enclosing framework's tool call, else nobody."""
    outer = active_call()
    if outer is None:
        return _NO_AGENT
    return outer.agent or outer.agent_name or _NO_AGENT


def _function_name(tool: Any) -> str | None:
    """The name AFC knows a Python function of ``config.tools`` by (None: not a function)."""
    from google.genai import types

    if not callable(tool) or isinstance(tool, types.Tool):
        return None
    name = getattr(tool, "__name__", None)
    return name if isinstance(name, str) else None


def _config(kwargs: dict) -> Any:
    """The request's ``GenerateContentConfig`` when it offers Python functions, else None."""
    from google.genai import types

    config = kwargs.get("config")
    if isinstance(config, dict):
        config = types.GenerateContentConfig(**config)
    if not isinstance(config, types.GenerateContentConfig):
        return None
    if not any(_function_name(tool) is not None for tool in config.tools or ()):
        return None
    return config


def _forced_names(config: Any) -> tuple[frozenset[str], bool]:
    """The function names ``tool_config`` restricts the model to, and whether it must call one."""
    calling = getattr(config.tool_config, "function_calling_config", None)
    if calling is None:
        return frozenset(), False
    mode = str(getattr(calling.mode, "value", calling.mode) or "").upper()
    return frozenset(calling.allowed_function_names or ()), mode in ("ANY", "VALIDATED")


def _with_block(instruction: Any, caller: Any) -> Any:
    """A ``Content`` system instruction with the status block as its last text part
    (an earlier block taken out first); None when nothing changes."""
    from google.genai import _transformers, types

    content = _transformers.t_content(instruction)
    parts = list(content.parts or ())
    kept = [part for part in parts if not (part.text or "").startswith(STATUS_HEADER)]
    block = status_text(None, caller)
    if block:
        kept.append(types.Part(text=block))
    if kept == parts:
        return None
    return content.model_copy(update={"parts": kept})


def _is_refusal(exc: BaseException) -> bool:
    """The SDK's refusal of the model's arguments, raised before the function ran."""
    from google.genai import errors

    if isinstance(exc, errors.UnknownFunctionCallArgumentError):
        return True
    return isinstance(exc, errors.FunctionInvocationError) and isinstance(exc.__context__, TypeError)


def _refused(args: tuple, kwargs: dict) -> bool:
    """Whether the SDK will refuse the model's arguments before the function runs: a value
    the annotation rejects, or a required argument missing (it drops unknown names)."""
    from google.genai import _extra_utils, errors

    function = argument(args, kwargs, 1, "function_to_invoke")
    try:
        converted = _extra_utils.convert_argument_from_function(argument(args, kwargs, 0, "args"), function)
    except errors.UnknownFunctionCallArgumentError:
        return True
    except Exception:
        return False  # the SDK raises it too, outside this check: judged as usual
    try:
        inspect.signature(function).bind(**converted)
    except TypeError:
        return True
    except ValueError:
        return False  # no signature to read: the SDK calls it as it is
    return False


class GoogleGenAIAdapter(SpecAdapter):
    name = "google_genai"
    patches = (
        tool_patch(_EXTRA, "invoke_function_from_dict_args", "sync"),
        tool_patch(_EXTRA, "invoke_function_from_dict_args_async", "async"),
        prompt_patch(_MODELS, "Models._generate_content", "sync"),
        prompt_patch(_MODELS, "Models._generate_content_stream", "sync"),
        prompt_patch(_MODELS, "AsyncModels._generate_content", "async"),
        prompt_patch(_MODELS, "AsyncModels._generate_content_stream", "async"),
        # A request is a run (its automatic function calls, streamed too); a chat's messages
        # are the chat's run.
        run_patch(_MODELS, "Models.generate_content", "sync"),
        run_patch(_MODELS, "AsyncModels.generate_content", "async"),
        run_patch(_MODELS, "Models.generate_content_stream", "gen"),
        context_patch(_CHATS, "Chat.send_message", runs.RUN_VARIABLE, _chat_run, "sync"),
        context_patch(_CHATS, "AsyncChat.send_message", runs.RUN_VARIABLE, _chat_run, "async"),
    )

    def targets(self) -> list[PatchTarget]:
        return [*super().targets(), PatchTarget(_MODELS, "AsyncModels.generate_content_stream", _async_stream)]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._refusals = Refusals(self, raised=_is_refusal)

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        function = argument(args, kwargs, 1, "function_to_invoke")
        name = getattr(function, "__name__", None)
        if not isinstance(name, str) or not name:
            return None
        outer = active_call()
        return ToolCall(
            name,
            self.name,
            agent=outer.agent if outer is not None else None,
            agent_name=outer.agent_name if outer is not None else named_agent(),
            session_id=outer.session_id if outer is not None else _run_id(),
            arguments=argument(args, kwargs, 0, "args"),
            origin=origin_of(function, "google.genai"),
        )

    def _tool_sync(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """The spec's tool wrapper; arguments the SDK refuses go to the loop guard only."""
        call = self.call_of(instance, args, kwargs)
        if call is None:
            return wrapped(*args, **kwargs)
        if _refused(args, kwargs):
            return run_invalid(self, call, self._refusals, wrapped, args, kwargs)
        return self.run_sync(call, wrapped, args, kwargs)

    async def _tool_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """The awaited :meth:`_tool_sync`."""
        call = self.call_of(instance, args, kwargs)
        if call is None:
            return await wrapped(*args, **kwargs)
        if _refused(args, kwargs):
            return await arun_invalid(self, call, self._refusals, wrapped, args, kwargs)
        return await self.run_async(call, wrapped, args, kwargs)

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        """Raised as the SDK's own error for a failed function: the model reads ``{"error": text}``."""
        from google.genai.errors import FunctionInvocationError

        raise FunctionInvocationError(info.message)

    def with_status(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """The status block in the ``system_instruction`` of a request offering Python functions."""
        config = _config(kwargs)
        if config is None:
            return None
        instruction, caller = config.system_instruction, _caller()
        if instruction is None or isinstance(instruction, str):
            new = status_text(instruction, caller)
        else:
            new = _with_block(instruction, caller)
        if new is None:
            return None
        return args, {**kwargs, "config": config.model_copy(update={"system_instruction": new})}

    def without_open_tools(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """The request's Python functions without the open ones. A function ``tool_config``
        names stays, and so does every one when the model must call a function and none
        would be left."""
        config = _config(kwargs)
        if config is None:
            return None
        forced, must_call = _forced_names(config)

        def hideable(tool: Any) -> str | None:
            name = _function_name(tool)
            return None if name in forced else name

        tools = config.tools
        kept = visible_tools(tools, hideable, agent=_caller())
        if kept is tools:
            return None
        if must_call and not any(_function_name(tool) is not None for tool in kept):
            return None
        return args, {**kwargs, "config": config.model_copy(update={"tools": list(kept)})}
