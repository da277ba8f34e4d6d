"""A token file the HTTP mode cannot trust stops the proxy before it starts: one line on
stderr, exit code 2, and never the token itself."""

from __future__ import annotations

import subprocess
import sys

import pytest
from proxy_support import breaker_env

TOKEN = "s3cret-token-0123456789"


def start(token_file) -> subprocess.CompletedProcess:
    options = ["--listen", "127.0.0.1:0", "--token-file", str(token_file)]
    return subprocess.run(
        [sys.executable, "-m", "otel_breaker", "mcp-proxy", *options, "--", "server"],
        capture_output=True,
        text=True,
        timeout=60,
        env=breaker_env(),
    )


@pytest.mark.parametrize(
    ("content", "mode", "says"),
    [
        (None, 0o600, "cannot read it"),
        ("", 0o600, "the file is empty"),
        ("  \n", 0o600, "the file is empty"),
        (TOKEN, 0o640, "others can read it"),
        (TOKEN, 0o604, "others can read it"),
        (TOKEN, 0o620, "others can read it"),
        (f"{TOKEN} second-word", 0o600, "one line of printable characters"),
    ],
)
def test_a_token_file_that_is_missing_empty_or_readable_by_others_is_refused(tmp_path, content, mode, says):
    token_file = tmp_path / "token"
    if content is not None:
        token_file.write_text(content)
        token_file.chmod(mode)
    done = start(token_file)
    assert done.returncode == 2 and says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert TOKEN not in done.stderr and "Traceback" not in done.stderr
