"""``otel-breaker mcp-proxy`` options and ``mcpServers`` files, checked before anything starts
(no MCP SDK needed: a bad option is reported even without it)."""

from __future__ import annotations

import json

import pytest

from otel_breaker.mcp_proxy import OptionsError, build
from otel_breaker.mcp_proxy.options import load_config, parse_header, parse_listen


def test_a_command_after_the_double_dash_is_the_server():
    options = build(["--", "npx", "-y", "server-filesystem", "/tmp"])
    (server,) = options.servers
    assert server.is_stdio and server.command == "npx" and server.args == ("-y", "server-filesystem", "/tmp")
    assert options.listen is None


def test_exactly_one_way_to_name_the_server():
    with pytest.raises(OptionsError, match="name the MCP server"):
        build([])
    with pytest.raises(OptionsError, match="only one of a command and --upstream"):
        build(["--", "x"], upstream="http://127.0.0.1:1/mcp")


def test_headers_go_with_upstream_and_read_the_environment(monkeypatch):
    monkeypatch.setenv("TOKEN", "s3cret")
    options = build(upstream="https://mcp.example.com/mcp", headers=["Authorization: Bearer ${TOKEN}", "X-A=b"])
    assert dict(options.servers[0].headers) == {"Authorization": "Bearer s3cret", "X-A": "b"}
    with pytest.raises(OptionsError, match=r"\$\{MISSING\} is not set"):
        parse_header("X: ${MISSING}")
    with pytest.raises(OptionsError, match="--header applies to --upstream"):
        build(["--", "x"], headers=["X: y"])
    with pytest.raises(OptionsError, match="expected 'Name: value'"):
        parse_header("no separator")


def test_listen_is_loopback_unless_allowed():
    assert parse_listen("127.0.0.1:8765") == ("127.0.0.1", 8765)
    assert parse_listen("8765") == ("127.0.0.1", 8765)
    assert parse_listen("[::1]:0") == ("::1", 0)
    with pytest.raises(OptionsError, match="not a loopback address"):
        parse_listen("0.0.0.0:80")
    assert parse_listen("0.0.0.0:80", allow_remote=True) == ("0.0.0.0", 80)
    with pytest.raises(OptionsError, match="expected HOST:PORT"):
        parse_listen("localhost")


def test_restart_delays_are_checked():
    with pytest.raises(OptionsError, match="--restart-delay"):
        build(["--", "x"], restart_delay=float("nan"))
    with pytest.raises(OptionsError, match="--max-restart-delay"):
        build(["--", "x"], restart_delay=5, max_restart_delay=1)


def test_config_reads_the_clients_files(tmp_path):
    config = tmp_path / "servers.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "files": {"command": "npx", "args": ["-y", "fs"], "env": {"A": "1"}, "cwd": "/tmp"},
                    "remote": {"url": "https://mcp.example.com/mcp", "headers": {"X-Key": "k"}},
                    "off": {"command": "nope", "disabled": True},
                }
            }
        )
    )
    files, remote = load_config(str(config))
    assert (files.name, files.command, files.args, dict(files.env), files.cwd) == (
        "files",
        "npx",
        ("-y", "fs"),
        {"A": "1"},
        "/tmp",
    )
    assert remote.url == "https://mcp.example.com/mcp" and dict(remote.headers) == {"X-Key": "k"}
    vscode = tmp_path / "mcp.json"
    vscode.write_text(json.dumps({"servers": {"fs": {"type": "stdio", "command": "npx", "args": []}}}))
    assert load_config(str(vscode))[0].command == "npx"


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("not json", "not valid JSON"),
        ("[]", 'expected an object with "mcpServers"'),
        ("{}", 'non-empty "mcpServers"'),
        ('{"mcpServers": {"a": {}}}', 'either "command"'),
        ('{"mcpServers": {"a": {"command": "x", "args": "y"}}}', '"args" must be a list'),
        ('{"mcpServers": {"a": {"url": "ftp://x"}}}', "http:// or https://"),
        ('{"mcpServers": {"a b": {"command": "x"}}}', "server name"),
        ('{"mcpServers": {"a": {"command": "x", "disabled": true}}}', "every server is disabled"),
        ('{"mcpServers": {"a": {"command": "x", "failureErrors": "("}}}', '"failureErrors" does not compile'),
        ('{"mcpServers": {"a": {"command": "x", "neutralErrors": 5}}}', '"neutralErrors" expected a regular'),
    ],
)
def test_a_bad_config_is_one_line_naming_the_problem(tmp_path, document, message):
    config = tmp_path / "servers.json"
    config.write_text(document)
    with pytest.raises(OptionsError, match=message) as caught:
        load_config(str(config))
    assert "\n" not in str(caught.value)


def test_a_config_entry_carries_its_servers_outcome_overrides(tmp_path):
    config = tmp_path / "servers.json"
    entry = {"command": "npx", "neutralErrors": "quota of the day", "failureErrors": "ENOENT"}
    config.write_text(json.dumps({"mcpServers": {"fs": entry, "other": {"command": "x"}}}))
    fs, other = load_config(str(config))
    assert (fs.neutral_errors, fs.failure_errors) == ("quota of the day", "ENOENT")
    assert (other.neutral_errors, other.failure_errors) == (None, None)


def test_a_missing_config_file_is_one_line():
    with pytest.raises(OptionsError, match="cannot read it"):
        load_config("/no/such/servers.json")


def test_a_token_comes_from_a_private_file_or_the_environment(tmp_path):
    token = tmp_path / "token"
    token.write_text("abc123\n")
    token.chmod(0o600)
    options = build(["--", "x"], listen="127.0.0.1:0", token_file=str(token), environ={})
    assert options.token == "abc123" and "abc123" not in repr(options)
    from_env = build(["--", "x"], listen="127.0.0.1:0", environ={"OTEL_BREAKER_PROXY_TOKEN": "env-token"})
    assert from_env.token == "env-token"
    assert build(["--", "x"], listen="127.0.0.1:0", environ={}).token is None


@pytest.mark.parametrize(
    ("content", "mode", "says"),
    [("", 0o600, "the file is empty"), ("\n  \n", 0o600, "the file is empty"), ("abc123", 0o644, "others can read it")],
)
def test_a_token_file_that_is_empty_or_readable_by_others_is_refused(tmp_path, content, mode, says):
    token = tmp_path / "token"
    token.write_text(content)
    token.chmod(mode)
    with pytest.raises(OptionsError, match=says) as refused:
        build(["--", "x"], listen="127.0.0.1:0", token_file=str(token), environ={})
    assert "abc123" not in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(OptionsError, match="cannot read it"):
        build(["--", "x"], listen="127.0.0.1:0", token_file=str(tmp_path / "missing"), environ={})


def test_a_network_listen_address_needs_a_token_or_insecure_no_auth():
    with pytest.raises(OptionsError, match="needs a token"):
        build(["--", "x"], listen="0.0.0.0:80", allow_remote=True, environ={})
    open_proxy = build(["--", "x"], listen="0.0.0.0:80", allow_remote=True, insecure_no_auth=True, environ={})
    assert open_proxy.token is None
    guarded = build(["--", "x"], listen="0.0.0.0:80", allow_remote=True, environ={"OTEL_BREAKER_PROXY_TOKEN": "t"})
    assert guarded.token == "t"


def test_allow_host_takes_names_only():
    options = build(["--", "x"], listen="127.0.0.1:0", allow_hosts=["Proxy.Internal", "[::1]"], environ={})
    assert options.allow_hosts == ("proxy.internal", "::1")
    with pytest.raises(OptionsError, match="--allow-host"):
        build(["--", "x"], listen="127.0.0.1:0", allow_hosts=["http://x/"], environ={})
