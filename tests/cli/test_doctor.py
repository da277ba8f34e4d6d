"""``otel-breaker doctor``: configuration with sources, frameworks and patch points, exporters."""

from __future__ import annotations

import http.server
import re
import socket
import subprocess
import sys
import threading
import time

import pytest
from cli_helpers import clean_env, run_cli

from otel_breaker.instrumentation import ADAPTERS


def test_doctor_on_a_clean_environment():
    result = run_cli("doctor")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert re.match(r"otel-breaker \S+ on Python 3\.\d+\.\d+ \(", out)
    assert len(out.splitlines()) < 40, out  # short when all is well
    frameworks = out.split("Frameworks")[1].split("\n\n")[0]
    for name in ADAPTERS:  # every framework is reported, once: installed, not installed or adapter not available
        assert len(re.findall(rf"\b{name}\b", frameworks)) == 1, (name, frameworks)
        assert len(re.findall(rf"\b{name}\b", out)) == 1, name
    assert "instrumentor entry point otel_breaker: registered" in out
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in out  # nothing set: nothing listed
    # nothing asked for: nothing exported (and doctor says so, not a default endpoint)
    for signal in ("traces", "metrics", "logs"):
        assert f"    {signal}: not exported (nothing asked for" in out
    assert "localhost:4317" not in out
    assert "every tool: none (the default: a slow tool is never a failure" in out
    assert out.rstrip().endswith("No problems found.")
    assert result.stderr == ""


def test_doctor_verbose_lists_every_value_package_and_variable():
    out = run_cli("doctor", "--verbose").stdout
    assert re.search(r"^  OTEL_BREAKER_FAILURE_THRESHOLD\s+5\s+default$", out, re.M)
    assert re.search(r"^  OTEL_BREAKER_STATUS_IN_PROMPT\s+False\s+default$", out, re.M)
    assert re.search(r"^    opentelemetry-sdk\s+\d+\.\d+", out, re.M)
    assert re.search(r"^    OTEL_EXPORTER_OTLP_ENDPOINT\s+\(not set\)$", out, re.M)
    frameworks = out.split("Frameworks")[1].split("\n\n")[0]
    for name in ADAPTERS:
        assert re.search(rf"^  {name}\s+(.+)$", frameworks, re.M), name
    assert run_cli("doctor", "--all").stdout.count("OTEL_BREAKER_FAILURE_THRESHOLD") == 1


def test_doctor_shows_each_frameworks_tested_range_from_its_adapter():
    """The one source of a tested range (an adapter's requirement) is what doctor prints."""
    from packaging.specifiers import SpecifierSet

    from otel_breaker.instrumentation.instrumentor import requirements
    from otel_breaker.instrumentation.spec import split_requirement

    out = run_cli("doctor", "--verbose").stdout.split("Frameworks")[1]
    for name, requirement in requirements().items():
        distribution, specifier = split_requirement(requirement)
        line = re.search(rf"^  {name}\s+(.+)$", out, re.M).group(1)
        shown = re.search(r"tested ([^);\s]+)", line)
        assert distribution in line and shown, line
        assert SpecifierSet(shown.group(1)) == SpecifierSet(specifier), (name, line)


def test_doctor_names_the_source_of_each_value():
    env = clean_env(
        OTEL_BREAKER_FAILURE_THRESHOLD="3",
        OTEL_BREAKER_FALLBACKS="web_search=backup_search",
        OTEL_BREAKER_STATUS_IN_PROMPT="true",
        OTEL_EXPORTER_OTLP_ENDPOINT="http://collector:4318",
        OTEL_EXPORTER_OTLP_HEADERS="authorization=Bearer secret-token",
    )
    out = run_cli("doctor", env=env).stdout
    assert re.search(r"^  OTEL_BREAKER_FAILURE_THRESHOLD\s+3\s+env$", out, re.M)
    assert "OTEL_BREAKER_RECOVERY_TIMEOUT" not in out  # a default: only with --verbose
    verbose = run_cli("doctor", "--verbose", env=env).stdout
    assert re.search(r"^  OTEL_BREAKER_RECOVERY_TIMEOUT\s+60\.0\s+default$", verbose, re.M)
    assert re.search(r"^  OTEL_BREAKER_FALLBACKS\s+\{'web_search': \('backup_search',\)\}\s+env$", out, re.M)
    assert re.search(r"^  OTEL_BREAKER_STATUS_IN_PROMPT\s+True\s+env$", out, re.M)
    # the protocol comes from OTEL_EXPORTER_OTLP_PROTOCOL (gRPC when unset), never from the port
    assert "traces: OTLP grpc to http://collector:4318 (OTEL_EXPORTER_OTLP_ENDPOINT is set)" in out
    assert "set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf if that is meant" in out
    assert "secret-token" not in out
    assert re.search(r"^    OTEL_EXPORTER_OTLP_HEADERS\s+\*\*\*$", out, re.M)


def test_doctor_reports_every_problem_and_exits_1():
    env = clean_env(
        OTEL_BREAKER_FAILURE_THRESHOLD="zero",
        OTEL_BREAKER_FALLBACKS="web_search",
        OTEL_BREAKER_FAILURE_TRESHOLD="3",
        OTEL_TRACES_EXPORTER="nosuchexporter",
    )
    result = run_cli("doctor", env=env)
    assert result.returncode == 1
    out = result.stdout
    assert "PROBLEM: OTEL_BREAKER_FAILURE_THRESHOLD='zero': expected a whole number >= 1" in out
    assert "PROBLEM: OTEL_BREAKER_FALLBACKS='web_search'" in out
    assert "OTEL_BREAKER_FAILURE_TRESHOLD is not an otel-breaker setting (misspelt?)" in out
    assert "traces not exported: OTEL_TRACES_EXPORTER=nosuchexporter names no installed exporter" in out
    assert "4 problem(s) found:" in out
    # each problem once, with its fix
    assert out.count("OTEL_BREAKER_FAILURE_THRESHOLD='zero'") == 1
    assert out.count("OTEL_BREAKER_FAILURE_TRESHOLD") == 1
    assert out.count("PROBLEM:") == 4 and out.count("    fix: ") == 4
    assert "fix: rename it to OTEL_BREAKER_FAILURE_THRESHOLD" in out
    # the lenient loader's warnings are not repeated on stderr: each problem is in the report
    assert result.stderr == ""


def test_doctor_suggests_the_variable_a_misspelt_one_means():
    result = run_cli("doctor", env=clean_env(OTEL_BREAKER_RECOVERY_TIMOUT="30"))
    assert result.returncode == 1
    assert "did you mean OTEL_BREAKER_RECOVERY_TIMEOUT?" in result.stdout
    assert "    fix: rename it to OTEL_BREAKER_RECOVERY_TIMEOUT" in result.stdout
    assert result.stdout.count("OTEL_BREAKER_RECOVERY_TIMOUT") == 1


def test_doctor_flags_a_requested_framework_that_cannot_be_enabled():
    from otel_breaker.instrumentation import load_adapter_class

    missing = None
    for name in ADAPTERS:
        try:
            adapter = load_adapter_class(name)()
        except ImportError:
            missing = (name, "its adapter is not available")
            break
        if adapter.installed_version() is None:
            missing = (name, f"{adapter.distribution} is not installed")
            break
    if missing is None:
        pytest.skip("every framework is installed here: nothing to flag")
    name, why = missing
    result = run_cli("doctor", env=clean_env(OTEL_BREAKER_FRAMEWORKS=name))
    assert result.returncode == 1
    assert f"OTEL_BREAKER_FRAMEWORKS selects: {name}" in result.stdout
    assert f"OTEL_BREAKER_FRAMEWORKS asks for {name}, but {why}" in result.stdout


def test_doctor_takes_no_other_arguments():
    result = run_cli("doctor", "--frobnicate")
    assert result.returncode == 2
    assert "unrecognized arguments: --frobnicate" in result.stderr


def test_doctor_shows_the_start_up_hook_waiting_for_a_framework():
    result = run_cli("doctor", env=clean_env(OTEL_BREAKER_ENABLED="true"))
    assert re.search(r"^  OTEL_BREAKER_ENABLED\s+True\s+env$", result.stdout, re.M)
    assert "start-up hook active in this process: waiting for the first import" in result.stdout


def test_doctor_shows_what_the_start_up_hook_did_in_its_own_process():
    from pathlib import Path

    fake = Path(__file__).parents[1] / "instrumentation" / "fake_framework"
    env = clean_env(OTEL_BREAKER_ENABLED="true", PYTHONPATH=str(fake))
    result = run_cli_with_import("langchain_core", env=env)
    out = result.stdout
    section = out.split("instrumented at start-up in this process:")[1].split("\n\n")[0]
    lines = [line for line in section.splitlines() if line.strip()]
    reported = {line.split()[0] for line in lines}
    assert reported <= set(ADAPTERS) and reported
    for line in lines:
        assert re.match(r"^    \w+\s+(active|skipped|waiting)", line), line


def run_cli_with_import(module: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``doctor`` in a process that imported ``module`` first (as an agent would)."""
    program = f"import sys, {module}; from otel_breaker.cli import main; sys.exit(main(['doctor']))"
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"OTEL_BREAKER_FRAMEWORKS": "langchain,langchian"}, "OTEL_BREAKER_FRAMEWORKS='langchain,langchian': unknown"),
        ({"OTEL_BREAKER_TIMEOUT": "soon"}, "OTEL_BREAKER_TIMEOUT='soon'"),
        ({"OTEL_BREAKER_SCOPE": "galaxy"}, "OTEL_BREAKER_SCOPE='galaxy'"),
        ({"OTEL_BREAKER_STORE": "redsi"}, "OTEL_BREAKER_STORE='redsi'"),
        ({"OTEL_BREAKER_TOOLS": "a=fast_api;b=warp"}, "OTEL_BREAKER_TOOLS='a=fast_api;b=warp'"),
        ({"OTEL_BREAKER_ENABLED": "maybe"}, "OTEL_BREAKER_ENABLED='maybe'"),
        ({"OTEL_BREAKER_TIMOUT": "30"}, "OTEL_BREAKER_TIMOUT is not an otel-breaker setting"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "http/json"),
    ],
    ids=lambda value: next(iter(value)) if isinstance(value, dict) else None,
)
def test_every_value_doctor_calls_wrong_makes_it_exit_1(env, expected):
    result = run_cli("doctor", env=clean_env(**env))
    assert result.returncode == 1, result.stdout
    assert any(expected in line and "PROBLEM:" in line for line in result.stdout.splitlines()), result.stdout


def test_doctor_says_whether_a_timeout_applies_and_to_which_tools():
    env = clean_env(OTEL_BREAKER_TIMEOUT="45", OTEL_BREAKER_TOOLS="compile=timeout=none;scrape=slow_tool,timeout=90")
    out = run_cli("doctor", env=env).stdout
    assert "every tool: 45s (env): a sync call that returns later counts as a failure" in out
    assert "  compile: none (OTEL_BREAKER_TOOLS)" in out
    assert "  scrape: 90s (OTEL_BREAKER_TOOLS)" in out


def test_doctor_describes_one_signal_asked_for_and_nothing_else():
    out = run_cli("doctor", env=clean_env(OTEL_TRACES_EXPORTER="console")).stdout
    assert "    traces: console (OTEL_TRACES_EXPORTER=console)" in out
    assert "    metrics: not exported (nothing asked for" in out
    assert "    logs: not exported (nothing asked for" in out
    out = run_cli(
        "doctor",
        env=clean_env(
            OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4318",
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_METRICS_EXPORTER="none",
        ),
    ).stdout
    assert "    traces: OTLP http/protobuf to http://c:4318/v1/traces (OTEL_EXPORTER_OTLP_ENDPOINT is set)" in out
    assert "    metrics: not exported (OTEL_METRICS_EXPORTER=none)" in out
    assert "    logs: OTLP http/protobuf to http://c:4318/v1/logs" in out


def _installed_distribution(root, name: str, version: str) -> dict[str, str]:
    """An environment in which ``name`` ``version`` is installed (its metadata, as pip leaves it)."""
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text("")
    return clean_env(PYTHONPATH=str(root))


def test_doctor_exits_1_for_a_requested_framework_outside_its_supported_range(tmp_path):
    from otel_breaker.instrumentation import load_adapter_class

    adapter = load_adapter_class("langchain")()
    if adapter.installed_version() is not None:
        pytest.skip(f"{adapter.distribution} is installed here; the check needs an untested version of it")
    env = _installed_distribution(tmp_path, adapter.distribution, "0.3.1")
    env["OTEL_BREAKER_FRAMEWORKS"] = "langchain"
    result = run_cli("doctor", env=env)
    assert result.returncode == 1, result.stdout
    assert (
        f"OTEL_BREAKER_FRAMEWORKS asks for langchain, but {adapter.distribution} 0.3.1 is outside the supported "
        f"range {adapter.version_range}" in result.stdout
    )
    assert "No problems found" not in result.stdout
    # auto-detected, the same version is skipped (reported), not an error
    del env["OTEL_BREAKER_FRAMEWORKS"]
    auto = run_cli("doctor", env=env)
    assert auto.returncode == 0, auto.stdout
    assert f"{adapter.distribution} 0.3.1: skipped" in auto.stdout


def test_doctor_table_stays_readable_with_long_names():
    """A long variable value or tool name does not push every row of a table off the screen."""
    long_tools = ";".join(f"{'t' * 120}{i}=fast_api" for i in range(3))
    result = run_cli("doctor", env=clean_env(OTEL_BREAKER_TOOLS=long_tools, OTEL_BREAKER_REDIS_PREFIX="p" * 500))
    widest = max(len(line) for line in result.stdout.splitlines())
    assert widest <= 160, [line for line in result.stdout.splitlines() if len(line) > 160][:3]


def test_doctor_reports_each_signal_and_names_a_port_clash():
    env = clean_env(
        OTEL_TRACES_EXPORTER="console",
        OTEL_METRICS_EXPORTER="prometheus",
        OTEL_EXPORTER_PROMETHEUS_PORT="9470",
        OTEL_BREAKER_STATUS_ADDR="127.0.0.1:9470",
        OTEL_LOGS_EXPORTER="zipkin_json",
    )
    result = run_cli("doctor", env=env)
    assert result.returncode == 1
    out = result.stdout
    assert "    traces: console (OTEL_TRACES_EXPORTER=console)" in out
    assert "    metrics not exported: the Prometheus exporter's port 9470 is also OTEL_BREAKER_STATUS_ADDR=" in out
    assert "    logs not exported: OTEL_LOGS_EXPORTER=zipkin_json" in out
    assert "pip install opentelemetry-exporter-zipkin" in out
    assert "without opentelemetry-distro" in out


# -- OTLP endpoints: does the configured one answer, in the protocol it will be sent? -------------


class _OtlpHttpReceiver(http.server.BaseHTTPRequestHandler):
    """Answers as an OTLP/HTTP receiver (the collector on 4318) does: POST /v1/<signal> is 200 with
    an empty protobuf response; anything else is 404."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        known = self.path in ("/v1/traces", "/v1/metrics", "/v1/logs")
        self.send_response(200 if known else 404)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reads doctor's output, not the server's."""


@pytest.fixture
def otlp_http_receiver():
    """A real HTTP server on a free loopback port answering like an OTLP/HTTP receiver; yields its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _OtlpHttpReceiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _problems(out: str) -> list[str]:
    return [line for line in out.splitlines() if "PROBLEM:" in line]


def test_doctor_flags_grpc_sent_to_an_otlp_http_receiver(otlp_http_receiver):
    """The trap of a recipe without a protocol: gRPC (the default) to a port that answers HTTP."""
    result = run_cli("doctor", env=clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=otlp_http_receiver))
    assert result.returncode == 1, result.stdout
    (problem,) = _problems(result.stdout)
    assert (
        f"traces, metrics and logs use gRPC (OTEL_EXPORTER_OTLP_PROTOCOL is not http/protobuf) to {otlp_http_receiver}"
        in problem
    )
    assert "answers HTTP/1.1" in problem
    assert "    fix: set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf" in result.stdout
    assert "No problems found" not in result.stdout
    # the same receiver, the protocol stated: it answers, nothing to fix
    fixed = run_cli(
        "doctor",
        env=clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=otlp_http_receiver, OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf"),
    )
    assert fixed.returncode == 0, fixed.stdout
    assert f"    {otlp_http_receiver}: answers (HTTP/1.1)" in fixed.stdout
    assert fixed.stdout.rstrip().endswith("No problems found.")


def test_doctor_flags_otlp_http_sent_to_a_grpc_receiver():
    grpc = pytest.importorskip("grpc", reason="grpcio comes with the OTLP/gRPC exporter")
    from concurrent.futures import ThreadPoolExecutor

    server = grpc.server(ThreadPoolExecutor(max_workers=1))  # a real HTTP/2 gRPC server, as on 4317
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        env = clean_env(
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}", OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf"
        )
        result = run_cli("doctor", env=env)
        assert result.returncode == 1, result.stdout
        (problem,) = _problems(result.stdout)
        assert "does not answer HTTP/1.1" in problem
        assert "    fix: set OTEL_EXPORTER_OTLP_PROTOCOL=grpc" in result.stdout
        # gRPC to it: it answers, as a gRPC receiver does
        ok = run_cli("doctor", env=clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}"))
        assert ok.returncode == 0, ok.stdout
        assert "answers (not HTTP/1.1, as a gRPC receiver)" in ok.stdout
    finally:
        server.stop(grace=None)


def test_doctor_says_plainly_that_nothing_answers_at_a_dead_endpoint():
    with socket.socket() as sock:  # a port nothing listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        started = time.monotonic()
        result = run_cli("doctor", env=clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}"))
        took = time.monotonic() - started
    assert result.returncode == 1, result.stdout
    (problem,) = _problems(result.stdout)
    assert f"nothing answers at http://127.0.0.1:{port}" in problem
    assert f"    http://127.0.0.1:{port}: nothing answers (" in result.stdout
    assert "fix: start the collector, or correct OTEL_EXPORTER_OTLP_ENDPOINT" in result.stdout
    assert took < 30  # bounded: a refused connection is immediate, a silent one waits at most seconds
