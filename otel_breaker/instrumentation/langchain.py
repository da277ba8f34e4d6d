"""LangChain / LangGraph: every tool call passes through ``BaseTool.run`` or ``arun``.

``invoke``/``ainvoke``, LangGraph's ``ToolNode`` and agents built on either end in
exactly one of them. A ``ToolException`` the tool handles itself is noted where
langchain-core handles it (``_handle_tool_error``); argument validation errors are
the model's mistake, handled or raised while langchain-core parses the arguments.
A tool made by langchain-mcp-adapters carries its MCP server as ``source``. The
agent is ``lc_agent_name`` (``create_agent``), else the innermost named graph
(marked on ``Pregel.stream`` under a private ``configurable`` key), else the node
the tool node runs in. ``ToolNode`` accepts only a ``ToolMessage``: the rejection
is one with ``status="error"``. Every chat model call enters ``BaseChatModel``'s
``invoke``/``ainvoke``/``stream``/``astream``: the status block goes in the first
system message of that call, and open tools leave its bound ``tools``.
"""

from __future__ import annotations

import logging
from typing import Any

from otel_breaker.classify import MISTAKE
from otel_breaker.degrade import STATUS_HEADER, Rejection, augment_instructions
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget, guarded_call
from otel_breaker.instrumentation.mcp_identity import ToolSources, binding_identity, note_initialized
from otel_breaker.instrumentation.patches import argument, prompt_patch, tool_patch, with_argument
from otel_breaker.instrumentation.spec import MessageDialect, SpecAdapter, insert_status_block
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall

_MODULE, _GRAPH = "langchain_core.tools.base", "langgraph.pregel.main"
_CHAT = "langchain_core.language_models.chat_models"
_MCP_TOOLS, _MCP_SESSION = "langchain_mcp_adapters.tools", "mcp.client.session"
_GRAPH_KEY = "__otel_breaker_graph"  # the innermost named graph running, in ``configurable`` (private: "__")
logger = logging.getLogger("otel_breaker")
_PARSING_FRAMES, _BODY_FRAMES = frozenset({"_to_args_and_kwargs", "_parse_input"}), frozenset({"_run", "_arun"})


class LangChainAdapter(SpecAdapter):
    """Guards langchain-core tools, including LangGraph's ``ToolNode``."""

    name = "langchain"
    requires = "langchain-core>=1.0,<2"
    patches = (
        tool_patch(_MODULE, "BaseTool.run", "sync"),
        tool_patch(_MODULE, "BaseTool.arun", "async"),
        *(prompt_patch(_CHAT, f"BaseChatModel.{m}") for m in ("invoke", "ainvoke", "stream", "astream")),
    )
    modules = (_MODULE, _CHAT, _GRAPH, _MCP_TOOLS, _MCP_SESSION)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._mcp = ToolSources()

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            *(PatchTarget(_MODULE, f"_handle_{kind}_error", self._note(kind)) for kind in ("tool", "validation")),
            *(PatchTarget(_GRAPH, f"Pregel.{m}", self._graph_run) for m in ("stream", "astream")),
            PatchTarget(_MCP_TOOLS, "convert_mcp_tool_to_langchain_tool", self._mcp_tool),
            PatchTarget(_MCP_SESSION, "ClientSession.initialize", _initialize),
        ]

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        name = getattr(instance, "name", None)
        if not isinstance(name, str) or not name:
            return None
        config, agent_name, session = kwargs.get("config"), None, None
        if config and isinstance(config, dict):  # a direct invoke() passes none: nothing to read
            metadata = config.get("metadata") or {}
            agent_name = _agent_name(config, metadata)
            session = (config.get("configurable") or {}).get("thread_id") or metadata.get("thread_id")
        call_id = kwargs.get("tool_call_id")
        # Positional, in ToolCall's field order (cheaper on every call); no agent object reaches
        # a tool, so a known agent name keys the breaker.
        return ToolCall(
            name, self.name, agent_name, agent_name, str(session) if session is not None else None,
            str(call_id) if call_id is not None else None, "function", self._mcp.source_of(instance),
            args[0] if args else kwargs.get("tool_input"), origin_of(instance, "langchain_core"),
        )  # fmt: skip

    @staticmethod
    def _note(kind: str) -> Any:
        def note(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
            frame = guarded_call()
            if frame is not None and args:
                frame.notes.append((kind, type(args[0]).__name__))
            return wrapped(*args, **kwargs)

        return note

    def _graph_run(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """The run's config carries this graph's name (None for an unnamed one) to its tools."""
        name = getattr(instance, "name", None)
        name = name if isinstance(name, str) and name and name != "LangGraph" else None
        config = argument(args, kwargs, 1, "config")
        configurable = (config or {}).get("configurable") or {} if isinstance(config, dict | None) else None
        if configurable is not None and configurable.get(_GRAPH_KEY) != name:
            config = {**(config or {}), "configurable": {**configurable, _GRAPH_KEY: name}}
            args, kwargs = with_argument(args, kwargs, 1, "config", config)
        return wrapped(*args, **kwargs)

    def _mcp_tool(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """A tool made from an MCP tool: its server (session, connection or configured name)."""
        tool = wrapped(*args, **kwargs)
        try:
            source = binding_identity(
                argument(args, kwargs, 0, "session"), kwargs.get("connection"), kwargs.get("server_name")
            )
            if source is not None:
                self._mcp.remember(tool, source)
        except Exception:
            logger.debug("otel-breaker: langchain: could not tell an MCP tool's server", exc_info=True)
        return tool

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        tb = exc.__traceback__  # raised parsing the model's arguments, not in the tool body?
        while tb is not None:
            name = tb.tb_frame.f_code.co_name
            module = str(tb.tb_frame.f_globals.get("__name__", ""))
            if (name in _PARSING_FRAMES or name in _BODY_FRAMES) and module.startswith("langchain_core.tools"):
                return MISTAKE if name in _PARSING_FRAMES else None
            tb = tb.tb_next
        return None

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        frame = guarded_call()
        if frame is not None and frame.notes:
            kind, error = frame.notes[-1]
            return error if kind == "tool" else None
        if getattr(result, "type", None) == "tool" and getattr(result, "status", None) == "error":
            return "tool_error"  # a tool may return an error ToolMessage itself
        return None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        if call.call_id is None:
            return info.message
        from langchain_core.messages import ToolMessage

        return ToolMessage(info.message, tool_call_id=call.call_id, name=call.tool, status="error")

    def without_open_tools(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        tools = kwargs.get("tools")  # bind_tools puts them in the call's tools
        if not tools:
            return None
        kept = visible_tools(tools, _definition_name, agent=_agent_of(argument(args, kwargs, 1, "config")))
        return None if kept is tools else (args, {**kwargs, "tools": kept})

    def with_status(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        if not args and "input" not in kwargs:
            return None
        agent = _agent_of(argument(args, kwargs, 1, "config"))
        messages = list(instance._convert_input(argument(args, kwargs, 0, "input")).to_messages())
        system = next((m for m in messages if getattr(m, "type", None) == "system"), None)
        if system is not None and isinstance(system.content, list):  # content blocks: replace our part
            ours = lambda p: isinstance(p, dict) and str(p.get("text", "")).startswith(STATUS_HEADER)  # noqa: E731
            parts = [p for p in system.content if not ours(p)]
            block = augment_instructions(None, agent)
            parts += [{"type": "text", "text": block}] if block else []
            if parts == system.content:
                return None
            messages[messages.index(system)] = system.model_copy(update={"content": parts})
        else:
            messages = insert_status_block(messages, _dialect(), agent)
        return None if messages is None else with_argument(args, kwargs, 0, "input", messages)


def _agent_name(config: dict, metadata: dict) -> str | None:
    """``lc_agent_name``, else the named graph, else the agent node in the checkpoint namespace
    (``<agent node>:<task>|tools:<task>``)."""
    name = metadata.get("lc_agent_name") or (config.get("configurable") or {}).get(_GRAPH_KEY)
    if isinstance(name, str) and name:
        return name
    namespace = metadata.get("langgraph_checkpoint_ns") or (config.get("configurable") or {}).get("checkpoint_ns")
    if isinstance(namespace, str) and "|" in namespace:
        return namespace.split("|")[-2].split(":", 1)[0] or None
    return None


def _agent_of(config: Any) -> str | None:
    from langchain_core.runnables.config import ensure_config

    merged = ensure_config(config if isinstance(config, dict) else None)
    return _agent_name(merged, merged.get("metadata") or {})


def _definition_name(definition: Any) -> str | None:
    """A bound tool's name: a provider's dict (``{"function": {"name"}}``, ``{"name"}``) or a tool."""
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


async def _initialize(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """mcp 1.x sessions do not keep ``serverInfo``: noted for :func:`server_identity`."""
    result = await wrapped(*args, **kwargs)
    note_initialized(instance, result)
    return result
