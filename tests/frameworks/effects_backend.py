"""The world around ``mcp_proxy/effects_server.py``, for the suites that call it through the
MCP client's adapter (``mcp/test_mcp_effects.py``) and through the proxy
(``mcp_proxy/test_proxy_retries.py``): the HTTP backend its ``fetch_page`` tool fetches from,
which can blip or stay down, and the runs file in which the server notes each tool that
really ran. Both suites assert on the same answers, so the texts the client reads are here too.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: The MCP server whose tools announce their side effects (``fetch_page`` read-only,
#: ``send_message`` and ``post_message`` destructive).
EFFECTS_SERVER = Path(__file__).parent / "mcp_proxy" / "effects_server.py"
PAGE = "<h1>Pricing</h1><p>The team plan costs 12 EUR per seat.</p>"
#: What the client reads of a destructive tool's call in doubt.
OUTCOME_UNKNOWN = "outcome unknown: the call may have taken effect; check before calling again"
#: What the client reads at the end of the last failure of a call tried three times.
THREE_ATTEMPTS = "(otel-breaker: the call failed 3 times; retried 2 times below the model)"


class _Handler(http.server.BaseHTTPRequestHandler):
    """``/blip/...``: 503 the first time, then the page; ``/down/...``: 503 every time;
    ``/gateway/...``: 504 every time."""

    server: Backend

    def do_GET(self) -> None:
        first = self.server.hit(self.path) == 1
        status = 503 if self.path.startswith("/down/") or first else 200
        if self.path.startswith("/gateway/"):
            status = 504
        body = (PAGE if status == 200 else "the server is restarting").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: pytest's output is for the tests."""


class Backend(http.server.ThreadingHTTPServer):
    """The page server the effects server's tools fetch from, on 127.0.0.1 (port 0)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.hits: dict[str, int] = {}
        self.lock = threading.Lock()
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def hit(self, path: str) -> int:
        with self.lock:
            self.hits[path] = self.hits.get(path, 0) + 1
            return self.hits[path]

    def hits_under(self, prefix: str) -> int:
        with self.lock:
            return sum(n for path, n in self.hits.items() if path.startswith(prefix))

    def forget_hits(self) -> None:
        with self.lock:
            self.hits.clear()

    def blip(self, name: str) -> str:
        return f"{self.url}/blip/{name}"

    def down(self, name: str) -> str:
        return f"{self.url}/down/{name}"


@contextmanager
def serving_backend() -> Iterator[Backend]:
    """A :class:`Backend` answering on its own thread until the block ends."""
    backend = Backend()
    thread = threading.Thread(target=backend.serve_forever, name="effects-backend", daemon=True)
    thread.start()
    try:
        yield backend
    finally:
        backend.shutdown()
        backend.server_close()
        thread.join(timeout=60)


class Runs:
    """The server's runs file (``--runs``): the tools that really ran, in order."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def of(self, tool: str) -> int:
        return self.path.read_text().splitlines().count(tool) if self.path.exists() else 0
