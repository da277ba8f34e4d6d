"""``otel-breaker status | reset | open | close``: the breakers in the shared store.

They read the store ``OTEL_BREAKER_STORE`` names (or ``--store URL``: one node,
any Cluster node, ``redis+cluster://`` or ``redis+sentinel://``) and the prefix
``OTEL_BREAKER_REDIS_PREFIX`` (or ``--prefix``). On a Cluster, ``status`` scans
every primary. Manual changes are published, so running workers follow them at
once. With ``--url`` they talk to one process's status endpoint instead
(:mod:`otel_breaker.cli.remote`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from typing import Any

from otel_breaker.cli import UsageError
from otel_breaker.sanitize import bounded

#: Socket timeout of the command line's Redis client: longer than a worker's,
#: since a person is waiting, not a tool call.
CLI_TIMEOUT = 2.0


def register(subparsers: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store",
        metavar="URL",
        help="redis://host:6379/0 (any Cluster node), redis+cluster://host:7000 or "
        "redis+sentinel://host:26379/service (default: $OTEL_BREAKER_STORE)",
    )
    common.add_argument("--prefix", help="key prefix (default: $OTEL_BREAKER_REDIS_PREFIX or otel_breaker)")
    common.add_argument(
        "--url",
        help="a process's status endpoint, 127.0.0.1:PORT or http://127.0.0.1:PORT (default: "
        "$OTEL_BREAKER_STATUS_ADDR when no store is named)",
    )

    status = subparsers.add_parser(
        "status",
        parents=[common],
        help="every breaker in the shared store",
        description="Every breaker in the shared store: tool, state, recent failures, retry-after, last change.",
    )
    status.add_argument("--json", action="store_true", help="one JSON document, for scripts")
    status.add_argument(
        "--serve",
        metavar="HOST:PORT",
        help="serve the live breaker board of the whole fleet (the shared store) at http://HOST:PORT/ until Ctrl-C",
    )
    status.set_defaults(handler=_status)

    reset = subparsers.add_parser(
        "reset", parents=[common], help="reset breakers to a fresh closed state", description="Reset breakers."
    )
    reset.add_argument("tool", nargs="?", metavar="TOOL", help="every breaker of this tool")
    reset.add_argument("--all", action="store_true", help="every breaker under the prefix")
    reset.set_defaults(handler=_reset)

    opener = subparsers.add_parser(
        "open", parents=[common], help="open a tool's breakers now", description="Open a tool's breakers now."
    )
    opener.add_argument("tool", metavar="TOOL")
    opener.add_argument("--for", dest="duration", type=float, metavar="SECONDS", help="then allow probes again")
    opener.add_argument("--create", action="store_true", help="also open a tool no worker has used yet")
    opener.set_defaults(handler=_open)

    closer = subparsers.add_parser(
        "close", parents=[common], help="close a tool's breakers now", description="Close a tool's breakers now."
    )
    closer.add_argument("tool", metavar="TOOL")
    closer.set_defaults(handler=_close)


def _connect(args: argparse.Namespace) -> Any:
    url = args.store or os.environ.get("OTEL_BREAKER_STORE", "").strip()
    if not url or url == "memory":
        raise UsageError(
            "no shared store: set OTEL_BREAKER_STORE=redis://host:6379/0 or pass --store URL; per-process "
            "breakers live inside each agent process: pass --url http://127.0.0.1:PORT to ask one through "
            "its status endpoint (OTEL_BREAKER_STATUS_ADDR)"
        )
    try:
        from otel_breaker.store.redis import RedisStore, StoreError
    except ImportError as exc:  # pragma: no cover
        raise UsageError(str(exc)) from None
    prefix = args.prefix or os.environ.get("OTEL_BREAKER_REDIS_PREFIX", "").strip() or None
    password = os.environ.get("OTEL_BREAKER_REDIS_PASSWORD") or None
    try:
        store = RedisStore.from_url(url, prefix=prefix, password=password, socket_timeout=CLI_TIMEOUT, watch=False)
        store.check()
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    return store


def _use_status_addr(args: argparse.Namespace) -> None:
    """With neither ``--url`` nor a store named, ask the endpoint ``OTEL_BREAKER_STATUS_ADDR`` names.

    The variable that opens a process's endpoint is the one a person has at hand in that
    process's environment, so the verbs read it as ``--url``'s default; a named store
    (``--store`` or ``OTEL_BREAKER_STORE``) is the fleet and wins."""
    if args.url or args.store or getattr(args, "serve", None):
        return
    store = os.environ.get("OTEL_BREAKER_STORE", "").strip()
    addr = os.environ.get("OTEL_BREAKER_STATUS_ADDR", "").strip()
    if addr and (not store or store == "memory"):
        args.url = addr


def _run(store: Any, action: Any) -> Any:
    from otel_breaker.store.redis import describe_error

    try:
        return action()
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(describe_error(exc, store.url)) from None
    finally:
        store.close()


def _status(args: argparse.Namespace) -> int:
    _use_status_addr(args)
    if args.url and args.serve:
        raise UsageError("--serve shows the shared store; a process's own board is already at its --url")
    if args.url:
        from otel_breaker.cli import remote

        document = remote.status(args)
        if args.json:
            json.dump(document, sys.stdout, indent=2)
            sys.stdout.write("\n")
        elif not document["breakers"]:
            print(f"no breakers in process {document.get('pid')} at {args.url}")
        else:
            _print_table(document["breakers"])
        return 0
    store = _connect(args)
    if args.serve:
        from otel_breaker.cli import fleet

        try:
            return fleet.serve(args, store)
        finally:
            store.close()
    rows = _run(store, store.snapshot)
    if args.json:
        json.dump({"store": _masked(store), "prefix": store.prefix, "breakers": rows}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not rows:
        print(f"no breakers in {_masked(store)} under prefix {store.prefix!r}")
        return 0
    _print_table(rows)
    return 0


def _print_table(rows: list[dict[str, Any]]) -> None:
    header = ("TOOL", "SCOPE", "STATE", "FAILURES", "RETRY-AFTER", "LAST CHANGE")
    table = [header]
    for row in rows:
        table.append(
            (
                row["tool"],
                _scope(row),
                row["state"].replace("_", "-"),
                f"{row['consecutive_failures']} in a row, {row['failures']} total",
                _retry(row),
                _when(row["last_change_ms"], row["last_change_age_s"]),
            )
        )
    table = [tuple(bounded(cell) for cell in line) for line in table]  # names from the store reach a terminal
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())


def _scope(row: dict[str, Any]) -> str:
    if row["session"]:
        return f"session {row['session']}"
    if row["agent"]:
        return f"agent {row['agent']}"
    return "tool"


def _retry(row: dict[str, Any]) -> str:
    if row["state"] != "open":
        return "-"
    if row["forced_open"]:
        return "until closed"
    return f"{row['retry_after_s']:.1f}s"


def _when(ms: int | None, age: float | None) -> str:
    if ms is None or age is None:
        return "-"
    stamp = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    return f"{stamp} ({_ago(age)} ago)"


def _ago(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


def _masked(store: Any) -> str:
    from otel_breaker.store.redis import mask_url

    return mask_url(store.url or "")


def _targets(store: Any, tool: str | None, create: bool) -> list[dict[str, Any]]:
    rows = store.snapshot()
    if tool is None:
        return rows
    chosen = [row for row in rows if row["tool"] == tool]
    if not chosen and create:
        chosen = [{"key": store.key_for(tool), "tool": tool, "agent": None, "session": None}]
    return chosen


def _apply(args: argparse.Namespace, op: str, tool: str | None, *extra: Any, create: bool = False) -> int:
    done = {"reset": "reset", "open": "opened", "close": "closed"}[op]
    _use_status_addr(args)
    if args.url:
        from otel_breaker.cli import remote

        count = remote.control(args, op, tool)
        print(f"{done} {count} breaker{'s' if count != 1 else ''}" + (f" of tool {tool!r}" if tool else ""))
        return 0
    store = _connect(args)

    def action() -> int:
        rows = _targets(store, tool, create)
        if not rows:
            # The same answer from every verb: an unknown name never makes a breaker.
            what = f"tool {tool!r}" if tool else "any tool"
            hint = " (pass --create to open a tool no worker has used yet)" if op == "open" and tool else ""
            raise UsageError(f"no breaker for {what} in the store under prefix {store.prefix!r}{hint}")
        for row in rows:
            store.control(
                row["key"], op, *extra, tool=row["tool"], agent=row["agent"] or "", session=row["session"] or ""
            )
        return len(rows)

    count = _run(store, action)
    print(f"{done} {count} breaker{'s' if count != 1 else ''}" + (f" of tool {tool!r}" if tool else ""))
    return 0


def _reset(args: argparse.Namespace) -> int:
    if args.all == bool(args.tool):
        raise UsageError("name a TOOL or pass --all")
    return _apply(args, "reset", None if args.all else args.tool, create=False)


def _open(args: argparse.Namespace) -> int:
    if args.duration is not None and not args.duration >= 0:
        raise UsageError("--for takes a number of seconds >= 0")
    duration = -1 if args.duration is None else int(args.duration * 1000)
    return _apply(args, "open", args.tool, duration, create=args.create)


def _close(args: argparse.Namespace) -> int:
    return _apply(args, "close", args.tool)
