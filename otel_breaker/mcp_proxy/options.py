"""What ``otel-breaker mcp-proxy`` is asked to do, validated before anything starts.

Every problem is an :class:`OptionsError` whose text is one line naming the
value: the command prints it and exits non-zero, so a client that launches the
proxy shows the user why it did not start instead of a traceback. Nothing here
imports the ``mcp`` SDK, so bad options are reported even without it.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from otel_breaker.breaker_config import pattern_problem
from otel_breaker.config.values import parse_error_patterns
from otel_breaker.status_server import is_loopback

#: Name of the one server of a proxy started with a command or ``--upstream``.
DEFAULT_SERVER_NAME = "server"
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
_SERVER_NAME = re.compile(r"^[\w.@+-]{1,64}$")
_MAX_CONFIG_BYTES = 1 << 20
_MAX_SERVERS = 64
_MAX_TOKEN_BYTES = 4096
_HOST_NAME = re.compile(r"^[a-z0-9.:_-]{1,253}$")
#: Where the HTTP mode's bearer token may come from, besides ``--token-file``.
TOKEN_VARIABLE = "OTEL_BREAKER_PROXY_TOKEN"
#: The outcome overrides the proxy's breakers read from its environment (``tool=regex;@server=regex``).
ERROR_PATTERN_VARIABLES = ("OTEL_BREAKER_NEUTRAL_ERRORS", "OTEL_BREAKER_FAILURE_ERRORS")


class OptionsError(ValueError):
    """A bad option or configuration file: one line for the user."""


@dataclass(frozen=True)
class ServerSpec:
    """One MCP server behind the proxy: a stdio command, or a streamable-HTTP URL."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    neutral_errors: str | None = None
    """A ``--config`` entry's ``"neutralErrors"``: errors of this server's tools that are the
    caller's mistake (a regular expression, as ``OTEL_BREAKER_NEUTRAL_ERRORS`` takes)."""
    failure_errors: str | None = None
    """A ``--config`` entry's ``"failureErrors"``: errors of this server's tools that count."""

    @property
    def is_stdio(self) -> bool:
        return self.command is not None

    def describe(self) -> str:
        """The server as a user would recognise it, without query strings or header values."""
        if self.url is not None:
            return self.url.split("?", 1)[0]
        return " ".join([self.command or "", *self.args])[:200]


@dataclass(frozen=True)
class ProxyOptions:
    """Everything the proxy needs to run; built by :func:`build`."""

    servers: tuple[ServerSpec, ...]
    listen: tuple[str, int] | None = None
    """Serve streamable HTTP on (host, port) instead of stdio."""
    path: str = "/mcp"
    restart_delay: float = 0.5
    """First wait before restarting a server that died; doubled after each failed start."""
    max_restart_delay: float = 30.0
    watch_interval: float = 1.0
    """How often hidden tools are checked for a change of the tool list (seconds)."""
    allow_hosts: tuple[str, ...] = ()
    """Host names (besides the listen address) a request over HTTP may address the proxy by."""
    token: str | None = field(default=None, repr=False)
    """The bearer token every HTTP request must carry (never shown)."""


def parse_listen(raw: str, allow_remote: bool = False) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT``; ``:PORT`` or ``PORT`` is loopback) -> (host, port).

    Only loopback unless ``allow_remote``: a proxy that forwards tool calls must
    not reach the network because of a typo."""
    text = raw.strip()
    if text.isdigit():
        text = f"127.0.0.1:{text}"
    host, sep, port_text = text.rpartition(":")
    if not sep or not (port_text.isascii() and port_text.isdigit()):
        raise OptionsError(f"--listen {raw!r}: expected HOST:PORT, e.g. 127.0.0.1:8765")
    port = int(port_text)
    if port > 65535:
        raise OptionsError(f"--listen {raw!r}: the port must be 0-65535")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else (host or "127.0.0.1")
    if not allow_remote and not is_loopback(host):
        raise OptionsError(
            f"--listen {raw!r}: {host} is not a loopback address; pass --allow-remote to listen on the network"
        )
    return host, port


def read_token(token_file: str | None, environ: Mapping[str, str]) -> str | None:
    """The HTTP mode's bearer token: the content of ``token_file`` (which wins), else
    ``OTEL_BREAKER_PROXY_TOKEN``; never a command-line value, which ``ps`` would show.

    A file that is missing, empty or readable by others is refused: a token others
    can read protects nothing. The messages never quote the token."""
    if token_file is None:
        token = environ.get(TOKEN_VARIABLE, "").strip()
        return token or None
    where = f"--token-file {token_file}"
    try:
        mode = os.stat(token_file).st_mode
        raw = Path(token_file).read_bytes()[:_MAX_TOKEN_BYTES]
    except OSError as exc:
        raise OptionsError(f"{where}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    if mode & 0o077:
        raise OptionsError(f"{where}: others can read it (mode {mode & 0o777:o}); chmod 600 {token_file}")
    try:
        token = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise OptionsError(f"{where}: not UTF-8 text") from None
    if not token:
        raise OptionsError(f"{where}: the file is empty")
    if any(ch.isspace() or not ch.isprintable() for ch in token):
        raise OptionsError(f"{where}: the token must be one line of printable characters without spaces")
    return token


def parse_allow_host(raw: str) -> str:
    """A host name for ``--allow-host`` (no scheme, port or path), lower case."""
    name = raw.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if not _HOST_NAME.match(name):
        raise OptionsError(f"--allow-host {raw[:80]!r}: expected a host name or address, e.g. proxy.internal")
    return name


def parse_header(raw: str) -> tuple[str, str]:
    """``Name: value`` (or ``Name=value``) -> (name, value); the value may reference
    ``${VAR}`` environment variables so tokens stay out of configuration files."""
    match = re.match(r"^\s*([^:=\s]+)\s*[:=]\s?(.*)$", raw)
    if match is None or not _HEADER_NAME.match(match.group(1)):
        raise OptionsError(f"--header {raw[:60]!r}: expected 'Name: value', e.g. 'Authorization: Bearer ${{TOKEN}}'")
    value = _expand(match.group(2), "--header")
    if any(ch in value for ch in "\r\n\0"):
        raise OptionsError(f"--header {match.group(1)}: the value contains a line break")
    return match.group(1), value


def _expand(value: str, where: str) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in os.environ:
            raise OptionsError(f"{where}: ${{{name}}} is not set in the environment")
        return os.environ[name]

    return re.sub(r"\$\{(\w+)\}", one, value)


def _url(raw: str, where: str) -> str:
    text = raw.strip()
    if not re.match(r"^https?://[^\s/]+", text):
        raise OptionsError(f"{where} {raw[:80]!r}: expected an http:// or https:// URL of a streamable-HTTP MCP server")
    return text


def _seconds(value: float, what: str, low: float) -> float:
    if not (math.isfinite(value) and value >= low):
        raise OptionsError(f"{what}: expected a number of seconds >= {low:g}, got {value!r}")
    return value


def load_config(path: str) -> tuple[ServerSpec, ...]:
    """The servers of an ``mcpServers`` file (Claude Desktop's, Cursor's shape; VS Code's
    ``servers`` key is read too): each entry ``{"command", "args", "env", "cwd"}`` or
    ``{"url", "headers"}``. Entries with ``"disabled": true`` are skipped."""
    where = f"--config {path}"
    file = Path(path)
    try:
        if file.stat().st_size > _MAX_CONFIG_BYTES:
            raise OptionsError(f"{where}: the file is larger than 1 MiB")
        document = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise OptionsError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise OptionsError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise OptionsError(f'{where}: expected an object with "mcpServers"')
    servers = document.get("mcpServers", document.get("servers"))
    if not isinstance(servers, dict) or not servers:
        raise OptionsError(f'{where}: expected a non-empty "mcpServers" object')
    if len(servers) > _MAX_SERVERS:
        raise OptionsError(f"{where}: more than {_MAX_SERVERS} servers")
    specs = []
    for name, entry in servers.items():
        if not isinstance(entry, dict):
            raise OptionsError(f"{where}: server {name!r} must be an object")
        if entry.get("disabled") is True:
            continue
        specs.append(_spec_from_entry(str(name), entry, where))
    if not specs:
        raise OptionsError(f"{where}: every server is disabled")
    return tuple(specs)


def _error_patterns(entry: Mapping[str, Any], here: str) -> dict[str, str]:
    """An entry's outcome overrides (``"neutralErrors"``, ``"failureErrors"``), each checked."""
    patterns = {}
    for key, option in (("neutralErrors", "neutral_errors"), ("failureErrors", "failure_errors")):
        pattern = entry.get(key)
        if pattern is None:
            continue
        problem = pattern_problem(pattern)
        if problem is not None:
            raise OptionsError(f'{here}: "{key}" {problem}')
        patterns[option] = pattern
    return patterns


def _spec_from_entry(name: str, entry: Mapping[str, Any], where: str) -> ServerSpec:
    if not _SERVER_NAME.match(name):
        raise OptionsError(f"{where}: server name {name[:64]!r} may use letters, digits and . _ - @ + only")
    here = f"{where}: server {name!r}"
    patterns = _error_patterns(entry, here)
    url = entry.get("url", entry.get("serverUrl"))
    command = entry.get("command")
    if (url is None) == (command is None):
        raise OptionsError(f'{here}: give either "command" (stdio) or "url" (streamable HTTP)')
    if url is not None:
        if not isinstance(url, str):
            raise OptionsError(f'{here}: "url" must be a string')
        headers = entry.get("headers") or {}
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            raise OptionsError(f'{here}: "headers" must be an object of strings')
        checked = dict(parse_header(f"{k}: {v}") for k, v in headers.items())
        return ServerSpec(name=name, url=_url(url, here), headers=checked, **patterns)
    args = entry.get("args") or []
    env = entry.get("env") or {}
    cwd = entry.get("cwd")
    if not isinstance(command, str) or not command.strip():
        raise OptionsError(f'{here}: "command" must be a non-empty string')
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise OptionsError(f'{here}: "args" must be a list of strings')
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise OptionsError(f'{here}: "env" must be an object of strings')
    if cwd is not None and not isinstance(cwd, str):
        raise OptionsError(f'{here}: "cwd" must be a string')
    return ServerSpec(name=name, command=command, args=tuple(args), env=dict(env), cwd=cwd, **patterns)


def check_error_patterns(environ: Mapping[str, str]) -> None:
    """The outcome overrides in the proxy's environment, each entry's pattern compiled: one
    that does not compile stops the start with a line naming it, instead of a proxy that
    judges every error of that server by the built-in rules only."""
    for name in ERROR_PATTERN_VARIABLES:
        raw = environ.get(name)
        if not raw:
            continue
        try:
            parse_error_patterns(raw)
        except ValueError as exc:
            raise OptionsError(f"{name}: {exc}") from None


def build(
    command: Sequence[str] = (),
    *,
    upstream: str | None = None,
    headers: Sequence[str] = (),
    config: str | None = None,
    listen: str | None = None,
    allow_remote: bool = False,
    restart_delay: float = 0.5,
    max_restart_delay: float = 30.0,
    watch_interval: float = 1.0,
    allow_hosts: Sequence[str] = (),
    token_file: str | None = None,
    insecure_no_auth: bool = False,
    environ: Mapping[str, str] | None = None,
) -> ProxyOptions:
    """Validated options from the command line's values (exactly one of a command,
    ``upstream`` or ``config`` names the servers) and the outcome overrides of
    ``environ`` (the process's environment when None)."""
    command = list(command)
    if command and command[0] == "--":
        command = command[1:]
    given = [what for what, value in (("a command", command), ("--upstream", upstream), ("--config", config)) if value]
    if len(given) != 1:
        if not given:
            raise OptionsError("name the MCP server: -- COMMAND [ARGS...], --upstream URL or --config servers.json")
        raise OptionsError(f"give only one of {' and '.join(given)}")
    if headers and upstream is None:
        raise OptionsError("--header applies to --upstream (put headers of --config servers in the file)")
    if command:
        servers: tuple[ServerSpec, ...] = (
            ServerSpec(name=DEFAULT_SERVER_NAME, command=command[0], args=tuple(command[1:])),
        )
    elif upstream is not None:
        parsed = dict(parse_header(h) for h in headers)
        servers = (ServerSpec(name=DEFAULT_SERVER_NAME, url=_url(upstream, "--upstream"), headers=parsed),)
    else:
        assert config is not None
        servers = load_config(config)
    restart_delay = _seconds(restart_delay, "--restart-delay", 0.01)
    max_restart_delay = _seconds(max_restart_delay, "--max-restart-delay", restart_delay)
    watch_interval = _seconds(watch_interval, "--watch-interval", 0.05)
    environ = os.environ if environ is None else environ
    check_error_patterns(environ)
    address = parse_listen(listen, allow_remote) if listen is not None else None
    token = read_token(token_file, environ)
    if address is not None and not is_loopback(address[0]) and token is None and not insecure_no_auth:
        raise OptionsError(
            f"--listen {listen}: a proxy on the network needs a token ({TOKEN_VARIABLE} or --token-file); "
            "pass --insecure-no-auth to serve without one"
        )
    return ProxyOptions(
        servers=servers,
        listen=address,
        restart_delay=restart_delay,
        max_restart_delay=max_restart_delay,
        watch_interval=watch_interval,
        allow_hosts=tuple(parse_allow_host(h) for h in allow_hosts),
        token=token,
    )
