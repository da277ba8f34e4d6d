"""The server the proxy's client talks to: every request forwarded, tools/call guarded.

Built on the SDK's low-level ``Server``, with one handler per method the servers
behind the proxy declare (a server without prompts has no ``prompts/list``
here either). The ``initialize`` answer is the server's own: its name, version,
instructions and capabilities (with several servers, the proxy's name and the
union of their capabilities).

``tools/call`` takes the same guarded call path as a tool called in-process
(:meth:`otel_breaker.guards.Guard.acall`), with the MCP adapter's outcomes: an
``isError`` result and a transport failure count; an unknown tool and arguments
the server's schema rejects are neutral; the server is the tool's source, so its
upstream breaker counts its transport failures together. A rejection is the
answer a failing tool gives, ``CallToolResult(isError=true)`` with the rejection
text. A transport failure (the server died, the connection dropped) is answered
the same way, so the client's session goes on while the server restarts.

With ``OTEL_BREAKER_HIDE_OPEN_TOOLS=true`` the tool list leaves out open tools,
and ``notifications/tools/list_changed`` tells the client when one leaves or comes
back (checked after each call and every ``watch_interval`` seconds, since a tool
comes back when its cooldown ends, with no call).
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import anyio
import mcp.types as types
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from opentelemetry import trace as trace_api

from otel_breaker import __version__, runs
from otel_breaker.breaker_config import CircuitBreakerConfig
from otel_breaker.call_steps import OutcomeUnknownError
from otel_breaker.classify import is_transport_error
from otel_breaker.guards import Guard, default_guard
from otel_breaker.instrumentation.mcp_identity import note_effects
from otel_breaker.instrumentation.mcp_runs import meta_run
from otel_breaker.mcp_proxy.child import too_large
from otel_breaker.mcp_proxy.eras import Subscriptions, in_client_era
from otel_breaker.mcp_proxy.upstream import UpstreamLink
from otel_breaker.mcp_proxy.wire import WireAdapter, for_client
from otel_breaker.menu import hidden_names, hide_open_tools_enabled
from otel_breaker.sanitize import bounded
from otel_breaker.semconv import ATTR_MCP_METHOD, ATTR_MCP_SESSION, ATTR_TOOL, MCP_TOOLS_CALL, span_name
from otel_breaker.toolcall import ToolCall

logger = logging.getLogger("otel_breaker")

T = TypeVar("T")

PROXY_NAME = "otel-breaker-mcp-proxy"
_MAX_SESSIONS = 256
_MAX_PAGES = 100
_MAX_TOOLS = 10_000
_MAX_ERROR_CHARS = 500
_MAX_NAME_CHARS = 128
#: How long a server's roots request waits for the first client (the servers start before it).
CLIENT_WAIT = 30.0


class ProxyServer(Server[Any]):
    """The low-level server, answering ``initialize`` with what the servers behind it declared."""

    def __init__(self, options: InitializationOptions, middleware: Any) -> None:
        super().__init__(
            options.server_name,
            version=options.server_version,
            title=options.title,
            description=options.description,
            instructions=options.instructions,
            website_url=options.website_url,
            icons=options.icons,
        )
        self._initialization_options = options
        self.middleware.append(middleware)

    def create_initialization_options(self, *args: Any, **kwargs: Any) -> InitializationOptions:
        return self._initialization_options


class Clients:
    """The client sessions of the proxy (one over stdio; one per session over HTTP):
    where the servers' notifications and requests go.

    A server's request (sampling, elicitation, roots) names no call of the client's
    on the wire: the server's SDK relates it to the call that caused it only on its
    own side (which stream of an HTTP response carries it). So the proxy keeps, per
    server, the calls in flight and the client session of each: a server's request
    goes to the one client with a call in flight to that server, related to that
    call. When calls of several clients are in flight to the server, the proxy
    cannot tell whose call asked and answers the server with an error; it never
    guesses, since a sampling prompt or an elicitation is private to its client."""

    def __init__(self) -> None:
        self._sessions: OrderedDict[Any, ServerSession] = OrderedDict()
        self._in_flight: list[InFlight] = []
        self._arrived = anyio.Event()  # set when the first client is there
        self.subscriptions = Subscriptions()  # the listen streams of 2026-07-28 clients

    def remember(self, ctx: ServerRequestContext[Any, Any]) -> None:
        key = client_key(ctx)
        self._sessions[key] = ctx.session
        self._sessions.move_to_end(key)
        while len(self._sessions) > _MAX_SESSIONS:
            self._sessions.popitem(last=False)
        self._arrived.set()

    async def wait_for_client(self) -> None:
        """Until a client has connected (at most :data:`CLIENT_WAIT` seconds): the servers are
        connected before any client, and a server may ask for roots as it starts."""
        with anyio.move_on_after(CLIENT_WAIT):
            await self._arrived.wait()

    @contextlib.contextmanager
    def calling(self, ctx: ServerRequestContext[Any, Any], link: UpstreamLink | None) -> Iterator[None]:
        """While a client's request to ``link`` is in flight: the server's requests and
        log messages in that time may be the call's own."""
        entry = InFlight(client_key(ctx), ctx.session, ctx.request_id, link)
        self._in_flight.append(entry)
        try:
            yield
        finally:
            self._in_flight.remove(entry)

    def owner(self, link: UpstreamLink | None) -> InFlight | None:
        """The call a message of ``link``'s server belongs to, when only one client can
        have caused it (its latest call to that server); None when no client or several
        clients have calls in flight to it."""
        calls = [entry for entry in self._in_flight if entry.link is link]
        if not calls or any(entry.client != calls[0].client for entry in calls):
            return None
        return calls[-1]

    def several(self, link: UpstreamLink | None) -> bool:
        """Whether calls of more than one client are in flight to ``link``'s server."""
        return len({entry.client for entry in self._in_flight if entry.link is link}) > 1

    async def send(self, call: InFlight, notification: Any) -> None:
        """One notification to the client of ``call``, on that call's own channel (over
        HTTP, the response stream of that request)."""
        try:
            await call.session.send_notification(notification, related_request_id=call.request_id)
        except Exception:
            logger.debug("otel-breaker: mcp-proxy: a client session is gone", exc_info=True)

    async def broadcast(self, notification: Any) -> None:
        await self.subscriptions.publish(notification)
        for key, session in list(self._sessions.items()):
            try:
                await session.send_notification(notification)
            except Exception:
                logger.debug("otel-breaker: mcp-proxy: a client session is gone", exc_info=True)
                self._sessions.pop(key, None)

    async def request(
        self, link: UpstreamLink | None, request: Any, result_type: type[T], capability: str | None
    ) -> T | types.ErrorData:
        """Send a server's request (sampling, elicitation, roots) to the client whose call
        caused it; its error answer comes back as is. With no call in flight, the only
        client (a stdio client, or the one HTTP client) is asked; where several clients
        could have caused it, the server is answered with an error. A roots request that
        comes before any client (a server starting) waits for the first one."""
        if not self._sessions and capability == "roots":
            await self.wait_for_client()
        owner = self.owner(link)
        if owner is not None:
            session, request_id = owner.session, owner.request_id
        elif self.several(link):
            return types.ErrorData(
                code=types.INVALID_REQUEST,
                message="Calls of several clients are in flight to this server through the proxy; "
                "it cannot tell whose call sent this request",
            )
        elif len(self._sessions) == 1:
            session, request_id = next(iter(self._sessions.values())), None
        elif not self._sessions:
            return types.ErrorData(code=types.INVALID_REQUEST, message="No client is connected to the proxy")
        else:
            return types.ErrorData(
                code=types.INVALID_REQUEST,
                message="No call is in flight to this server and several clients are connected to the proxy",
            )
        declared = session.client_capabilities
        if capability is not None and (declared is None or getattr(declared, capability, None) is None):
            return types.ErrorData(code=types.INVALID_REQUEST, message=f"The client does not support {capability}")
        metadata = ServerMessageMetadata(related_request_id=request_id) if request_id is not None else None
        try:
            return await session.send_request(request, result_type, metadata=metadata)
        except MCPError as exc:
            return exc.error
        except Exception as exc:  # the client is gone, or answered something unreadable
            message = bounded(f"The client could not answer: {type(exc).__name__}: {exc}", _MAX_ERROR_CHARS)
            return types.ErrorData(code=types.INTERNAL_ERROR, message=message)


def client_run(ctx: ServerRequestContext[Any, Any], params: Mapping[str, Any] | None, owner: Any) -> runs.Run | None:
    """The run a client's request belongs to: the one its ``_meta`` names (``otel-breaker/run``,
    else its ``traceparent``'s trace), else the client's session: its HTTP session id, or over
    stdio the one client ``owner`` (the proxy) serves, one run while it lives."""
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    named = meta_run(meta) if isinstance(meta, Mapping) else None
    if named is not None:
        return named
    key = client_key(ctx)
    if key is not None:
        return runs.named_run(f"client:{key}", "mcp_proxy")
    return runs.run_of(owner, "mcp_proxy")


def client_key(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """Which client a request came from: its HTTP session id (None over stdio, one client)."""
    request = ctx.request
    if request is None:
        return None
    key = getattr(request, "headers", {}).get("mcp-session-id")
    return key if isinstance(key, str) else None


@dataclass(eq=False)
class InFlight:
    """One client request forwarded to a server and not yet answered (compared by identity):
    the client (its HTTP session id), the SDK's session of that one request, its id."""

    client: str | None
    session: ServerSession
    request_id: Any
    link: UpstreamLink | None


class Forwarder:
    """The proxy's request handlers and the servers' messages to the client."""

    def __init__(
        self,
        links: list[UpstreamLink],
        *,
        guarding: bool,
        watch_interval: float = 1.0,
        guard: Guard | None = None,
    ) -> None:
        self.links = links
        self.guarding = guarding
        # OTEL_BREAKER_HIDE_OPEN_TOOLS, read once: the tools capability the client was given says it.
        self.hiding = guarding and hide_open_tools_enabled()
        self.watch_interval = watch_interval
        self.clients = Clients()
        self._guard = guard or default_guard()
        self._adapter = WireAdapter()
        self._single = len(links) == 1
        # Per link: the tool names it listed (the whole listing, before hiding).
        self._tools: dict[UpstreamLink, set[str]] = {link: set() for link in links}
        self._listed: set[UpstreamLink] = set()
        # The name the client sees -> (link, the server's name); several servers only.
        self._routes: dict[str, tuple[UpstreamLink, str]] = {}
        self._resource_routes: dict[str, UpstreamLink] = {}
        self._prompt_routes: dict[str, tuple[UpstreamLink, str]] = {}
        self._announced: frozenset[tuple[int, str]] = frozenset()
        self._last_listing: types.ListToolsResult | None = None  # one server: its last first page

    # -- the server ------------------------------------------------------------------------------

    def initialization_options(self) -> InitializationOptions:
        results = [link.initialize_result for link in self.links]
        assert all(r is not None for r in results), "every server is connected once before serving"
        capabilities = _merged_capabilities([r.capabilities for r in results])  # type: ignore[union-attr]
        if capabilities.tools is not None and self.hiding:
            # Hidden tools leave and come back with notifications/tools/list_changed.
            capabilities = capabilities.model_copy(
                update={"tools": capabilities.tools.model_copy(update={"list_changed": True})}
            )
        if self._single:
            first = results[0]
            info = first.server_info  # type: ignore[union-attr]
            return InitializationOptions(
                server_name=info.name,
                server_version=info.version,
                title=info.title,
                description=info.description,
                website_url=info.website_url,
                icons=info.icons,
                capabilities=capabilities,
                instructions=first.instructions,  # type: ignore[union-attr]
            )
        instructions = "\n\n".join(
            f"{link.spec.name}: {r.instructions}"
            for link, r in zip(self.links, results, strict=True)
            if r is not None and r.instructions
        )
        return InitializationOptions(
            server_name=PROXY_NAME,
            server_version=__version__,
            capabilities=capabilities,
            instructions=instructions or None,
        )

    def build_server(self) -> ProxyServer:
        options = self.initialization_options()
        server = ProxyServer(options, self.intercept)
        caps = options.capabilities
        add = server.add_request_handler
        if caps.tools is not None:
            add("tools/list", types.PaginatedRequestParams, self.list_tools)
            add("tools/call", types.CallToolRequestParams, self.call_tool)
        if caps.resources is not None:
            add("resources/list", types.PaginatedRequestParams, self.list_resources)
            add("resources/templates/list", types.PaginatedRequestParams, self.list_resource_templates)
            add("resources/read", types.ReadResourceRequestParams, self._by_uri(types.ReadResourceRequest, "read"))
            if caps.resources.subscribe:
                add("resources/subscribe", types.SubscribeRequestParams, self._by_uri(types.SubscribeRequest, "sub"))
                add(
                    "resources/unsubscribe",
                    types.UnsubscribeRequestParams,
                    self._by_uri(types.UnsubscribeRequest, "sub"),
                )
        if caps.prompts is not None:
            add("prompts/list", types.PaginatedRequestParams, self.list_prompts)
            add("prompts/get", types.GetPromptRequestParams, self.get_prompt)
        if caps.completions is not None:
            add("completion/complete", types.CompleteRequestParams, self.complete)
        if caps.logging is not None:
            add("logging/setLevel", types.SetLevelRequestParams, self.set_level)
        self.clients.subscriptions.serve(server)
        roots_changed = "notifications/roots/list_changed"
        server.add_notification_handler(roots_changed, types.NotificationParams, self.roots_changed)
        initialized = "notifications/initialized"
        server.add_notification_handler(initialized, types.NotificationParams, self.client_initialized)
        return server

    # -- tools -------------------------------------------------------------------------------------

    async def list_tools(self, ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        self.clients.remember(ctx)
        if self._single:
            link = self.links[0]
            try:
                result = await link.request(types.ListToolsRequest(params=params), types.ListToolsResult)
            except Exception as exc:
                # While the server restarts, the client keeps the tools it had (their calls are answered
                # by the upstream breaker); any other error is the server's answer.
                if not is_transport_error(exc) or self._last_listing is None or params.cursor is not None:
                    raise
                result = self._last_listing
            else:
                if params.cursor is None:
                    self._last_listing = result
            self._note_tools(link, (t.name for t in result.tools), first_page=params.cursor is None)
            note_effects(link.identity, result.tools)
            tools = result.tools
        else:
            tools = await self._all_tools()
            result = types.ListToolsResult(tools=tools)
        hidden = self._hidden()
        self._announced = hidden
        run = client_run(ctx, None, self)
        if not hidden and (run is None or not run.hidden):
            return result
        kept = [t for t in tools if not self._is_hidden(t.name, hidden) and not self._run_hides(run, t.name)]
        if len(kept) == len(tools):
            return result
        return result.model_copy(update={"tools": kept})

    def _run_hides(self, run: runs.Run | None, exposed: str) -> bool:
        """Whether the client's run spent its waste budget on the tool exposed as ``exposed``."""
        if run is None or not run.hidden:
            return False
        route = (self.links[0], exposed) if self._single else self._routes.get(exposed)
        if route is None:
            return False
        link, name = route
        return run.hides(name, link.identity)

    async def intercept(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        """The proxy's middleware: a ``tools/call`` of an initialized client goes straight
        to :meth:`call_tool_wire` as the dicts it came in; everything else takes the
        SDK's way (validated, then its handler), ``server/discover`` included (the
        client's era: :mod:`.eras`)."""
        method = ctx.method
        if method == "tools/call":
            params = ctx.params
            _name_tool_span(ctx, params)
            if (
                params is not None
                and isinstance(params.get("name"), str)
                and isinstance(params.get("arguments", {}), dict | None)
                and ctx.session.client_params is not None
            ):
                return in_client_era(ctx.protocol_version, await self.call_tool_wire(ctx, params))
        return await call_next(ctx)

    async def call_tool(self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> Any:
        return await self.call_tool_wire(ctx, params.model_dump(by_alias=True, mode="json", exclude_unset=True))

    async def call_tool_wire(self, ctx: ServerRequestContext[Any, Any], params: Mapping[str, Any]) -> Any:
        """Forward a ``tools/call`` (its params as the client sent them) through the guard;
        the server's result as it came, or the rejection."""
        self.clients.remember(ctx)
        exposed: str = params["name"]
        route = await self._tool_route(exposed)
        if route is None:
            return _error_result(f"Unknown tool: {bounded(exposed, 128)}")
        link, name = route
        sent = params if name == exposed else {**params, "name": name}
        forward = partial(_whole_answer, link.request_raw, "tools/call", sent, _progress(ctx))
        token = runs.enter(client_run(ctx, params, self))
        try:
            with self.clients.calling(ctx, link):
                result = await self._guarded(link, name, params, forward)
        except OutcomeUnknownError as exc:
            return _error_result(str(exc))  # a destructive tool's call in doubt: the model is told to check
        except Exception as exc:
            if not is_transport_error(exc):
                raise
            # The server died, the connection dropped, or its answer was too large to read:
            # counted by the guard (transport failure); the client's session goes on.
            text = bounded(f"{type(exc).__name__}: {exc}", _MAX_ERROR_CHARS)
            if isinstance(exc, AnswerTooLarge):
                return _error_result(f"MCP server {link.label} answered, but the answer was too large: {text}")
            return _error_result(f"MCP server {link.label} is unreachable: {text}")
        finally:
            runs.leave(token)
            await self.check_hidden()
        if isinstance(result, dict):
            return for_client(result, ctx.protocol_version, link.protocol_version)
        return result  # a rejection

    async def _guarded(
        self, link: UpstreamLink, name: str, params: Mapping[str, Any], forward: Callable[[], Any]
    ) -> Any:
        """The call through the guard when the tool is one its server lists, else as it is."""
        if not (self.guarding and name in self._tools[link]):
            return await forward()
        call = ToolCall(
            tool=name,
            framework="mcp",
            tool_type="extension",
            arguments=params.get("arguments"),
            source=link.identity,
        )
        # A half-open server is probed with a ping before a destructive tool's call reaches it.
        await self._guard.aprobe_upstream(call, partial(link.request, types.PingRequest(), types.EmptyResult))
        return await self._guard.acall(call, forward, adapter=self._adapter, config=self._config_of(link))

    def _config_of(self, link: UpstreamLink) -> CircuitBreakerConfig | None:
        """The breaker configuration of ``link``'s tools when its ``--config`` entry has outcome
        overrides (``neutralErrors``, ``failureErrors``), else None (the settings decide)."""
        spec = link.spec
        if spec.neutral_errors is None and spec.failure_errors is None:
            return None
        defaults = self._guard.registry.settings.defaults
        return defaults.with_changes(neutral_errors=spec.neutral_errors, failure_errors=spec.failure_errors)

    async def _tool_route(self, exposed: str) -> tuple[UpstreamLink, str] | None:
        if self._single:
            link = self.links[0]
            if link not in self._listed and exposed not in self._tools[link]:
                await self._refresh_tools()
            if exposed not in self._tools[link] and not (len(exposed) <= _MAX_NAME_CHARS and exposed.isprintable()):
                return None  # no tool has such a name: answered here, never put in the server's spans
            return link, exposed
        if exposed not in self._routes:
            await self._refresh_tools()
        return self._routes.get(exposed)

    async def _refresh_tools(self) -> None:
        """Learn the servers' tools (a call before any tools/list): a name no server
        lists is an unknown tool, never given a breaker."""
        try:
            if self._single:
                link = self.links[0]
                await self._pages(link, types.ListToolsRequest, types.ListToolsResult, "tools")
            else:
                await self._all_tools()
        except Exception:
            logger.debug("otel-breaker: mcp-proxy: could not list tools", exc_info=True)

    async def _all_tools(self) -> list[types.Tool]:
        tools: list[types.Tool] = []
        routes: dict[str, tuple[UpstreamLink, str]] = {}
        for link in self.links:
            try:
                listed = await self._pages(link, types.ListToolsRequest, types.ListToolsResult, "tools")
            except Exception as exc:
                logger.debug("otel-breaker: mcp-proxy: %s lists no tools now: %r", link.label, exc)
                listed = [
                    types.Tool(name=n, input_schema={"type": "object"}) for n in sorted(self._tools[link])
                ]  # the last listing, while the server restarts
            for tool in listed:
                exposed = tool.name if tool.name not in routes else f"{link.spec.name}.{tool.name}"
                if exposed in routes or len(routes) >= _MAX_TOOLS:
                    continue
                routes[exposed] = (link, tool.name)
                tools.append(tool if exposed == tool.name else tool.model_copy(update={"name": exposed}))
        self._routes = routes
        return tools

    async def _pages(self, link: UpstreamLink, request: Any, result_type: Any, field: str) -> list[Any]:
        items: list[Any] = []
        cursor = None
        for _ in range(_MAX_PAGES):
            result = await link.request(request(params=types.PaginatedRequestParams(cursor=cursor)), result_type)
            items.extend(getattr(result, field))
            cursor = result.next_cursor
            if not cursor:
                break
        if field == "tools":
            self._note_tools(link, (t.name for t in items), first_page=True)
            note_effects(link.identity, items)
        return items

    def _note_tools(self, link: UpstreamLink, names: Iterable[str], *, first_page: bool) -> None:
        known = self._tools[link]
        if first_page:
            known.clear()
            self._listed.add(link)
        for name in names:
            if len(known) < _MAX_TOOLS:
                known.add(name)

    # -- hidden tools ------------------------------------------------------------------------------

    def _hidden(self) -> frozenset[tuple[int, str]]:
        """(link index, the server's tool name) of the tools out of the menu now."""
        if not self.hiding:
            return frozenset()
        hidden: set[tuple[int, str]] = set()
        for index, link in enumerate(self.links):
            names = self._tools[link]
            if names:
                hidden.update((index, n) for n in hidden_names(names, source=link.identity))
        return frozenset(hidden)

    def _is_hidden(self, exposed: str, hidden: frozenset[tuple[int, str]]) -> bool:
        if self._single:
            return (0, exposed) in hidden
        route = self._routes.get(exposed)
        return route is not None and (self.links.index(route[0]), route[1]) in hidden

    async def check_hidden(self) -> None:
        """Tell the clients the tool list changed when a tool left it or came back."""
        try:
            hidden = self._hidden()
        except Exception:
            logger.debug("otel-breaker: mcp-proxy: could not read open tools", exc_info=True)
            return
        if hidden != self._announced:
            self._announced = hidden
            await self.clients.broadcast(types.ToolListChangedNotification())

    async def watch_hidden(self) -> None:
        """A tool comes back when its cooldown ends, with no call: look now and then."""
        if not self.hiding:
            return
        while True:
            await anyio.sleep(self.watch_interval)
            await self.check_hidden()

    # -- resources, prompts, completion, logging ----------------------------------------------------

    async def list_resources(self, ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
        return await self._list(ctx, params, types.ListResourcesRequest, types.ListResourcesResult, "resources")

    async def list_resource_templates(self, ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
        return await self._list(
            ctx, params, types.ListResourceTemplatesRequest, types.ListResourceTemplatesResult, "resource_templates"
        )

    async def list_prompts(self, ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
        return await self._list(ctx, params, types.ListPromptsRequest, types.ListPromptsResult, "prompts")

    async def _list(
        self, ctx: ServerRequestContext[Any, Any], params: Any, request: Any, result: Any, field: str
    ) -> Any:
        self.clients.remember(ctx)
        if self._single:
            with self.clients.calling(ctx, self.links[0]):
                return await self.links[0].request(request(params=params), result)
        items: list[Any] = []
        for link in self.links:
            try:
                listed = await self._pages(link, request, result, field)
            except Exception as exc:
                logger.debug("otel-breaker: mcp-proxy: %s: %s/list failed: %r", link.label, field, exc)
                continue
            for item in listed:
                if field == "prompts":
                    if item.name in self._prompt_routes and self._prompt_routes[item.name][0] is not link:
                        exposed = f"{link.spec.name}.{item.name}"
                        self._prompt_routes[exposed] = (link, item.name)
                        item = item.model_copy(update={"name": exposed})
                    else:
                        self._prompt_routes[item.name] = (link, item.name)
                elif field == "resources":
                    self._resource_routes.setdefault(str(item.uri), link)
                elif field == "resource_templates":
                    prefix = item.uri_template.split("{", 1)[0]
                    self._resource_routes.setdefault(prefix, link)
                items.append(item)
        _bound(self._resource_routes)
        _bound(self._prompt_routes)
        return result(**{field: items})

    def _link_for_uri(self, uri: str) -> UpstreamLink:
        if self._single:
            return self.links[0]
        link = self._resource_routes.get(uri)
        if link is not None:
            return link
        prefixes = [p for p in self._resource_routes if p and uri.startswith(p)]
        return self._resource_routes[max(prefixes, key=len)] if prefixes else self.links[0]

    def _by_uri(self, request: Any, what: str) -> Callable[..., Any]:
        result = types.ReadResourceResult if what == "read" else types.EmptyResult

        async def handler(ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
            self.clients.remember(ctx)
            link = self._link_for_uri(str(params.uri))
            with self.clients.calling(ctx, link):
                return await link.request(request(params=params), result, _progress(ctx))

        return handler

    async def get_prompt(self, ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams) -> Any:
        self.clients.remember(ctx)
        link, name = self.links[0], params.name
        if not self._single:
            link, name = self._prompt_routes.get(params.name, (link, name))
            params = params if name == params.name else params.model_copy(update={"name": name})
        with self.clients.calling(ctx, link):
            return await link.request(types.GetPromptRequest(params=params), types.GetPromptResult, _progress(ctx))

    async def complete(self, ctx: ServerRequestContext[Any, Any], params: types.CompleteRequestParams) -> Any:
        self.clients.remember(ctx)
        link = self.links[0]
        ref = params.ref
        if not self._single:
            if getattr(ref, "type", None) == "ref/prompt":
                link, name = self._prompt_routes.get(ref.name, (link, ref.name))
                if name != ref.name:
                    params = params.model_copy(update={"ref": ref.model_copy(update={"name": name})})
            else:
                link = self._link_for_uri(str(getattr(ref, "uri", "")))
        with self.clients.calling(ctx, link):
            return await link.request(types.CompleteRequest(params=params), types.CompleteResult)

    async def set_level(self, ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams) -> Any:
        self.clients.remember(ctx)
        for link in self.links:
            caps = link.initialize_result.capabilities if link.initialize_result else None
            if caps is not None and caps.logging is not None:
                await link.request(types.SetLevelRequest(params=params), types.EmptyResult)
        return types.EmptyResult()

    async def client_initialized(self, ctx: ServerRequestContext[Any, Any], params: Any) -> None:
        """A client has connected. The servers were connected before it, so the roots they
        asked for as they started were those of no client: a client that declares roots is
        announced to every server with ``notifications/roots/list_changed``, on which a
        server asks again, and that request reaches this client (the only one, or the one
        whose call is in flight)."""
        self.clients.remember(ctx)
        declared = ctx.session.client_capabilities
        if declared is None or declared.roots is None:
            return
        for link in self.links:
            await link.notify(types.RootsListChangedNotification())

    async def roots_changed(self, ctx: ServerRequestContext[Any, Any], params: Any) -> None:
        """The client's roots changed: every server is told, as the client would have told it."""
        for link in self.links:
            await link.notify(types.RootsListChangedNotification())

    # -- the servers' messages (Downstream) -----------------------------------------------------------

    async def notify(self, link: UpstreamLink, notification: Any) -> None:
        """A server's notification, to its clients.

        A log message sent while one client has calls in flight to the server goes to
        that client only, on its call's channel: it is most likely that call's, and
        may be private to it. While calls of several clients are in flight, the wire
        does not say whose call a log message belongs to, so it goes to none (it could
        carry one client's data to another). A log message with no call in flight is
        the server's own and goes to every client, as do the list-changed and
        resource-updated notifications, which are about the server all clients share.
        Progress never comes here: it reaches the one request it reports on through
        that request's own token (:func:`_progress`)."""
        if isinstance(notification, types.ToolListChangedNotification):
            self._listed.discard(link)
        if isinstance(notification, types.LoggingMessageNotification):
            owner = self.clients.owner(link)
            if owner is not None:
                await self.clients.send(owner, notification)
                return
            if self.clients.several(link):
                logger.debug("otel-breaker: mcp-proxy: a log message of %s has no one owner", link.label)
                return
        await self.clients.broadcast(notification)

    async def request(self, link: UpstreamLink, request: Any, result_type: type[T]) -> T | types.ErrorData:
        capability = {"sampling/createMessage": "sampling", "elicitation/create": "elicitation"}.get(
            request.method, "roots"
        )
        return await self.clients.request(link, request, result_type, capability)

    async def connected(self, link: UpstreamLink) -> None:
        if link.starts > 1:
            # A restarted server may list other tools: the client is told to list them again.
            self._listed.discard(link)
            await self.clients.broadcast(types.ToolListChangedNotification())


def _name_tool_span(ctx: ServerRequestContext[Any, Any], params: Mapping[str, Any] | None) -> None:
    """The SDK's server span of a ``tools/call`` becomes the call's one tool span.

    The SDK names it ``tools/call {tool}`` and marks it ``execute_tool``; the GenAI and
    MCP conventions make a tool call's MCP span and its ``execute_tool`` span one span
    when both would trace the same execution, named ``execute_tool {tool}`` and carrying
    the MCP attributes: the SDK's ``mcp.method.name``, ``mcp.protocol.version`` and
    ``jsonrpc.request.id``, and here ``mcp.session.id`` (over HTTP). The guarded call
    then puts its attributes on it (:mod:`otel_breaker.telemetry.spans`). The tool's
    name is the client's text: bounded and without control characters, as every name."""
    span = trace_api.get_current_span()
    if not span.is_recording():
        return
    attributes = getattr(span, "attributes", None)
    if attributes is None or attributes.get(ATTR_MCP_METHOD) != MCP_TOOLS_CALL:
        return
    name = params.get("name") if params is not None else None
    tool = bounded(name, _MAX_NAME_CHARS) if isinstance(name, str) else ""
    span.update_name(span_name(tool) if tool else MCP_TOOLS_CALL)
    if tool:
        span.set_attribute(ATTR_TOOL, tool)
    session = client_key(ctx)
    if session is not None:
        span.set_attribute(ATTR_MCP_SESSION, bounded(session, _MAX_NAME_CHARS))


class AnswerTooLarge(ConnectionError):
    """The server's answer to a ``tools/call`` was over the proxy's line limit and was
    dropped: the call got no answer it can use, which counts for the server's upstream
    as a lost answer does, and not against the tool (the caller may ask for less)."""


async def _whole_answer(request: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``request(*args)``; the error answer that stands for an answer over the limit is
    raised as :class:`AnswerTooLarge`."""
    try:
        return await request(*args)
    except MCPError as exc:
        if too_large(exc):
            raise AnswerTooLarge(exc.error.message) from exc
        raise


def _progress(ctx: ServerRequestContext[Any, Any]) -> Any:
    """Progress of the forwarded request, back to the client under its own token."""
    meta = ctx.meta
    token = getattr(meta, "progress_token", None) if meta is not None else None
    if token is None:
        return None
    session, request_id = ctx.session, ctx.request_id

    async def forward(progress: float, total: float | None, message: str | None) -> None:
        await session.send_progress_notification(token, progress, total, message, related_request_id=request_id)

    return forward


def _error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _bound(routes: dict[Any, Any]) -> None:
    while len(routes) > _MAX_TOOLS:
        routes.pop(next(iter(routes)))


def _merged_capabilities(all_caps: list[types.ServerCapabilities]) -> types.ServerCapabilities:
    """One server's capabilities as they are; several servers' union."""
    if len(all_caps) == 1:
        return all_caps[0]

    def first(attr: str) -> Any:
        return next((getattr(c, attr) for c in all_caps if getattr(c, attr) is not None), None)

    def any_flag(attr: str, flag: str) -> bool:
        return any(bool(getattr(getattr(c, attr), flag, False)) for c in all_caps if getattr(c, attr) is not None)

    tools = types.ToolsCapability(list_changed=True) if first("tools") is not None else None
    resources = (
        types.ResourcesCapability(subscribe=any_flag("resources", "subscribe"), list_changed=True)
        if first("resources") is not None
        else None
    )
    prompts = types.PromptsCapability(list_changed=True) if first("prompts") is not None else None
    return types.ServerCapabilities(
        tools=tools,
        resources=resources,
        prompts=prompts,
        logging=first("logging"),
        completions=first("completions"),
    )
