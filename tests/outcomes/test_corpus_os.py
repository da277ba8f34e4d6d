"""``open()`` and ``os`` calls' errors, read by their errno (POSIX).

A wrong path or argument (``ENOENT``, ``ENOTDIR``, ``EISDIR``, ``EEXIST``,
``ENAMETOOLONG``, ``ENOTEMPTY`` ...) is the model's mistake; a refused permission is
authorization (control); the system's own trouble (a full disk, no descriptor left,
a descriptor the tool closed) fails every call whatever the path.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from corpus import caught, expect

from otel_breaker.outcome_rules import CONTROL, FAILURE, MISTAKE


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``notes.txt`` (a file) and ``full/`` (a directory holding one file)."""
    (tmp_path / "notes.txt").write_text("notes\n")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "kept.txt").write_text("kept\n")
    return tmp_path


def missing_file(tree: Path) -> None:
    with open(tree / "missing.txt"):
        pass


def file_as_directory(tree: Path) -> None:
    with open(tree / "notes.txt" / "inside.txt"):
        pass


def directory_as_file(tree: Path) -> None:
    with open(tree / "full", "w"):
        pass


def make_existing_directory(tree: Path) -> None:
    os.mkdir(tree / "full")


def create_existing_file(tree: Path) -> None:
    with open(tree / "notes.txt", "x"):
        pass


def name_too_long(tree: Path) -> None:
    with open(tree / ("n" * 300)):
        pass


def remove_full_directory(tree: Path) -> None:
    os.rmdir(tree / "full")


def symlink_loop(tree: Path) -> None:
    os.symlink("loop", tree / "loop")
    with open(tree / "loop"):
        pass


def list_a_file(tree: Path) -> None:
    os.listdir(tree / "notes.txt")


def run_missing_program(tree: Path) -> None:
    subprocess.run([str(tree / "no-such-program")], check=False)


def write_to_full_disk(tree: Path) -> None:
    """``/dev/full`` answers every write with ENOSPC, as a full disk does."""
    with open("/dev/full", "w") as device:
        device.write("report\n")


def read_closed_descriptor(tree: Path) -> None:
    descriptor = os.open(tree / "notes.txt", os.O_RDONLY)
    os.close(descriptor)
    os.read(descriptor, 10)


CASES: list[tuple[Callable[[Path], None], str, str]] = [
    (missing_file, MISTAKE, "errno.ENOENT"),
    (file_as_directory, MISTAKE, "errno.ENOTDIR"),
    (directory_as_file, MISTAKE, "errno.EISDIR"),
    (make_existing_directory, MISTAKE, "errno.EEXIST"),
    (create_existing_file, MISTAKE, "errno.EEXIST"),
    (name_too_long, MISTAKE, "errno.ENAMETOOLONG"),
    (remove_full_directory, MISTAKE, "errno.ENOTEMPTY"),
    (symlink_loop, MISTAKE, "errno.ELOOP"),
    (list_a_file, MISTAKE, "errno.ENOTDIR"),
    (run_missing_program, MISTAKE, "errno.ENOENT"),
    (write_to_full_disk, FAILURE, "errno.ENOSPC"),
    (read_closed_descriptor, FAILURE, "errno.EBADF"),
]


@pytest.mark.parametrize(("case", "kind", "rule"), CASES, ids=[case.__name__ for case, _, _ in CASES])
def test_os_error(case, kind: str, rule: str, tree: Path) -> None:
    if case is write_to_full_disk and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    exc = caught(case, tree)
    assert isinstance(exc, OSError), exc
    expect(exc, kind, rule)


def _error_in_child(attempt: str, python: str = sys.executable, user: str | None = None) -> OSError:
    """Run ``attempt`` (indented code) in a child Python that prints the OSError it meets as
    JSON, and rebuild that error here: ``OSError(errno, strerror, filename)`` is the class
    the call raised. The child needs nothing but the standard library."""
    code = (
        "import json, sys\n"
        f"try:\n{attempt}"
        "except OSError as exc:\n"
        "    print(json.dumps([exc.errno, exc.strerror, exc.filename]))\n"
        "    sys.exit(0)\n"
        "sys.exit(1)\n"
    )
    result = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120, user=user, check=False)
    assert result.returncode == 0, result.stderr
    number, message, filename = json.loads(result.stdout)
    return OSError(number, message, filename)


def test_too_many_open_files(tree: Path) -> None:
    """EMFILE, in a child process whose descriptor limit is lowered to 32."""
    attempt = (
        "    import resource\n"
        "    resource.setrlimit(resource.RLIMIT_NOFILE, (32, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
        f"    kept = [open({str(tree / 'notes.txt')!r}) for _ in range(64)]\n"
    )
    exc = _error_in_child(attempt)
    expect(exc, FAILURE, "errno.EMFILE")


def test_permission_denied(tree: Path) -> None:
    """EACCES on a file its owner alone may read: authorization, neither a mistake nor a failure.
    Root reads everything, so as root the attempt runs in a child as ``nobody``."""
    secret = tree / "secret.txt"
    secret.write_text("secret\n")
    secret.chmod(0o000)
    if os.geteuid() != 0:
        exc = caught(open, secret)
        assert isinstance(exc, PermissionError), exc
    else:
        try:
            pwd.getpwnam("nobody")
        except KeyError:
            pytest.skip("running as root with no user 'nobody' to be refused")
        # The system's Python: a virtual environment under root's home is not nobody's to run.
        python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
        exc = _error_in_child(f"    open({str(secret)!r})\n", python=python, user="nobody")
        assert isinstance(exc, PermissionError), exc
    expect(exc, CONTROL, "errno.EACCES")
