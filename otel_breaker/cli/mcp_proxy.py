"""``otel-breaker mcp-proxy [options] -- COMMAND [ARGS...]``: breakers in front of any MCP client.

Bad options are one line and exit code 2; a server that cannot be started is
one line and exit code 1; a missing ``mcp`` SDK says what to install.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from otel_breaker.cli import UsageError

INSTALL_HINT = (
    'the MCP proxy needs the MCP SDK: pip install "mcp>=2.3,<3" (or, in a clone of otel-breaker, '
    'pip install -e ".[mcp]")'
)

_EPILOG = """\
examples:
  otel-breaker mcp-proxy -- npx -y @modelcontextprotocol/server-filesystem /tmp
  otel-breaker mcp-proxy --upstream https://mcp.example.com/mcp --header 'Authorization: Bearer ${TOKEN}'
    (single quotes: the proxy reads TOKEN from its environment, so the token never
    reaches the command line or ps)
  otel-breaker mcp-proxy --listen 127.0.0.1:8765 -- python my_server.py
  otel-breaker mcp-proxy --config servers.json

Settings are the OTEL_BREAKER_* and OTEL_* variables; OTEL_BREAKER_ENABLED=false
makes the proxy a transparent pass-through. See docs/mcp-proxy.md.
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "mcp-proxy",
        help="serve an MCP server to any client, with breakers on every tools/call",
        description="Serve an MCP server (a stdio COMMAND, --upstream URL or --config file) to an MCP client over "
        "stdio or --listen HTTP; every tools/call goes through the breakers.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--upstream", metavar="URL", help="a streamable-HTTP MCP server instead of a COMMAND")
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="an HTTP header for --upstream (repeatable; ${VAR} is read from the environment)",
    )
    parser.add_argument("--config", metavar="FILE", help='a JSON file of "mcpServers" (several servers, one proxy)')
    parser.add_argument(
        "--listen", metavar="HOST:PORT", help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio"
    )
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help="let --listen use a non-loopback address (needs a token, or --insecure-no-auth)",
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name clients may address the --listen proxy by (repeatable; Host and Origin are checked)",
    )
    parser.add_argument(
        "--token-file",
        metavar="PATH",
        help="a file (mode 600) holding the bearer token every HTTP request must carry (else OTEL_BREAKER_PROXY_TOKEN)",
    )
    parser.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="let --allow-remote serve without a token: anyone who reaches it can call every tool",
    )
    parser.add_argument(
        "--restart-delay",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="wait before restarting a server that died, doubled after each failed start (default 0.5)",
    )
    parser.add_argument(
        "--max-restart-delay", type=float, default=30.0, metavar="SECONDS", help="the longest wait (default 30)"
    )
    parser.add_argument(
        "--watch-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="how often hidden tools are checked for a change of the tool list (default 1)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from otel_breaker.mcp_proxy import OptionsError, build

    try:
        options = build(
            args.command,
            upstream=args.upstream,
            headers=args.header,
            config=args.config,
            listen=args.listen,
            allow_remote=args.allow_remote,
            allow_hosts=args.allow_host,
            token_file=args.token_file,
            insecure_no_auth=args.insecure_no_auth,
            restart_delay=args.restart_delay,
            max_restart_delay=args.max_restart_delay,
            watch_interval=args.watch_interval,
        )
    except OptionsError as exc:
        raise UsageError(str(exc)) from None
    try:
        import mcp.server.lowlevel  # noqa: F401 - only to say what to install when it is missing
    except ImportError:
        raise UsageError(INSTALL_HINT) from None
    _log_to_stderr()
    from otel_breaker.mcp_proxy import run

    return run(options)


def _log_to_stderr() -> None:
    """Warnings (a server restarting) on stderr, which MCP clients show in their logs;
    stdout is the protocol's."""
    logger = logging.getLogger("otel_breaker")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)
