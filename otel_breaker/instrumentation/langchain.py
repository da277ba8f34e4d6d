"""LangChain / LangGraph: every tool call passes through ``BaseTool.run`` or ``BaseTool.arun``.

Why these two methods: ``invoke``/``ainvoke``, LangGraph's ``ToolNode`` (sync
calls in its thread pool, async calls on the loop) and agents built on either
all end in exactly one of them, and no tool class in langchain-core overrides
them. A sync tool called through ``ainvoke`` runs ``run`` in a worker thread,
so each logical call is still counted once.

Failures: an exception leaving ``run`` is counted by the guard. A
``ToolException`` the tool handles itself (``handle_tool_error``) is turned
into an error ``ToolMessage`` or a plain string inside ``run``; the module
function ``_handle_tool_error`` is wrapped to notice that. Argument
validation errors are the model's mistake, not the tool's, and are never
counted: handled ones (``_handle_validation_error``) and also unhandled ones,
which leave ``run`` and which LangGraph's ``ToolNode`` turns into an error
message for the model. An unhandled one is told apart from a validation
error raised by the tool body by where it was raised: its traceback passes
through ``_to_args_and_kwargs``/``_parse_input``, where langchain-core parses the
arguments (read only for a call that raised: nothing is added to a healthy call).

MCP tools (langchain-mcp-adapters): a tool made from an MCP server's tool
carries that server's identity as ``ToolCall.source`` (see ``langchain_mcp``),
so two servers' ``search`` tools never share a breaker.

Agents: ``langchain.agents.create_agent(name=...)`` puts ``lc_agent_name`` in
the run's metadata. A LangGraph graph compiled with a name
(``create_react_agent(name=...)``, ``StateGraph.compile(name=...)``) marks the
runs it starts under a private ``configurable`` key (``__``-prefixed keys
reach neither traces nor checkpoints); an unnamed subgraph clears it, and the
node it runs as (read from the checkpoint namespace) names the agent then.

Rejection: ``ToolNode`` accepts only a ``ToolMessage`` (a string raises
``TypeError`` there, and an exception ends the graph under its default error
handler), so an open breaker answers with ``ToolMessage(status="error")``
carrying the call's ``tool_call_id``; a direct call without a tool call id gets
the text, as ``run`` itself would return it.

Tool status in the prompt (``OTEL_BREAKER_STATUS_IN_PROMPT``): every chat model
call of an agent loop enters ``BaseChatModel.invoke``, ``ainvoke``, ``stream`` or
``astream`` (LangGraph's model nodes, ``create_agent``, chains; ``batch`` and the
event streams end in these too), each with the messages about to be sent and the
call's config. When the setting is on and a tool the agent can call is open or
half-open, the first ``SystemMessage`` gets the status block appended (a system
message is put first when there is none). Only the messages passed to that one
call change: the graph's state is left alone, so each call shows the state of
that moment. With the setting off the messages pass through untouched.

Open tools off the menu (``OTEL_BREAKER_HIDE_OPEN_TOOLS``): a model's bound
tools (``bind_tools``, as LangGraph's agents bind them) reach those same entry
points as the call's ``tools``; an open tool is dropped from that list for the
one call, and is back once its breaker is half-open. A call to it anyway gets
the usual rejection. Tools are matched by name (a bound definition carries no
MCP server).
"""

from __future__ import annotations

import logging
from typing import Any

from otel_breaker.classify import MISTAKE
from otel_breaker.degrade import STATUS_HEADER, Rejection, augment_instructions
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget, guarded_call
from otel_breaker.instrumentation.langchain_mcp import SESSION_MODULE, TOOLS_MODULE, MCPToolSources
from otel_breaker.instrumentation.spec import (
    MessageDialect,
    SpecAdapter,
    insert_status_block,
    prompt_patch,
    tool_patch,
)
from otel_breaker.menu import hide_open_tools_enabled, visible_tools
from otel_breaker.toolcall import ToolCall

_MODULE = "langchain_core.tools.base"
_CHAT_MODULE = "langchain_core.language_models.chat_models"
_GRAPH_MODULE = "langgraph.pregel.main"
# The name of the innermost named graph running, in ``configurable`` (private: "__" keys).
_GRAPH_KEY = "__otel_breaker_graph"
_DEFAULT_GRAPH_NAME = "LangGraph"

logger = logging.getLogger("otel_breaker")


def _agent_name(config: dict, metadata: dict) -> str | None:
    """The agent a tool call belongs to, as far as LangChain tells.

    ``langchain.agents.create_agent`` sets ``lc_agent_name``. In a LangGraph
    multi-agent graph each agent is a subgraph node, and the checkpoint
    namespace of its tool node reads ``<agent node>:<task>|tools:<task>``.
    """
    name = metadata.get("lc_agent_name")
    if isinstance(name, str) and name:
        return name
    name = (config.get("configurable") or {}).get(_GRAPH_KEY)
    if isinstance(name, str) and name:
        return name
    namespace = metadata.get("langgraph_checkpoint_ns") or (config.get("configurable") or {}).get("checkpoint_ns")
    if isinstance(namespace, str) and "|" in namespace:
        parent = namespace.split("|")[-2].split(":", 1)[0]
        if parent:
            return parent
    return None


class LangChainAdapter(SpecAdapter):
    """Guards langchain-core tools, including LangGraph's ``ToolNode``."""

    name = "langchain"
    patches = (
        tool_patch(_MODULE, "BaseTool.run", "sync"),
        tool_patch(_MODULE, "BaseTool.arun", "async"),
        # The tool-status block, on the messages of every chat model call.
        *(prompt_patch(_CHAT_MODULE, f"BaseChatModel.{m}") for m in ("invoke", "ainvoke", "stream", "astream")),
    )
    modules = (_MODULE, _CHAT_MODULE, _GRAPH_MODULE, TOOLS_MODULE, SESSION_MODULE)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._mcp = MCPToolSources()

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            PatchTarget(_MODULE, "_handle_tool_error", self._note("tool")),
            PatchTarget(_MODULE, "_handle_validation_error", self._note("validation")),
            # Graph names, for the agent a tool call belongs to.
            PatchTarget(_GRAPH_MODULE, "Pregel.stream", self._graph_run),
            PatchTarget(_GRAPH_MODULE, "Pregel.astream", self._graph_run),
            # The MCP server of tools made by langchain-mcp-adapters: ToolCall.source.
            *self._mcp.targets(),
        ]

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        name = getattr(instance, "name", None)
        if not isinstance(name, str) or not name:
            return None
        config = kwargs.get("config")
        agent_name = session = None
        if config and isinstance(config, dict):  # a direct invoke() passes none: nothing to read
            metadata = config.get("metadata") or {}
            configurable = config.get("configurable") or {}
            agent_name = _agent_name(config, metadata)
            session = configurable.get("thread_id") or metadata.get("thread_id")
        call_id = kwargs.get("tool_call_id")
        # Positional, in ToolCall's field order (a keyword call costs more, on every tool call):
        # tool, framework, agent, agent_name, session_id, call_id, tool_type, source, arguments, origin.
        # No agent object reaches a tool; a known agent name keys the breaker instead
        # (the registry keys unreferenceable agents by name).
        return ToolCall(
            name,
            self.name,
            agent_name,
            agent_name,
            str(session) if session is not None else None,
            str(call_id) if call_id is not None else None,
            "function",
            self._mcp.source_of(instance),
            args[0] if args else kwargs.get("tool_input"),
            origin_of(instance, "langchain_core"),
        )

    # -- errors handled inside the guarded call, noted on it ----------------------------------

    @staticmethod
    def _note(kind: str) -> Any:
        """A wrapper for ``_handle_tool_error``/``_handle_validation_error``: note what was handled."""

        def note(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
            frame = guarded_call()
            if frame is not None and args:
                frame.notes.append((kind, type(args[0]).__name__))
            return wrapped(*args, **kwargs)

        return note

    def _graph_run(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``Pregel.stream``/``astream``: the run's config carries this graph's name
        (or none, for an unnamed graph) to the tools it calls."""
        try:
            args, kwargs = _with_graph_name(instance, args, kwargs)
        except Exception:
            logger.debug("otel-breaker: langchain: could not mark the graph's name", exc_info=True)
        return wrapped(*args, **kwargs)

    # -- outcomes ------------------------------------------------------------------------------

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        return MISTAKE if _raised_parsing_arguments(exc) else None

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        frame = guarded_call()
        seen = frame.notes if frame is not None else None
        if seen:
            kind, error = seen[-1]
            return error if kind == "tool" else None
        # A tool may also return an error ToolMessage itself.
        if getattr(result, "type", None) == "tool" and getattr(result, "status", None) == "error":
            return "tool_error"
        return None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        if call.call_id is None:
            return info.message
        from langchain_core.messages import ToolMessage

        return ToolMessage(info.message, tool_call_id=call.call_id, name=call.tool, status="error")

    # -- the model's menu (OTEL_BREAKER_HIDE_OPEN_TOOLS) ---------------------------------------------

    def _prompt_call(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """A chat model call: open tools taken out of the tools bound to it
        (``bind_tools`` puts them in the call's ``tools``), then the status block."""
        if kwargs.get("tools") and hide_open_tools_enabled():
            try:
                config = args[1] if len(args) > 1 else kwargs.get("config")
                tools = visible_tools(kwargs["tools"], _definition_name, agent=_agent_of(config))
                if tools is not kwargs["tools"]:
                    kwargs = {**kwargs, "tools": tools}
            except Exception:
                logger.debug("otel-breaker: langchain: could not hide open tools", exc_info=True)
        return super()._prompt_call(wrapped, instance, args, kwargs)

    # -- the tool-status block ----------------------------------------------------------------

    def with_status(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """A chat model call's ``(args, kwargs)`` with its input replaced by the
        messages carrying the status block; None when nothing changes."""
        if args:
            model_input, config = args[0], (args[1] if len(args) > 1 else kwargs.get("config"))
        elif "input" in kwargs:
            model_input, config = kwargs["input"], kwargs.get("config")
        else:
            return None
        messages = _status_messages(instance, model_input, config)
        if messages is None:
            return None
        return ((messages, *args[1:]), kwargs) if args else (args, {**kwargs, "input": messages})


# Where langchain-core parses a call's arguments, and where it enters the tool body.
_PARSING_FRAMES = frozenset({"_to_args_and_kwargs", "_parse_input"})
_BODY_FRAMES = frozenset({"_run", "_arun"})


def _raised_parsing_arguments(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while langchain-core parsed the model's arguments,
    not by the tool body: going down its traceback (``run`` re-raises the exception
    object, which keeps the frames it was first raised through), the first of
    langchain-core's tool frames that parses arguments or enters a body is a
    parsing one. (A tool whose body calls another tool with bad arguments has failed.)"""
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        name = frame.f_code.co_name
        if (name in _PARSING_FRAMES or name in _BODY_FRAMES) and str(frame.f_globals.get("__name__", "")).startswith(
            "langchain_core.tools"
        ):
            return name in _PARSING_FRAMES
        tb = tb.tb_next
    return False


def _with_graph_name(graph: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``(args, kwargs)`` of ``Pregel.stream(input, config, ...)`` with the graph's
    name under ``_GRAPH_KEY`` in a copy of the config's ``configurable``."""
    name = getattr(graph, "name", None)
    name = name if isinstance(name, str) and name and name != _DEFAULT_GRAPH_NAME else None
    config = args[1] if len(args) > 1 else kwargs.get("config")
    if config is not None and not isinstance(config, dict):
        return args, kwargs
    configurable = (config or {}).get("configurable") or {}
    if configurable.get(_GRAPH_KEY) == name:
        return args, kwargs
    config = {**(config or {}), "configurable": {**configurable, _GRAPH_KEY: name}}
    if len(args) > 1:
        return (args[0], config, *args[2:]), kwargs
    return args, {**kwargs, "config": config}


def _agent_of(config: Any) -> str | None:
    """The agent of a model call, from its config (and the runnable it runs inside)."""
    from langchain_core.runnables.config import ensure_config

    merged = ensure_config(config if isinstance(config, dict) else None)
    return _agent_name(merged, merged.get("metadata") or {})


def _definition_name(definition: Any) -> str | None:
    """The name of a bound tool: a provider's tool dict (``{"function": {"name"}}``,
    ``{"name"}``) or a LangChain tool."""
    if isinstance(definition, dict):
        function = definition.get("function")
        name = function.get("name") if isinstance(function, dict) else definition.get("name")
    else:
        name = getattr(definition, "name", None)
    return name if isinstance(name, str) else None


def _dialect() -> MessageDialect:
    from langchain_core.messages import SystemMessage

    return MessageDialect(
        is_system=lambda m: getattr(m, "type", None) == "system",
        text=lambda m: m.content if isinstance(m.content, str) else None,
        with_text=lambda m, text: m.model_copy(update={"content": text}),
        system=SystemMessage,
    )


def _status_messages(model: Any, model_input: Any, config: Any) -> list | None:
    """The messages of ``model_input`` with the block in the first system message,
    or None when they would not change."""
    agent = _agent_of(config)
    messages = list(model._convert_input(model_input).to_messages())
    system = next((m for m in messages if getattr(m, "type", None) == "system"), None)
    if system is not None and isinstance(system.content, list):
        return _with_block_part(messages, messages.index(system), agent)
    return insert_status_block(messages, _dialect(), agent)


def _with_block_part(messages: list, index: int, agent: Any) -> list | None:
    """A system message made of content blocks: the block of an earlier turn
    dropped, the current one appended as a text part."""
    content = messages[index].content
    parts = [p for p in content if not (isinstance(p, dict) and str(p.get("text", "")).startswith(STATUS_HEADER))]
    block = augment_instructions(None, agent)
    if block:
        parts.append({"type": "text", "text": block})
    if parts == content:
        return None
    messages[index] = messages[index].model_copy(update={"content": parts})
    return messages
