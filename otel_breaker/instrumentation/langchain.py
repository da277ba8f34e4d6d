"""LangChain / LangGraph: every tool call (``invoke``, ``ToolNode``) passes ``BaseTool.run`` or ``arun``.

langchain-core answers a ``ToolException`` (noted in ``_handle_tool_error``: a failure) and arguments it
cannot parse (the model's mistake) itself; the rejection is an error ``ToolMessage`` (all ``ToolNode``
accepts). An MCP tool's ``source`` is its server. The agent is ``lc_agent_name``, else the innermost
named graph (a private ``configurable`` key set by ``Pregel.stream``), else the node the tool node runs
in. Each chat model call (``BaseChatModel``) gets the status block and loses the open tools.
"""

from __future__ import annotations

from functools import partial
from importlib import import_module
from traceback import walk_tb
from typing import Any

from otel_breaker.classify import MISTAKE
from otel_breaker.degrade import Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget, guarded_call
from otel_breaker.instrumentation.chat_messages import part_text, tool_name, with_part_text
from otel_breaker.instrumentation.mcp_identity import ToolSources, binding_identity, noting_initialize
from otel_breaker.instrumentation.patches import argument, prompt_patch, tool_patch, with_argument
from otel_breaker.instrumentation.spec import MessageDialect, SpecAdapter, insert_status_block
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall

_MODULE, _CHAT = "langchain_core.tools.base", "langchain_core.language_models.chat_models"
_GRAPH, _MCP_TOOLS, _MCP_SESSION = "langgraph.pregel.main", "langchain_mcp_adapters.tools", "mcp.client.session"
_GRAPH_KEY = "__otel_breaker_graph"  # the innermost named graph running, in ``configurable`` (private: "__")
_FRAMES = {"_to_args_and_kwargs": MISTAKE, "_parse_input": MISTAKE, "_run": None, "_arun": None}


class LangChainAdapter(SpecAdapter):
    name = "langchain"
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
            *(PatchTarget(_MODULE, f"_handle_{kind}_error", partial(_note, kind)) for kind in ("tool", "validation")),
            *(PatchTarget(_GRAPH, f"Pregel.{m}", _graph_run) for m in ("stream", "astream")),
            PatchTarget(_MCP_TOOLS, "convert_mcp_tool_to_langchain_tool", self._mcp.remembering(_mcp_server)),
            PatchTarget(_MCP_SESSION, "ClientSession.initialize", noting_initialize),
        ]

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        name = getattr(instance, "name", None)
        if not isinstance(name, str) or not name:
            return None
        config, call_id = kwargs.get("config"), kwargs.get("tool_call_id")
        agent_name, session = _run_of(config) if config and isinstance(config, dict) else (None, None)
        return ToolCall(  # positional, in field order (cheaper per call); the agent's name keys the breaker
            name, self.name, agent_name, agent_name, str(session) if session is not None else None,
            str(call_id) if call_id is not None else None, "function", self._mcp.source_of(instance),
            args[0] if args else kwargs.get("tool_input"), origin_of(instance, "langchain_core"),
        )  # fmt: skip

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        """``MISTAKE`` for the model's arguments refused while langchain-core parsed them: raised
        under its ``_parse_input``/``_to_args_and_kwargs`` by langchain-core or pydantic itself.
        A tool's own override that fails there (a ``NotImplementedError``) is a bug in the tool."""
        if isinstance(exc, NotImplementedError):
            return None
        hint, raised_in = None, ""
        for frame, _ in walk_tb(exc.__traceback__):  # raised parsing the model's arguments, or in the body?
            name, module = frame.f_code.co_name, str(frame.f_globals.get("__name__", ""))
            if hint is None and name in _FRAMES and module.startswith("langchain_core.tools"):
                hint = _FRAMES[name]
                if hint is None:
                    return None  # in the tool's body
            raised_in = module
        if hint == MISTAKE and not raised_in.startswith(("langchain_core", "pydantic")):
            return None  # the tool's own parsing code failed: not the model's arguments
        return hint

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        if (frame := guarded_call()) is not None and frame.notes:  # langchain-core answered an error: _note
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
        kept = visible_tools(tools, tool_name, agent=_agent_of(argument(args, kwargs, 1, "config"))) if tools else tools
        return None if kept is tools else (args, {**kwargs, "tools": kept})

    def with_status(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        if not args and "input" not in kwargs:
            return None
        agent, messages = _agent_of(argument(args, kwargs, 1, "config")), argument(args, kwargs, 0, "input")
        messages = insert_status_block(instance._convert_input(messages).to_messages(), _DIALECT, agent)
        return None if messages is None else with_argument(args, kwargs, 0, "input", messages)


def _note(kind: str, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """langchain-core turning a ``kind`` ("tool", "validation") error into a result: noted for ``result_error``."""
    if (frame := guarded_call()) is not None and args:
        frame.notes.append((kind, type(args[0]).__name__))
    return wrapped(*args, **kwargs)


def _graph_run(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """The run's config carries this graph's name (None for an unnamed one) to its tools."""
    name = name if isinstance(name := getattr(instance, "name", None), str) and name not in ("", "LangGraph") else None
    config = argument(args, kwargs, 1, "config")
    configurable = (config or {}).get("configurable") or {} if isinstance(config, dict | None) else None
    if configurable is not None and configurable.get(_GRAPH_KEY) != name:
        config = {**(config or {}), "configurable": {**configurable, _GRAPH_KEY: name}}
        args, kwargs = with_argument(args, kwargs, 1, "config", config)
    return wrapped(*args, **kwargs)


def _run_of(config: dict) -> tuple[str | None, Any]:
    """(agent, session) of a run's config; the agent is ``lc_agent_name``, else the named graph,
    else the agent node of the checkpoint namespace (``<agent node>:<task>|tools:<task>``)."""
    metadata, configurable = config.get("metadata") or {}, config.get("configurable") or {}
    session = configurable.get("thread_id") or metadata.get("thread_id")
    name = metadata.get("lc_agent_name") or configurable.get(_GRAPH_KEY)
    if not isinstance(name, str) or not name:
        namespace = metadata.get("langgraph_checkpoint_ns") or configurable.get("checkpoint_ns")
        name = namespace.split("|")[-2].split(":", 1)[0] if isinstance(namespace, str) and "|" in namespace else None
    return name or None, session


def _agent_of(config: Any) -> str | None:
    from langchain_core.runnables.config import ensure_config

    return _run_of(ensure_config(config if isinstance(config, dict) else None))[0]


def _mcp_server(args: tuple, kwargs: dict) -> str | None:
    """A langchain-mcp-adapters tool's server: its session's, else its connection's, else its name."""
    return binding_identity(argument(args, kwargs, 0, "session"), kwargs.get("connection"), kwargs.get("server_name"))


# Content blocks keep the status block in a block of its own.
_DIALECT = MessageDialect(
    is_system=lambda m: getattr(m, "type", None) == "system",
    text=lambda m: part_text(m.content),
    with_text=lambda m, text: m.model_copy(update={"content": with_part_text(m.content, text)}),
    system=lambda text: import_module("langchain_core.messages").SystemMessage(text),  # imported once it is used
)
