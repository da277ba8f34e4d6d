"""The ``otel-breaker`` command (also ``python -m otel_breaker``).

Each group of verbs lives in its own module with a ``register(subparsers)``
function; this module only dispatches. Bad arguments and unusable inputs are
one clear line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Modules that add verbs; a module that is missing adds nothing.
VERB_MODULES = ("demo", "tune", "doctor", "store", "mcp_proxy")


class UsageError(Exception):
    """A problem with the user's input: reported as one line, exit code 2."""


class _OneLineParser(argparse.ArgumentParser):
    """Bad arguments are one line on stderr and exit code 2, for every verb."""

    def error(self, message: str):  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: {message} (see --help)\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="otel-breaker",
        description="Circuit breakers for AI agent tool calls, visible in OpenTelemetry.",
    )
    from otel_breaker import __version__

    parser.add_argument("--version", action="version", version=f"otel-breaker {__version__}")
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_OneLineParser)
    for name in VERB_MODULES:
        try:
            module = importlib.import_module(f"otel_breaker.cli.{name}")
        except ImportError as exc:
            if exc.name != f"otel_breaker.cli.{name}":
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return int(handler(args) or 0)
    except UsageError as exc:
        print(f"otel-breaker {args.verb}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


__all__ = ["UsageError", "build_parser", "main"]
