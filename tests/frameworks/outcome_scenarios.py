"""Real tools meeting real errors, shared by the framework suites' outcome tests.

Each framework's ``test_outcomes.py`` runs these through its own agent loop, with
otel-breaker off and on, and compares what ran and what the model read:

* :class:`Mistakes`: a healthy tool and six calls the model got wrong, each
  answered by the real library's own error (sqlite3's "no such column", ``open()``'s
  ``FileNotFoundError``, httpx's 404 from a local server), then the right call. A
  mistake says nothing about the tool: every call must run and the right one must
  answer exactly as without otel-breaker.
* :class:`Outage`: ten calls with ten different arguments to a tool whose backend
  is broken (a refused connection, 500, 503, a 401 on every call, a server that
  never answers, a database that cannot open, a plain ``RuntimeError``). Every
  caller meets these: the breaker must stop running the tool once it opens.

Every suite runs in its own environment, so this module imports only the standard
library, httpx and otel-breaker. The backends are real: an HTTP server on 127.0.0.1 (port 0),
a bound port that listens to nobody, an sqlite file and a folder of notes.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import inspect
import json
import pathlib
import socket
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx

from otel_breaker.registry import default_registry

#: The read timeout of the tool whose server never answers: short, so ten unguarded calls take ten seconds.
READ_TIMEOUT = 1.0
#: Every other HTTP call's timeout: generous, a busy machine must never turn a 404 into a timeout.
HTTP_TIMEOUT = 60.0

#: The scenario names, for ``pytest.mark.parametrize`` (the backends exist only inside a test).
MISTAKE_SCENARIOS = ("run_sql", "read_file", "fetch_page")
OUTAGE_SCENARIOS = (
    "connection_refused",
    "http_500",
    "http_503",
    "http_401_every_call",
    "read_timeout",
    "database_cannot_open",
    "runtime_error",
)

_ORDERS = [(1, "Ada", 120.5), (2, "Grace", 80.0), (3, "Linus", 42.25)]
_NOTE = "Standup moved to 10:30. Ship the invoice export on Friday.\n"
_PAGE = "<h1>Pricing</h1><p>The team plan costs 12 EUR per seat.</p>"


class Runs:
    """How often a tool's body ran: a rejected call never gets here."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


@dataclass(frozen=True)
class Tool:
    """A tool as an agent author writes it: a plain function of one string argument
    with a docstring, which each framework wraps in its own tool type."""

    fn: Callable[[str], str]
    runs: Runs

    @property
    def name(self) -> str:
        return self.fn.__name__

    @property
    def parameter(self) -> str:
        """The name of the function's one parameter (``query``, ``path``, ``url`` ...)."""
        return next(iter(inspect.signature(self.fn).parameters))

    def arguments(self, value: str) -> dict[str, str]:
        """The arguments of a model's call passing ``value``."""
        return {self.parameter: value}


@dataclass(frozen=True)
class Mistakes:
    """Six calls the model got wrong, then the right one, to a tool that works."""

    name: str
    make_tool: Callable[[], Tool]
    wrong: tuple[str, ...]
    #: Part of each wrong call's error text, in order: the library's own words.
    errors: tuple[str, ...]
    right: str
    #: What the right call returns.
    answer: str

    @property
    def calls(self) -> list[str]:
        return [*self.wrong, self.right]


@dataclass(frozen=True)
class Outage:
    """Ten calls with ten different arguments to a tool whose backend is broken."""

    name: str
    make_tool: Callable[[], Tool]
    calls: tuple[str, ...]
    #: Part of every call's error text: the library's own words.
    error: str


#: The answer of a healthy ``fetch_page`` of a ``/blip/`` page (the pricing page).
PAGE = _PAGE
#: What the model reads of a destructive tool's call in doubt.
OUTCOME_UNKNOWN = "outcome unknown: the call may have taken effect; check before calling again"
#: What the model reads at the end of the last failure of a call tried three times.
THREE_ATTEMPTS = "(otel-breaker: the call failed 3 times; retried 2 times below the model)"


def failure_counts(tool: str) -> list[int]:
    """The failures each breaker guarding ``tool`` counted (one per agent): a mistake counts none,
    and one counted below the threshold would still bring a real failure's lockout closer."""
    return [breaker.stats.failure_count for breaker in default_registry().find(tool)]


# -- tools ------------------------------------------------------------------------------------


def sql_tool(database: pathlib.Path) -> Tool:
    """``run_sql(query)`` on an sqlite file, opened read-only for each call."""
    runs = Runs()

    def run_sql(query: str) -> str:
        """Runs one read-only SQL query on the shop database (table orders: id, customer, total)
        and returns the rows as JSON."""
        runs()
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as connection:
            return json.dumps(connection.execute(query).fetchall())

    return Tool(run_sql, runs)


def file_tool(root: pathlib.Path) -> Tool:
    """``read_file(path)`` of a text file under ``root``, with plain ``open()``."""
    runs = Runs()

    def read_file(path: str) -> str:
        """Reads a text file from the team's notes folder; the path is relative to that folder."""
        runs()
        with open(root / path, encoding="utf-8") as handle:
            return handle.read()

    return Tool(read_file, runs)


def page_tool(timeout: httpx.Timeout) -> Tool:
    """``fetch_page(url)`` with httpx: an error status raises (``raise_for_status``)."""
    runs = Runs()

    def fetch_page(url: str) -> str:
        """Fetches a web page and returns its HTML."""
        runs()
        # trust_env=False: a proxy set in the environment must not stand between us and 127.0.0.1.
        response = httpx.get(url, timeout=timeout, trust_env=False)
        response.raise_for_status()
        return response.text

    return Tool(fetch_page, runs)


def quote_tool() -> Tool:
    """``quote_price(sku)``: its engine crashes on every call with an error no rule names."""
    runs = Runs()

    def quote_price(sku: str) -> str:
        """Quotes the current price of a product by its SKU."""
        runs()
        raise RuntimeError(f"pricing engine crashed while quoting {sku}")

    return Tool(quote_price, runs)


# -- backends ---------------------------------------------------------------------------------


def send_tool(url: str) -> Tool:
    """``send_message(text)``: posts a message to a server that never answers; its read
    timeout leaves the caller not knowing whether the message went out."""
    runs = Runs()

    def send_message(text: str) -> str:
        """Sends a message to the team channel."""
        runs()
        response = httpx.post(
            url, json={"text": text}, timeout=httpx.Timeout(HTTP_TIMEOUT, read=READ_TIMEOUT), trust_env=False
        )
        response.raise_for_status()
        return "sent"

    return Tool(send_message, runs)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        #: Set when the server closes: a request held unanswered ends then.
        self.release = threading.Event()
        #: Requests per ``/blip/`` and ``/down/`` path, and the lock they are counted under.
        self.hits: dict[str, int] = {}
        self.hits_lock = threading.Lock()

    def hit(self, path: str) -> int:
        """Count a request to ``path``; how many it has had, this one included."""
        with self.hits_lock:
            self.hits[path] = self.hits.get(path, 0) + 1
            return self.hits[path]


class _Handler(http.server.BaseHTTPRequestHandler):
    """``/docs/pricing``: 200; ``/status/<code>/...``: that status; ``/private/...``: 401
    on every call; ``/hang/...``: accepted, never answered; ``/blip/...``: 503 the first
    time, then the pricing page; ``/down/...``: 503 every time (both counted); anything
    else: 404."""

    server: _Server

    def do_POST(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        if self.path.startswith("/blip/"):
            if self.server.hit(self.path) == 1:
                self._answer(503, "the server is restarting")
            else:
                self._answer(200, _PAGE)
        elif self.path.startswith("/down/"):
            self.server.hit(self.path)
            self._answer(503, "the server is down")
        elif self.path.startswith("/hang/"):
            self.server.release.wait()
            return
        if self.path == "/docs/pricing":
            self._answer(200, _PAGE)
        elif self.path.startswith("/status/"):
            self._answer(int(self.path.split("/")[2]), "the server could not answer")
        elif self.path.startswith("/private/"):
            self._answer(401, "missing credentials", {"WWW-Authenticate": 'Bearer realm="docs"'})
        else:
            self._answer(404, "no such page")

    def _answer(self, status: int, body: str, headers: dict[str, str] | None = None) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: pytest's output is for the tests."""


class Backends:
    """Every backend of the scenarios, live for one test; see :func:`backends`."""

    def __init__(self, workdir: pathlib.Path, server_url: str, closed_port: int, server: _Server) -> None:
        self._server = server
        self.server_url = server_url
        self.closed_port = closed_port
        self.database = workdir / "shop.db"
        self.notes = workdir / "notes"
        self.missing_database = workdir / "no-such-folder" / "shop.db"

    def hits(self, prefix: str) -> int:
        """Requests the server received to paths starting with ``prefix`` (``/blip/``, ``/down/``)."""
        with self._server.hits_lock:
            return sum(n for path, n in self._server.hits.items() if path.startswith(prefix))

    def forget_hits(self) -> None:
        """Start counting afresh: a ``/blip/`` page fails once more."""
        with self._server.hits_lock:
            self._server.hits.clear()

    def blip(self, name: str) -> str:
        """A page whose server answers 503 once (restarting), then the page."""
        return f"{self.server_url}/blip/{name}"

    def down(self, name: str) -> str:
        """A page whose server answers 503 every time."""
        return f"{self.server_url}/down/{name}"

    def hang(self, name: str) -> str:
        """A server that takes the request and never answers."""
        return f"{self.server_url}/hang/{name}"

    def mistakes(self, name: str) -> Mistakes:
        """The :data:`MISTAKE_SCENARIOS` entry ``name``."""
        return {s.name: s for s in self._mistakes()}[name]

    def outage(self, name: str) -> Outage:
        """The :data:`OUTAGE_SCENARIOS` entry ``name``."""
        return {s.name: s for s in self._outages()}[name]

    def _mistakes(self) -> list[Mistakes]:
        site = self.server_url
        return [
            Mistakes(
                "run_sql",
                functools.partial(sql_tool, self.database),
                wrong=(
                    "SELECT nme FROM orders",
                    "SELECT * FROM customers",
                    "SELEC * FROM orders",
                    "SELECT customer FROM orders WHERE",
                    "SELECT upper(customer, total) FROM orders",
                    "SELECT * FROM orders ORDER BY placed_at",
                ),
                errors=(
                    "no such column: nme",
                    "no such table: customers",
                    "syntax error",
                    "incomplete input",
                    "wrong number of arguments to function upper()",
                    "no such column: placed_at",
                ),
                right="SELECT customer, total FROM orders WHERE id = 2",
                answer='[["Grace", 80.0]]',
            ),
            Mistakes(
                "read_file",
                functools.partial(file_tool, self.notes),
                wrong=(
                    "standup.txt",
                    "notes/standup.md",
                    "team/standup.md",
                    "standup.MD",
                    "archive/2026/standup.md",
                    "stand-up.md",
                ),
                errors=("No such file or directory",) * 6,
                right="standup.md",
                answer=_NOTE,
            ),
            Mistakes(
                "fetch_page",
                functools.partial(page_tool, httpx.Timeout(HTTP_TIMEOUT)),
                wrong=(
                    f"{site}/pricing",
                    f"{site}/docs/prices",
                    f"{site}/docs/pricing.html",
                    f"{site}/doc/pricing",
                    f"{site}/docs/Pricing",
                    f"{site}/docs/pricing/team",
                ),
                errors=("404 Not Found",) * 6,
                right=f"{site}/docs/pricing",
                answer=_PAGE,
            ),
        ]

    def _outages(self) -> list[Outage]:
        site, refused = self.server_url, f"http://127.0.0.1:{self.closed_port}"
        fetch = functools.partial(page_tool, httpx.Timeout(HTTP_TIMEOUT))
        slow = functools.partial(page_tool, httpx.Timeout(HTTP_TIMEOUT, read=READ_TIMEOUT))
        return [
            Outage("connection_refused", fetch, _ten(f"{refused}/docs/page-{{}}"), "Connection refused"),
            Outage("http_500", fetch, _ten(f"{site}/status/500/page-{{}}"), "500 Internal Server Error"),
            Outage("http_503", fetch, _ten(f"{site}/status/503/page-{{}}"), "503 Service Unavailable"),
            Outage("http_401_every_call", fetch, _ten(f"{site}/private/page-{{}}"), "401 Unauthorized"),
            Outage("read_timeout", slow, _ten(f"{site}/hang/page-{{}}"), "timed out"),
            Outage(
                "database_cannot_open",
                functools.partial(sql_tool, self.missing_database),
                _ten("SELECT total FROM orders WHERE id = {}"),
                "unable to open database file",
            ),
            Outage("runtime_error", quote_tool, _ten("SKU-{}"), "pricing engine crashed"),
        ]


def _ten(template: str) -> tuple[str, ...]:
    """Ten different arguments: ``template`` formatted with 1 to 10."""
    return tuple(template.format(i) for i in range(1, 11))


@contextlib.contextmanager
def backends(workdir: pathlib.Path) -> Iterator[Backends]:
    """The scenarios' backends under ``workdir`` (pytest's ``tmp_path``), torn down after.

    The refused port stays bound without listening: a connection to it is refused, and no
    other program can take the port while the test runs."""
    database = workdir / "shop.db"
    with contextlib.closing(sqlite3.connect(database)) as connection, connection:
        connection.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT, total REAL)")
        connection.executemany("INSERT INTO orders VALUES (?, ?, ?)", _ORDERS)
    (workdir / "notes").mkdir()
    (workdir / "notes" / "standup.md").write_text(_NOTE, encoding="utf-8")
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, name="outcome-scenarios-http", daemon=True)
    thread.start()
    closed = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        closed.bind(("127.0.0.1", 0))
        host, port = server.server_address[:2]
        yield Backends(workdir, f"http://{host}:{port}", closed.getsockname()[1], server)
    finally:
        closed.close()
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=60)


@contextlib.contextmanager
def retry_backends(workdir: pathlib.Path) -> Iterator[Backends]:
    """:func:`backends` for the retries tests: while they live, back-offs return at once (the
    clock they wait on is the breakers' own real one, so a wait is skipped, never slept);
    after, the real timing is back and the side effects registered for tools are forgotten."""
    from otel_breaker import effects, retry_policy

    async def skip(seconds: float) -> None:
        return None

    retry_policy.set_retry_timing(lambda seconds: None, skip)
    try:
        with backends(workdir) as found:
            yield found
    finally:
        retry_policy.set_retry_timing()
        effects.clear_registered_effects()
