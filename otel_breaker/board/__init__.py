"""The live breaker board: one self-contained HTML page and the compact JSON it polls.

The page (``board.html``, package data) has its script and style inline and
loads nothing else, so it works offline and behind a firewall; the
Content-Security-Policy it is served with allows exactly that inline script
and style (by hash) and requests to its own origin. It is built by no tool:
the file is what the browser gets.

:mod:`otel_breaker.board.model` turns breaker rows (from one process's
registry or from the shared store) into the board's document, cached so that
any number of viewers costs one snapshot per second.
:mod:`otel_breaker.board.server` serves both, and ``/status``, with a bounded
worker pool, idle timeouts and a Host check.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from importlib import resources

__all__ = ["content_security_policy", "page"]


@functools.lru_cache(maxsize=1)
def page() -> bytes:
    """The board's HTML, as shipped (read once)."""
    return resources.files(__package__).joinpath("board.html").read_bytes()


def _hashes(tag: str) -> str:
    found = re.findall(rf"<{tag}>(.*?)</{tag}>".encode(), page(), flags=re.S)
    return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(body).digest()).decode()}'" for body in found)


@functools.lru_cache(maxsize=1)
def content_security_policy() -> str:
    """Only the page's own inline script and style run; only its own origin is fetched."""
    return (
        f"default-src 'none'; script-src {_hashes('script')}; style-src {_hashes('style')}; "
        "connect-src 'self'; img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
