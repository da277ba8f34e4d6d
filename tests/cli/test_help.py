import pytest
from cli_helpers import run_cli


@pytest.mark.parametrize("verb", ["demo", "tune", "doctor"])
def test_every_verb_has_help(verb):
    result = run_cli(verb, "--help")
    assert result.returncode == 0
    assert result.stdout.startswith(f"usage: otel-breaker {verb}")
    assert result.stderr == ""


def test_the_command_lists_the_verbs():
    result = run_cli("--help")
    assert result.returncode == 0
    for verb in ("demo", "tune", "doctor"):
        assert verb in result.stdout
