"""Local servers the corpus's real clients talk to, each on a random loopback port.

* an HTTP server answering any status (``/status/404``), S3-style XML errors
  (``/<bucket>/<Code>-<status>``) and DynamoDB-style JSON errors (the table name
  ``<Code>-<status>``), so httpx, requests, urllib, aiohttp and botocore each raise
  their own error from a real response;
* a port that accepts connections and never answers (a read timeout);
* a port nothing listens on (a connection refused).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class ErrorHandler(BaseHTTPRequestHandler):
    """Answers the error its path (or DynamoDB table name) asks for."""

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test output is the assertions'."""

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def do_PUT(self) -> None:
        self._answer()

    def do_DELETE(self) -> None:
        self._answer()

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        target = self.headers.get("X-Amz-Target")
        if target:  # DynamoDB's JSON protocol: the error is named by the table
            code, status = json.loads(body)["TableName"].rsplit("-", 1)
            payload = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": f"{code} here"})
            self._send(int(status), payload.encode(), "application/x-amz-json-1.0")
            return
        parts = [part for part in self.path.split("?", 1)[0].split("/") if part]
        if len(parts) == 2 and parts[0] == "status":
            status = int(parts[1])
            headers = {"Allow": "GET"} if status == 405 else {}
            self._send(status, f"status {status}".encode(), "text/plain", headers)
            return
        code, status = parts[-1].rsplit("-", 1)  # S3's REST-XML protocol: the error is named by the key
        xml = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{code} here</Message></Error>"
        self._send(int(status), xml.encode(), "application/xml")

    def _send(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


@pytest.fixture(scope="session")
def http_url() -> Iterator[str]:
    """The base URL of the error server (``http://127.0.0.1:<port>``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), ErrorHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="error-server", daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=30)


@pytest.fixture(scope="session")
def silent_url() -> Iterator[str]:
    """A URL whose server accepts the connection (the kernel's backlog does) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


@pytest.fixture
def dead_port() -> int:
    """A loopback port nothing listens on: connecting is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
