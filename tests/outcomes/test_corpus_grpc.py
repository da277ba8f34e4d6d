"""gRPC's own errors from a real local server, read by their status code.

The server is grpcio's, with a generic handler on raw bytes (no generated code): the
request names the status to abort with. The client's ``grpc.RpcError`` carries the
code the server sent; the status-code guide's codes the client caused
(``INVALID_ARGUMENT``, ``NOT_FOUND``, ``ALREADY_EXISTS``) are mistakes,
``PERMISSION_DENIED`` is authorization, and what the server or the network causes
(``UNAVAILABLE``, ``INTERNAL``, ``UNAUTHENTICATED``, a deadline, a crash) is a failure.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from corpus import caught, expect

from otel_breaker.outcome_rules import CONTROL, FAILURE, MISTAKE

grpc = pytest.importorskip("grpc", reason="grpcio is not installed")

#: Generous for a busy machine: the server answers each case at once.
ANSWER_TIMEOUT = 30.0
#: How long the client gives the server that never answers; the case asserts the code, never the time.
DEADLINE = 1.0


def _fail(request: bytes, context: grpc.ServicerContext) -> bytes:
    """Abort with the status the request names; ``crash`` raises inside the handler."""
    name = request.decode()
    if name == "crash":
        raise RuntimeError("the tool's backend crashed")
    context.abort(grpc.StatusCode[name], f"{name.lower().replace('_', ' ')}: answered by the test server")
    return b""


@pytest.fixture(scope="module")
def grpc_target() -> Iterator[str]:
    """``127.0.0.1:<port>`` of a server with ``/tools.Tools/Fail`` and ``/tools.Tools/Hang``."""
    release = threading.Event()

    def hang(request: bytes, context: grpc.ServicerContext) -> bytes:
        release.wait(timeout=120)
        return b"late"

    handlers = {
        "Fail": grpc.unary_unary_rpc_method_handler(_fail),
        "Hang": grpc.unary_unary_rpc_method_handler(hang),
    }
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("tools.Tools", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    release.set()
    server.stop(grace=None).wait(timeout=60)


STATUSES = [
    ("NOT_FOUND", MISTAKE),
    ("INVALID_ARGUMENT", MISTAKE),
    ("ALREADY_EXISTS", MISTAKE),
    ("OUT_OF_RANGE", MISTAKE),
    ("PERMISSION_DENIED", CONTROL),
    ("UNAVAILABLE", FAILURE),
    ("INTERNAL", FAILURE),
    ("UNAUTHENTICATED", FAILURE),
    ("RESOURCE_EXHAUSTED", FAILURE),
]


@pytest.mark.parametrize(("code", "kind"), STATUSES, ids=[code for code, _ in STATUSES])
def test_status_from_server(code: str, kind: str, grpc_target: str) -> None:
    with grpc.insecure_channel(grpc_target) as channel:
        exc = caught(channel.unary_unary("/tools.Tools/Fail"), code.encode(), timeout=ANSWER_TIMEOUT)
    assert isinstance(exc, grpc.RpcError), exc
    expect(exc, kind, f"grpc.{code}")


def test_handler_crash_is_unknown(grpc_target: str) -> None:
    """An exception inside the server's handler reaches the client as UNKNOWN: the tool is broken."""
    with grpc.insecure_channel(grpc_target) as channel:
        exc = caught(channel.unary_unary("/tools.Tools/Fail"), b"crash", timeout=ANSWER_TIMEOUT)
    expect(exc, FAILURE, "grpc.UNKNOWN")


def test_deadline_exceeded(grpc_target: str) -> None:
    with grpc.insecure_channel(grpc_target) as channel:
        exc = caught(channel.unary_unary("/tools.Tools/Hang"), b"", timeout=DEADLINE)
    expect(exc, FAILURE, "grpc.DEADLINE_EXCEEDED")


def test_no_server_is_unavailable(dead_port: int) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{dead_port}") as channel:
        exc = caught(channel.unary_unary("/tools.Tools/Fail"), b"NOT_FOUND", timeout=ANSWER_TIMEOUT)
    expect(exc, FAILURE, "grpc.UNAVAILABLE")


def test_unknown_method_is_unimplemented(grpc_target: str) -> None:
    """A method the server does not have: the server (or its version) cannot serve anyone."""
    with grpc.insecure_channel(grpc_target) as channel:
        exc = caught(channel.unary_unary("/tools.Tools/Missing"), b"", timeout=ANSWER_TIMEOUT)
    expect(exc, FAILURE, "grpc.UNIMPLEMENTED")


@pytest.mark.parametrize(("code", "kind"), [("NOT_FOUND", MISTAKE), ("UNAVAILABLE", FAILURE)])
def test_asyncio_client(code: str, kind: str, grpc_target: str) -> None:
    """grpc.aio's ``AioRpcError`` is read the same way."""

    async def call() -> BaseException:
        async with grpc.aio.insecure_channel(grpc_target) as channel:
            try:
                await channel.unary_unary("/tools.Tools/Fail")(code.encode(), timeout=ANSWER_TIMEOUT)
            except grpc.aio.AioRpcError as exc:
                return exc
        raise AssertionError("the call raised nothing")

    expect(asyncio.run(call()), kind, f"grpc.{code}")
