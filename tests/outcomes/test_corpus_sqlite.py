"""sqlite3's own errors, read by sqlite's result codes (``sqlite_errorname``).

A wrong statement (an unknown table or column, a syntax error, a constraint) is the
model's mistake: the same database answers the next, correct query. A database that
cannot open, is locked by another writer, is not a database, or is read-only fails
every call whatever the statement; so does a connection the tool closed or shares
across threads (sqlite3 raises ProgrammingError for those, whose text says so).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from corpus import caught, expect

from otel_breaker.outcome_rules import FAILURE, MISTAKE, read_exception


@pytest.fixture
def db(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    """A database with one table, ``users(id, name unique not null)``, holding one row."""
    connection = sqlite3.connect(tmp_path / "tool.db", isolation_level=None)
    connection.execute("create table users (id integer primary key, name text not null unique, age integer)")
    connection.execute("insert into users values (1, 'ada', 36)")
    yield connection
    connection.close()


def no_such_column(db: sqlite3.Connection, tmp_path: Path) -> None:
    db.execute("select email from users")


def no_such_table(db: sqlite3.Connection, tmp_path: Path) -> None:
    db.execute("select * from customers")


def syntax_error(db: sqlite3.Connection, tmp_path: Path) -> None:
    db.execute("selec * from users")


def no_such_function(db: sqlite3.Connection, tmp_path: Path) -> None:
    db.execute("select levenshtein(name, 'x') from users")


def unique_constraint(db: sqlite3.Connection, tmp_path: Path) -> None:
    db.execute("insert into users (name) values ('ada')")


def not_null_constraint(db: sqlite3.Connection, tmp_path: Path) -> None:
    db.execute("insert into users (name) values (null)")


def datatype_mismatch(db: sqlite3.Connection, tmp_path: Path) -> None:
    db.execute("insert into users (id, name) values ('one', 'bob')")


def wrong_number_of_bindings(db: sqlite3.Connection, tmp_path: Path) -> None:
    db.execute("select * from users where id = ?", (1, 2))


def cannot_open(db: sqlite3.Connection, tmp_path: Path) -> None:
    sqlite3.connect(tmp_path / "no" / "such" / "dir" / "tool.db")


def locked_by_another_writer(db: sqlite3.Connection, tmp_path: Path) -> None:
    """A second connection holds the write lock; this one does not wait for it (timeout=0)."""
    db.execute("begin immediate")
    db.execute("insert into users (name) values ('bob')")
    other = sqlite3.connect(tmp_path / "tool.db", timeout=0, isolation_level=None)
    try:
        other.execute("insert into users (name) values ('eve')")
    finally:
        other.close()
        db.execute("rollback")


def not_a_database(db: sqlite3.Connection, tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"These are meeting notes, not an SQLite database.\n" * 100)
    sqlite3.connect(path).execute("select * from sqlite_master")


def read_only_database(db: sqlite3.Connection, tmp_path: Path) -> None:
    readonly = sqlite3.connect(f"file:{tmp_path / 'tool.db'}?mode=ro", uri=True)
    try:
        readonly.execute("insert into users (name) values ('bob')")
    finally:
        readonly.close()


def closed_connection(db: sqlite3.Connection, tmp_path: Path) -> None:
    db.close()
    db.execute("select * from users")


def used_from_another_thread(db: sqlite3.Connection, tmp_path: Path) -> None:
    """A tool that opened its connection in one thread and is run by a framework's worker thread."""
    errors: list[BaseException] = []

    def work() -> None:
        errors.append(caught(db.execute, "select * from users"))

    worker = threading.Thread(target=work)
    worker.start()
    worker.join(timeout=60)
    raise errors[0]


CASES: list[tuple[Callable[[sqlite3.Connection, Path], None], str, str]] = [
    (no_such_column, MISTAKE, "sqlite.SQLITE_ERROR"),
    (no_such_table, MISTAKE, "sqlite.SQLITE_ERROR"),
    (syntax_error, MISTAKE, "sqlite.SQLITE_ERROR"),
    (no_such_function, MISTAKE, "sqlite.SQLITE_ERROR"),
    (unique_constraint, MISTAKE, "sqlite.SQLITE_CONSTRAINT_UNIQUE"),
    (not_null_constraint, MISTAKE, "sqlite.SQLITE_CONSTRAINT_NOTNULL"),
    (datatype_mismatch, MISTAKE, "sqlite.SQLITE_MISMATCH"),
    (wrong_number_of_bindings, MISTAKE, "dbapi.ProgrammingError"),
    (cannot_open, FAILURE, "sqlite.SQLITE_CANTOPEN"),
    (locked_by_another_writer, FAILURE, "sqlite.SQLITE_BUSY"),
    (not_a_database, FAILURE, "sqlite.SQLITE_NOTADB"),
    (read_only_database, FAILURE, "sqlite.SQLITE_READONLY"),
    (closed_connection, FAILURE, "text.unavailable"),
    (used_from_another_thread, FAILURE, "text.unavailable"),
]


@pytest.mark.parametrize(("case", "kind", "rule"), CASES, ids=[case.__name__ for case, _, _ in CASES])
def test_sqlite_error(case, kind: str, rule: str, db: sqlite3.Connection, tmp_path: Path) -> None:
    exc = caught(case, db, tmp_path)
    assert isinstance(exc, sqlite3.Error), exc
    if rule.startswith("sqlite.") and not hasattr(exc, "sqlite_errorname"):
        # Python 3.10's sqlite3 gives no result code: the class and the text still decide the kind.
        reading = read_exception(exc)
        assert reading is not None and reading.kind == kind, (exc, reading)
        return
    expect(exc, kind, rule)
