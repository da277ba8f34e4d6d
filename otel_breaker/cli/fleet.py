"""``otel-breaker status --serve 127.0.0.1:PORT``: the breaker board for the whole fleet.

The same page as a process's status endpoint (:mod:`otel_breaker.board`), fed
by the shared store instead of one registry: every breaker of every worker
on every host that shares the store and prefix. It serves in the foreground
until interrupted, under the endpoint's rules: loopback unless
``OTEL_BREAKER_STATUS_ALLOW_REMOTE=true``, the Host header checked, read-only
unless ``OTEL_BREAKER_STATUS_CONTROL=true`` with ``OTEL_BREAKER_STATUS_TOKEN``
(then the page's buttons act on the store, as ``otel-breaker open`` does).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from otel_breaker.board.model import Board
from otel_breaker.board.server import BoardServer, matches
from otel_breaker.cli import UsageError
from otel_breaker.config import get_settings
from otel_breaker.status_server import MIN_TOKEN_CHARS, StatusAddressError, parse_address
from otel_breaker.upstream import label_of


class FleetSource:
    """Every breaker under the store's prefix, as board rows.

    The store's successes and failures are counted by every worker into the same
    hash, so the board's per-second sampling of them (``Board.start_sampling``)
    gives the fleet's rates however many workers there are. Rejections happen in
    each worker without a write to the store; each worker adds its own to the
    breaker's ``rejected`` total about once a second, with its calls' durations
    (``store.redis_report``), so rejections per minute and latency are the fleet's too.
    """

    counts_rejections = True

    def __init__(self, store: Any) -> None:
        self.store = store

    def header(self) -> dict[str, Any]:
        from otel_breaker.store.redis import mask_url

        return {"source": "fleet", "store": mask_url(self.store.url or ""), "prefix": self.store.prefix}

    def rows(self) -> list[dict[str, Any]]:
        rows = self.store.snapshot()
        for row in rows:
            row["upstream"] = label_of(row["tool"], None)
        return rows

    def control(
        self, op: str, tool: str | None, duration: float | None, identity: dict[str, str | None] | None = None
    ) -> int:
        """``op`` on every stored breaker of ``tool`` (all with None), as the command line
        does, or only on those with the agent, session and source ``identity`` names."""
        rows = [
            row
            for row in self.store.snapshot()
            if (tool is None or row["tool"] == tool) and (not identity or matches(identity, row))
        ]
        if not rows:
            named = "any tool" if not tool else "tool " + repr(tool)
            if identity:
                named += " with " + ", ".join(f"{k} {v!r}" for k, v in identity.items())
            raise LookupError(f"no breaker for {named} in the store")
        extra: tuple[int, ...] = ()
        if op == "open":
            extra = (-1 if duration is None else int(duration * 1000),)
        for row in rows:
            self.store.control(
                row["key"], op, *extra, tool=row["tool"], agent=row["agent"] or "", session=row["session"] or ""
            )
        return len(rows)


def serve(args: argparse.Namespace, store: Any) -> int:
    """Serve the fleet board until Ctrl-C."""
    settings = get_settings()
    try:
        host, port = parse_address(args.serve, settings.status_allow_remote)
    except StatusAddressError as exc:
        raise UsageError(str(exc).replace("OTEL_BREAKER_STATUS_ADDR", "--serve")) from None
    token = None
    if settings.status_control:
        if not settings.status_token or len(settings.status_token) < MIN_TOKEN_CHARS:
            print(
                f"OTEL_BREAKER_STATUS_CONTROL=true needs OTEL_BREAKER_STATUS_TOKEN of at least {MIN_TOKEN_CHARS} "
                "characters; the board stays read-only",
                file=sys.stderr,
            )
        else:
            token = settings.status_token
    source = FleetSource(store)
    board = Board(source, control=token is not None)
    try:
        server = BoardServer((host, port), board, token=token, control=_invalidating(source.control, board))
    except OSError as exc:
        raise UsageError(f"cannot serve the board on {args.serve}: {exc}") from None
    bound_host, bound_port = server.server_address[:2]
    url = f"http://[{bound_host}]:{bound_port}/" if ":" in bound_host else f"http://{bound_host}:{bound_port}/"
    board.document_for_start()  # what the store holds now is the counts' baseline
    board.start_sampling()  # every second's counts, watched or not
    print(f"fleet breaker board at {url} (store {source.header()['store']}, prefix {store.prefix!r}); Ctrl-C stops")
    sys.stdout.flush()
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        board.stop_sampling()
        server.server_close()
    return 0


def _invalidating(control: Any, board: Board) -> Any:
    def run(op: str, tool: str | None, duration: float | None, identity: dict[str, str | None]) -> int:
        count = control(op, tool, duration, identity)
        board.invalidate()
        return count

    return run
