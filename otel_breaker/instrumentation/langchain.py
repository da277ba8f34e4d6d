"""LangChain / LangGraph: every tool call (``invoke``, ``ToolNode``) passes ``BaseTool.run`` or ``arun``.

langchain-core answers a ``ToolException`` (noted in ``_handle_tool_error``: a failure) and arguments it
cannot parse (the model's mistake) itself; the rejection is an error ``ToolMessage`` (all ``ToolNode``
accepts). An MCP tool's ``source`` is its server. The agent is ``lc_agent_name``, else the innermost
named graph (a private ``configurable`` key set by ``Pregel.stream``), else the node the tool node runs
in. Each chat model call (``BaseChatModel``) gets the status block and loses the open tools.

This adapter is on the path of every LangChain tool call, so ``describe`` stays lean.

``MultiServerMCPClient.get_tools`` loads every server's tools at once, and one server that
cannot be reached fails the whole listing. Each server's load goes through
``mcp_reach.reach``: the failure counts on that server's upstream breaker, and the
listing holds the other servers' tools; while the breaker is open the server is not tried.
"""

from __future__ import annotations

from functools import partial
from traceback import walk_tb
from typing import Any

from otel_breaker.classify import MISTAKE
from otel_breaker.degrade import Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget, guarded_call
from otel_breaker.instrumentation.chat_messages import part_text, tool_name, with_part_text
from otel_breaker.instrumentation.mcp_identity import ToolSources, binding_identity, noting_initialize
from otel_breaker.instrumentation.mcp_reach import UNREACHED, reach
from otel_breaker.instrumentation.patches import argument, prompt_patch, run_patch, tool_patch, with_argument
from otel_breaker.instrumentation.spec import MessageDialect, SpecAdapter, insert_status_block
from otel_breaker.menu import visible_tools
from otel_breaker.runs import async_steps_in_run, joined_or_new, steps_in_run
from otel_breaker.toolcall import ToolCall

_TOOLS = "langchain_core.tools.base"
_CHAT = "langchain_core.language_models.chat_models"
_GRAPH = "langgraph.pregel.main"
_MCP_TOOLS = "langchain_mcp_adapters.tools"
_MCP_SESSION = "mcp.client.session"
_MCP_CLIENT = "langchain_mcp_adapters.client"
#: The innermost named graph running, in ``configurable`` (private to us: the "__" prefix).
_GRAPH_KEY = "__otel_breaker_graph"
#: langchain-core's functions an exception may be raised under: parsing the model's
#: arguments (the model's mistake), or running the tool's body (None: the tool's own).
_WHERE_RAISED = {"_to_args_and_kwargs": MISTAKE, "_parse_input": MISTAKE, "_run": None, "_arun": None}
#: Graph names LangGraph gives a graph the program did not name.
_UNNAMED_GRAPHS = ("", "LangGraph")


class LangChainAdapter(SpecAdapter):
    name = "langchain"
    patches = (
        tool_patch(_TOOLS, "BaseTool.run", "sync"),
        tool_patch(_TOOLS, "BaseTool.arun", "async"),
        prompt_patch(_CHAT, "BaseChatModel.invoke"),
        prompt_patch(_CHAT, "BaseChatModel.ainvoke"),
        prompt_patch(_CHAT, "BaseChatModel.stream"),
        prompt_patch(_CHAT, "BaseChatModel.astream"),
        # A graph's invocation is a run (a subgraph or a graph a tool calls joins it);
        # its streams are runs too, with the graph's name (``_graph_stream``).
        run_patch(_GRAPH, "Pregel.invoke", "sync"),
        run_patch(_GRAPH, "Pregel.ainvoke", "async"),
    )
    modules = (_TOOLS, _CHAT, _GRAPH, _MCP_TOOLS, _MCP_SESSION, _MCP_CLIENT)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._mcp = ToolSources()

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            PatchTarget(_TOOLS, "_handle_tool_error", partial(_note, "tool")),
            PatchTarget(_TOOLS, "_handle_validation_error", partial(_note, "validation")),
            PatchTarget(_GRAPH, "Pregel.stream", _graph_stream),
            PatchTarget(_GRAPH, "Pregel.astream", _graph_astream),
            PatchTarget(_MCP_TOOLS, "convert_mcp_tool_to_langchain_tool", self._mcp.remembering(_mcp_server)),
            PatchTarget(_MCP_SESSION, "ClientSession.initialize", noting_initialize),
            PatchTarget(_MCP_CLIENT, "load_mcp_tools", _load_server_tools),
        ]

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        name = getattr(instance, "name", None)
        if not isinstance(name, str) or not name:
            return None
        config = kwargs.get("config")
        call_id = kwargs.get("tool_call_id")
        if config and isinstance(config, dict):
            agent_name, session = _run_of(config)
        else:
            agent_name, session = None, None
        # Positional, in field order: cheaper on every call. The agent's name keys the breaker.
        return ToolCall(
            name,  # tool
            self.name,  # framework
            agent_name,  # agent
            agent_name,  # agent_name
            None if session is None else str(session),  # session_id
            None if call_id is None else str(call_id),  # call_id
            "function",  # tool_type
            self._mcp.source_of(instance),  # source
            args[0] if args else kwargs.get("tool_input"),  # arguments
            origin_of(instance, "langchain_core"),  # origin
        )

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        """``MISTAKE`` for the model's arguments refused while langchain-core parsed them: raised
        under its ``_parse_input``/``_to_args_and_kwargs`` by langchain-core or pydantic itself.
        A tool's own override that fails there (a ``NotImplementedError``) is a bug in the tool."""
        if isinstance(exc, NotImplementedError):
            return None
        hint = None
        raised_in = ""  # the module of the innermost frame
        for frame, _ in walk_tb(exc.__traceback__):
            function = frame.f_code.co_name
            module = str(frame.f_globals.get("__name__", ""))
            if hint is None and function in _WHERE_RAISED and module.startswith("langchain_core.tools"):
                hint = _WHERE_RAISED[function]
                if hint is None:
                    return None  # raised in the tool's body
            raised_in = module
        if hint == MISTAKE and not raised_in.startswith(("langchain_core", "pydantic")):
            return None  # the tool's own parsing code failed: not the model's arguments
        return hint

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        frame = guarded_call()
        if frame is not None and frame.notes:
            # langchain-core answered an error itself (see _note): a tool error is a failure.
            kind, error = frame.notes[-1]
            return error if kind == "tool" else None
        if getattr(result, "type", None) == "tool" and getattr(result, "status", None) == "error":
            return "tool_error"  # a tool may return an error ToolMessage itself
        return None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        if call.call_id is None:
            if getattr(info, "raised", False):
                # A direct invoke whose identical call raised (no error handling asked for):
                # the loop guard's answer raises too, for the caller's own ``except``.
                raise info.repeated_error()
            return info.message
        from langchain_core.messages import ToolMessage

        return ToolMessage(info.message, tool_call_id=call.call_id, name=call.tool, status="error")

    def without_open_tools(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        tools = kwargs.get("tools")  # bind_tools puts them in the call's tools
        if not tools:
            return None
        kept = visible_tools(tools, tool_name, agent=_agent_of(argument(args, kwargs, 1, "config")))
        if kept is tools:
            return None
        return args, {**kwargs, "tools": kept}

    def with_status(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        if not args and "input" not in kwargs:
            return None
        agent = _agent_of(argument(args, kwargs, 1, "config"))
        chat_input = argument(args, kwargs, 0, "input")
        # langchain-core's own private (1.x, ``BaseChatModel._convert_input``): the model's own
        # reading of a string, prompt value or message list, so the block goes into the
        # messages it will send, whatever form the caller passed.
        messages = insert_status_block(instance._convert_input(chat_input).to_messages(), _DIALECT, agent)
        if messages is None:
            return None
        return with_argument(args, kwargs, 0, "input", messages)


def _note(kind: str, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """langchain-core turning a ``kind`` ("tool", "validation") error into a result: noted for ``result_error``."""
    frame = guarded_call()
    if frame is not None and args:
        frame.notes.append((kind, type(args[0]).__name__))
    return wrapped(*args, **kwargs)


def _graph_run(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """The run's config carries this graph's name (None for an unnamed one) to its tools."""
    name = getattr(instance, "name", None)
    if not isinstance(name, str) or name in _UNNAMED_GRAPHS:
        name = None
    config = argument(args, kwargs, 1, "config")
    if not isinstance(config, dict | None):
        return wrapped(*args, **kwargs)
    configurable = (config or {}).get("configurable") or {}
    if configurable.get(_GRAPH_KEY) != name:
        config = {**(config or {}), "configurable": {**configurable, _GRAPH_KEY: name}}
        args, kwargs = with_argument(args, kwargs, 1, "config", config)
    return wrapped(*args, **kwargs)


def _graph_stream(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """A graph's stream: a run (each step inside it; an ``invoke`` around it opened it
    already), and its config names the graph for its tools."""
    return steps_in_run(_graph_run(wrapped, instance, args, kwargs), joined_or_new(framework="langgraph"))


def _graph_astream(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """:func:`_graph_stream` for ``astream``."""
    return async_steps_in_run(_graph_run(wrapped, instance, args, kwargs), joined_or_new(framework="langgraph"))


def _run_of(config: dict) -> tuple[str | None, Any]:
    """(agent, session) of a run's config; the agent is ``lc_agent_name``, else the named graph,
    else the agent node of the checkpoint namespace (``<agent node>:<task>|tools:<task>``)."""
    metadata = config.get("metadata") or {}
    configurable = config.get("configurable") or {}
    session = configurable.get("thread_id") or metadata.get("thread_id")
    name = metadata.get("lc_agent_name") or configurable.get(_GRAPH_KEY)
    if not isinstance(name, str) or not name:
        namespace = metadata.get("langgraph_checkpoint_ns") or configurable.get("checkpoint_ns")
        name = None
        if isinstance(namespace, str) and "|" in namespace:
            name = namespace.split("|")[-2].split(":", 1)[0]
    return name or None, session


def _agent_of(config: Any) -> str | None:
    from langchain_core.runnables.config import ensure_config

    return _run_of(ensure_config(config if isinstance(config, dict) else None))[0]


async def _load_server_tools(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """One server's tools for ``MultiServerMCPClient.get_tools``, through :func:`reach` where
    the load opens its own session: none from a server not reached."""

    async def load() -> Any:
        return await wrapped(*args, **kwargs)

    if argument(args, kwargs, 0, "session") is not None:
        return await load()
    tools = await reach(_mcp_server(args, kwargs), load)
    return [] if tools is UNREACHED else tools


def _mcp_server(args: tuple, kwargs: dict) -> str | None:
    """A langchain-mcp-adapters tool's server: its session's, else its connection's, else its name."""
    return binding_identity(argument(args, kwargs, 0, "session"), kwargs.get("connection"), kwargs.get("server_name"))


def _is_system(message: Any) -> bool:
    return getattr(message, "type", None) == "system"


def _text(message: Any) -> str | None:
    return part_text(message.content)


def _with_text(message: Any, text: str) -> Any:
    # Content blocks keep the status block in a block of its own.
    return message.model_copy(update={"content": with_part_text(message.content, text)})


def _system_message(text: str) -> Any:
    from langchain_core.messages import SystemMessage

    return SystemMessage(text)


_DIALECT = MessageDialect(is_system=_is_system, text=_text, with_text=_with_text, system=_system_message)
