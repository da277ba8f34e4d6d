"""PostgreSQL's own errors through psycopg 3 (and asyncpg), read by their SQLSTATE.

A real server is started for the module on a random loopback port (``initdb`` and
``pg_ctl`` from Debian's ``postgresql`` package), with password authentication over
TCP. A wrong statement or value (classes 42, 22, 23) is the model's mistake; a
missing privilege is authorization (control); a database that does not exist, a
refused password, a refused connection, a cancelled statement and a terminated
session fail every call whatever the query.
"""

from __future__ import annotations

import asyncio
import glob
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from corpus import caught, expect

from otel_breaker.outcome_rules import CONTROL, FAILURE, MISTAKE

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'psycopg[binary]')")

PASSWORD = "tool-secret"
#: Generous for a busy machine: the server answers each case at once.
CONNECT_TIMEOUT = 30


def _postgres_bindir() -> str | None:
    """The directory of ``initdb`` and ``pg_ctl``: on the PATH, or Debian's newest version."""
    initdb = shutil.which("initdb")
    if initdb is not None:
        bindir = os.path.dirname(os.path.realpath(initdb))
        if os.path.exists(os.path.join(bindir, "pg_ctl")):
            return bindir
    found = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    found.sort(key=lambda path: int(re.sub(r"\D", "", path.split("/")[4]) or 0))
    return os.path.dirname(found[-1]) if found else None


@dataclass
class Postgres:
    port: int
    dead_port: int

    def dsn(self, user: str = "postgres", password: str = PASSWORD, dbname: str = "postgres") -> str:
        return (
            f"host=127.0.0.1 port={self.port} user={user} password={password} dbname={dbname} "
            f"connect_timeout={CONNECT_TIMEOUT}"
        )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    """A PostgreSQL server in a temporary directory; as root, run as the ``postgres`` user
    (or ``nobody``): the server refuses to run as root."""
    bindir = _postgres_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL's initdb and pg_ctl are not installed (Debian package: postgresql)")
    user = None
    if os.geteuid() == 0:
        for name in ("postgres", "nobody"):
            try:
                user = pwd.getpwnam(name)
                break
            except KeyError:
                continue
        if user is None:
            pytest.skip("running as root with no 'postgres' or 'nobody' user to run PostgreSQL")
    workdir = tempfile.mkdtemp(prefix="otel-breaker-pg-")
    if user is not None:
        os.chown(workdir, user.pw_uid, user.pw_gid)
    run_as = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []} if user is not None else {}
    password_file = os.path.join(workdir, "password")
    with open(password_file, "w") as handle:
        handle.write(PASSWORD + "\n")
    if user is not None:
        os.chown(password_file, user.pw_uid, user.pw_gid)
    data = os.path.join(workdir, "data")
    port = _free_port()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, cwd=workdir, capture_output=True, text=True, timeout=180, check=False, **run_as)

    try:
        initdb = run(
            os.path.join(bindir, "initdb"),
            "-D",
            data,
            "-U",
            "postgres",
            "--auth-host=scram-sha-256",
            "--auth-local=trust",
            f"--pwfile={password_file}",
            "--no-sync",
        )
        assert initdb.returncode == 0, initdb.stderr
        options = f"-p {port} -k {workdir} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = os.path.join(workdir, "server.log")
        started = run(os.path.join(bindir, "pg_ctl"), "-D", data, "-l", log, "-o", options, "-w", "-t", "120", "start")
        assert started.returncode == 0, started.stdout + started.stderr + _read(log)
        try:
            with psycopg.connect(Postgres(port, 0).dsn(), autocommit=True) as setup:
                setup.execute("create table users (id int primary key, name text not null, age int)")
                setup.execute("insert into users values (1, 'ada', 36)")
                setup.execute(f"create role reader login password '{PASSWORD}'")
            yield Postgres(port, _free_port())
        finally:
            run(os.path.join(bindir, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "-t", "120", "stop")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _read(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read()[-4000:]
    except OSError:
        return ""


@pytest.fixture
def connection(postgres: Postgres) -> Iterator[psycopg.Connection]:
    with psycopg.connect(postgres.dsn(), autocommit=True) as connection:
        yield connection


def undefined_table(db: psycopg.Connection, pg: Postgres) -> None:
    db.execute("select * from customers")


def undefined_column(db: psycopg.Connection, pg: Postgres) -> None:
    db.execute("select email from users")


def syntax_error(db: psycopg.Connection, pg: Postgres) -> None:
    db.execute("selec * from users")


def unique_violation(db: psycopg.Connection, pg: Postgres) -> None:
    db.execute("insert into users values (1, 'bob', 40)")


def not_null_violation(db: psycopg.Connection, pg: Postgres) -> None:
    db.execute("insert into users values (2, null, 40)")


def invalid_text_representation(db: psycopg.Connection, pg: Postgres) -> None:
    db.execute("select * from users where id = %s::int", ("one",))


def division_by_zero(db: psycopg.Connection, pg: Postgres) -> None:
    db.execute("select age / 0 from users")


def insufficient_privilege(db: psycopg.Connection, pg: Postgres) -> None:
    with psycopg.connect(pg.dsn(user="reader"), autocommit=True) as reader:
        reader.execute("select * from users")


def database_does_not_exist(db: psycopg.Connection, pg: Postgres) -> None:
    psycopg.connect(pg.dsn(dbname="inventory"))


def wrong_password(db: psycopg.Connection, pg: Postgres) -> None:
    psycopg.connect(pg.dsn(password="expired-secret"))


def connection_refused(db: psycopg.Connection, pg: Postgres) -> None:
    psycopg.connect(pg.dsn().replace(f"port={pg.port}", f"port={pg.dead_port}"))


def statement_cancelled_by_timeout(db: psycopg.Connection, pg: Postgres) -> None:
    """The server cancels the statement itself (statement_timeout): no waiting here."""
    db.execute("set statement_timeout = 50")
    db.execute("select pg_sleep(60)")


def session_terminated(db: psycopg.Connection, pg: Postgres) -> None:
    """The server ends the tool's session (a restart, an administrator), and the tool's next query fails."""
    with psycopg.connect(pg.dsn(), autocommit=True) as admin:
        admin.execute("select pg_terminate_backend(%s)", (db.info.backend_pid,))
    db.execute("select 1")


def closed_connection(db: psycopg.Connection, pg: Postgres) -> None:
    db.close()
    db.execute("select 1")


CASES: list[tuple[Callable[[psycopg.Connection, Postgres], None], str, str]] = [
    (undefined_table, MISTAKE, "sqlstate.42P01"),
    (undefined_column, MISTAKE, "sqlstate.42703"),
    (syntax_error, MISTAKE, "sqlstate.42601"),
    (unique_violation, MISTAKE, "sqlstate.23505"),
    (not_null_violation, MISTAKE, "sqlstate.23502"),
    (invalid_text_representation, MISTAKE, "sqlstate.22P02"),
    (division_by_zero, MISTAKE, "sqlstate.22012"),
    (insufficient_privilege, CONTROL, "sqlstate.42501"),
    # libpq reports a refused connection as text only (psycopg sets no SQLSTATE): the text decides.
    (database_does_not_exist, FAILURE, "text.unavailable"),
    (wrong_password, FAILURE, "text.unavailable"),
    (connection_refused, FAILURE, "text.unavailable"),
    (statement_cancelled_by_timeout, FAILURE, "sqlstate.57014"),
    (session_terminated, FAILURE, "sqlstate.57P01"),
    (closed_connection, FAILURE, "text.unavailable"),
]


@pytest.mark.parametrize(("case", "kind", "rule"), CASES, ids=[case.__name__ for case, _, _ in CASES])
def test_psycopg_error(case, kind: str, rule: str, connection: psycopg.Connection, postgres: Postgres) -> None:
    exc = caught(case, connection, postgres)
    assert isinstance(exc, psycopg.Error), exc
    if case is session_terminated and getattr(exc, "sqlstate", None) is None:
        # The server may close the socket before libpq reads its last message: then only
        # libpq's text ("server closed the connection unexpectedly") is left to read.
        rule = "text.unavailable"
    expect(exc, kind, rule)


# -- asyncpg: its own classes, with the SQLSTATE on every server error (also at connect) --------


async def _asyncpg_error(pg: Postgres, query: str | None, **connect: object) -> BaseException:
    asyncpg = pytest.importorskip("asyncpg", reason="asyncpg is not installed")
    options = {"host": "127.0.0.1", "port": pg.port, "user": "postgres", "password": PASSWORD, "database": "postgres"}
    options.update(connect)
    try:
        conn = await asyncio.wait_for(asyncpg.connect(**options), CONNECT_TIMEOUT)
        try:
            await conn.execute(query or "select 1")
        finally:
            await conn.close()
    except Exception as exc:  # the error the case is about
        return exc
    raise AssertionError("asyncpg raised nothing: the case does not reproduce its error")


ASYNCPG_CASES = [
    ("undefined_table", "select * from customers", {}, MISTAKE, "sqlstate.42P01"),
    ("syntax_error", "selec * from users", {}, MISTAKE, "sqlstate.42601"),
    ("invalid_text_representation", "select 'one'::int", {}, MISTAKE, "sqlstate.22P02"),
    ("unique_violation", "insert into users values (1, 'bob', 40)", {}, MISTAKE, "sqlstate.23505"),
    ("database_does_not_exist", None, {"database": "inventory"}, FAILURE, "sqlstate.3D000"),
    ("wrong_password", None, {"password": "expired-secret"}, FAILURE, "sqlstate.28P01"),
    ("connection_refused", None, {"port": "dead"}, FAILURE, "errno.ECONNREFUSED"),
]


@pytest.mark.parametrize(
    ("query", "connect", "kind", "rule"),
    [case[1:] for case in ASYNCPG_CASES],
    ids=[case[0] for case in ASYNCPG_CASES],
)
async def test_asyncpg_error(query: str | None, connect: dict, kind: str, rule: str, postgres: Postgres) -> None:
    if connect.get("port") == "dead":
        connect = {**connect, "port": postgres.dead_port}
    expect(await _asyncpg_error(postgres, query, **connect), kind, rule)
