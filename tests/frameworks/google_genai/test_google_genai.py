"""What is specific to google-genai: automatic function calling in ``generate_content``
(and its stream), chats and the async client, sync and async functions, the Vertex AI
client, the SDK's own answers to the model's mistakes, and the version check.

Every request is made with a new client against the local fake of the Gemini API
(fake_gemini.py), and what the model was sent is read back from the fake.
"""

from __future__ import annotations

import asyncio
import errno
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.genai")
sys.path.insert(0, str(Path(__file__).parent))

from contract import Tool, call
from driver import client, config, function, server
from fake_gemini import declarations, function_responses, instructions_of
from google.genai import types
from status_prompt import COOLDOWN, breaker_settings, quick_breaker_settings
from zero_code import script_env

from otel_breaker import State
from otel_breaker.degrade import STATUS_HEADER
from otel_breaker.instrumentation.google_genai import GoogleGenAIAdapter
from otel_breaker.registry import default_registry

UNAVAILABLE = "is temporarily unavailable"
#: The dead-function scenario: separate requests, each with a new client, and calls per request.
REQUESTS = 3
CALLS_PER_REQUEST = 3
#: The tool functions the driver builds live here: their code origin.
ORIGIN = "driver:function.<locals>.body"


def generate(functions: list[Any], steps: list[Any], *, vertexai: bool = False, **options: Any):
    """One request, with a new client: the final text and the request bodies the model received."""
    model, genai_client = server().script(steps), client(vertexai=vertexai)  # held: the SDK closes a dropped client
    response = genai_client.models.generate_content(model=model, contents="go", config=config(functions, **options))
    return (response.text or "").strip(), server().requests(model)


def answers(bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The function responses the model read in the last request (``{"result": ...}`` or ``{"error": ...}``)."""
    return [response["response"] for response in function_responses(bodies[-1])]


def rejected(response: dict[str, Any]) -> bool:
    """A rejection in the SDK's own shape for a failed function: ``{"error": text}``, nothing else."""
    return set(response) == {"error"} and UNAVAILABLE in response["error"]


def only_breaker(tool: str):
    (breaker,) = default_registry().find(tool)
    return breaker


def dead_function_runs(vertexai: bool = False) -> tuple[int, list[list[dict[str, Any]]]]:
    """A dead function over REQUESTS requests of CALLS_PER_REQUEST calls, each with a new
    client: how often its body ran, and what the model read in each request."""
    tool = Tool.failing("weather")
    read = []
    for request in range(REQUESTS):
        steps = [call("weather", request * CALLS_PER_REQUEST + i) for i in range(CALLS_PER_REQUEST)] + ["done"]
        final, bodies = generate([function(tool)], steps, vertexai=vertexai)
        assert final == "done"
        read.append(answers(bodies))
    return tool.runs, read


@pytest.mark.parametrize("vertexai", [False, True], ids=["gemini-api", "vertex-ai"])
def test_a_dead_function_runs_twice_over_three_requests_with_a_new_client_each(instrument, vertexai):
    breaker_settings(failure_threshold="2")
    runs, read = dead_function_runs(vertexai)
    assert runs == REQUESTS * CALLS_PER_REQUEST  # without otel-breaker: every call, 9
    assert not any(rejected(r) for request in read for r in request)
    instrument("google_genai")
    runs, read = dead_function_runs(vertexai)
    assert runs == 2
    assert [rejected(r) for r in read[0]] == [False, False, True]
    assert all(rejected(r) for request in read[1:] for r in request)
    assert "Tool 'weather'" in read[-1][-1]["error"]
    breaker = only_breaker("weather")  # one breaker for every request's client
    assert (breaker.agent_name, breaker.origin, breaker.state) == (None, ORIGIN, State.OPEN)


def test_the_vertex_ai_client_takes_its_own_transport():
    model, vertex_client, gemini_client = server().script(["done", "done"]), client(vertexai=True), client()
    vertex_client.models.generate_content(model=model, contents="go", config=config([]))
    gemini_client.models.generate_content(model=model, contents="go", config=config([]))
    vertex, gemini = server().paths(model)
    assert vertex.startswith("/v1beta1/publishers/google/models/scripted-")
    assert gemini.startswith("/v1/models/scripted-") or gemini.startswith("/v1beta/models/scripted-")


def _healthy_run() -> tuple[str, list[dict[str, Any]], int]:
    echo, lookup = Tool.healthy("echo"), Tool.healthy("lookup")
    steps = [call("echo", 1), [call("lookup", 2), call("echo", 3)], call("lookup", 4), "done"]
    final, bodies = generate([function(echo), function(lookup)], steps)
    return final, bodies, echo.runs + lookup.runs


@pytest.mark.parametrize("switches", [{}, {"status_in_prompt": "true", "hide_open_tools": "true"}])
def test_a_healthy_function_is_unchanged(instrument, switches):
    breaker_settings(**switches)
    baseline = _healthy_run()
    assert baseline[0] == "done" and baseline[2] == 4 and len(baseline[1]) == 4
    instrument("google_genai")
    assert _healthy_run() == baseline  # every request body the model received, and the answer


def _wrong_paths() -> tuple[str, list[dict[str, Any]], int]:
    runs = []

    def read_file(path: str) -> str:
        """Reads a file."""
        runs.append(path)
        if path != "/notes.txt":
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        return "the notes"

    steps = [("read_file", {"path": f"/wrong/{i}.txt"}) for i in range(6)] + [("read_file", {"path": "/notes.txt"})]
    final, bodies = generate([read_file], [*steps, "done"])
    return final, bodies, len(runs)


def test_the_model_s_wrong_paths_stay_neutral(instrument):
    breaker_settings(failure_threshold="2")
    baseline = _wrong_paths()
    assert baseline[2] == 7 and answers(baseline[1])[-1] == {"result": "the notes"}
    instrument("google_genai")
    assert _wrong_paths() == baseline  # six FileNotFoundError, then the valid call answers as without us
    stats = only_breaker("read_file").stats
    assert only_breaker("read_file").state is State.CLOSED
    assert (stats.failure_count, stats.rejected_requests, stats.success_count) == (0, 0, 1)


def _mistakes() -> tuple[list[dict[str, Any]], int]:
    echo = Tool.healthy("echo")
    steps = [("echo", {"x": "not a number"}), ("echo", {"y": 1}), ("echo", {"x": 2, "y": 3}), "done"]
    final, bodies = generate([function(echo)], steps)
    assert final == "done"
    return answers(bodies), echo.runs


def test_arguments_of_the_wrong_shape_reach_the_model_as_the_sdk_sends_them(instrument):
    breaker_settings(failure_threshold="1")
    baseline = _mistakes()
    refused_type, missing, extra = baseline[0]
    assert "not compatible with parameter annotation" in refused_type["error"]
    assert "missing 1 required positional argument" in missing["error"]
    assert extra == {"result": "echo ok 2"} and baseline[1] == 1  # the SDK drops a name the function lacks
    instrument("google_genai")
    assert _mistakes() == baseline
    assert all(b.stats.failure_count == 0 for b in default_registry().find("echo"))


def _unknown_name() -> str:
    model, genai_client = server().script([("no_such_function", {"x": 1}), "done"]), client()
    with pytest.raises(KeyError) as raised:
        genai_client.models.generate_content(
            model=model, contents="go", config=config([function(Tool.healthy("echo"))])
        )
    assert len(server().requests(model)) == 1
    return repr(raised.value)


def test_a_name_no_function_has_ends_the_request_as_without_us(instrument):
    # The SDK looks the name up in its function map and raises KeyError out of the request.
    baseline = _unknown_name()
    instrument("google_genai")
    assert _unknown_name() == baseline
    assert default_registry().find("no_such_function") == []


def test_one_execute_tool_span_per_call_with_our_attributes(instrument, otel):
    breaker_settings(failure_threshold="2")
    instrument("google_genai")
    weather, echo = Tool.failing("weather"), Tool.healthy("echo")
    steps = [call("weather", 1), call("weather", 2), [call("weather", 3), call("echo", 4)], "done"]
    assert generate([function(weather), function(echo)], steps)[0] == "done"
    spans = otel.tool_spans("weather")
    assert [s.name for s in spans] == ["execute_tool weather"] * 3
    assert [s.attributes["otel_breaker.rejected"] for s in spans] == [False, False, True]
    assert [s.attributes.get("error.type") for s in spans] == ["FunctionInvocationError"] * 2 + ["circuit_open"]
    assert [s.attributes["otel_breaker.state"] for s in spans] == ["closed", "closed", "open"]
    for span in [*spans, *otel.tool_spans("echo")]:
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert span.attributes["otel_breaker.framework"] == "google_genai"
        assert span.attributes["otel_breaker.tool.origin"] == ORIGIN
        assert "gen_ai.agent.name" not in span.attributes  # no agent
    (ok,) = otel.tool_spans("echo")
    assert "error.type" not in ok.attributes and not ok.attributes["otel_breaker.rejected"]
    assert len([s for s in otel.finished_spans() if s.name.startswith("execute_tool")]) == 4


@pytest.mark.parametrize("coroutine", [True, False], ids=["async-function", "sync-function"])
def test_the_async_client_guards_async_and_sync_functions(instrument, coroutine):
    # Coroutine functions run through invoke_function_from_dict_args_async, sync ones in a thread.
    breaker_settings(failure_threshold="2")
    instrument("google_genai")
    runs = []

    if coroutine:

        async def fetch(x: int) -> str:
            """Fetches."""
            runs.append(x)
            raise ConnectionError("upstream down")

    else:

        def fetch(x: int) -> str:
            """Fetches."""
            runs.append(x)
            raise ConnectionError("upstream down")

    async def requests() -> list[dict[str, Any]]:
        read = []
        for request in range(REQUESTS):
            model, genai_client = (
                server().script([call("fetch", request * 2 + i) for i in range(2)] + ["done"]),
                client(),
            )
            response = await genai_client.aio.models.generate_content(
                model=model, contents="go", config=config([fetch])
            )
            assert (response.text or "").strip() == "done"
            read.extend(answers(server().requests(model)))
        return read

    read = asyncio.run(requests())
    assert len(runs) == 2
    assert [rejected(r) for r in read] == [False, False, True, True, True, True]
    assert "upstream down" in read[0]["error"]
    assert only_breaker("fetch").stats.failure_count == 2


def test_a_chat_keeps_the_breaker_across_its_turns(instrument):
    breaker_settings(failure_threshold="2")
    instrument("google_genai")
    tool = Tool.failing("weather")
    model = server().script([call("weather", 1), call("weather", 2), "first", call("weather", 3), "second"])
    genai_client = client()
    chat = genai_client.chats.create(model=model, config=config([function(tool)]))
    assert chat.send_message("one").text == "first"
    assert chat.send_message("two").text == "second"
    assert tool.runs == 2
    assert [rejected(r) for r in answers(server().requests(model))] == [False, False, True]
    # The chat's history keeps the rejection as the model read it.
    history = [p.function_response.response for c in chat.get_history() for p in c.parts if p.function_response]
    assert rejected(history[-1])


def test_an_async_chat_gets_the_status_block_and_loses_the_open_function(instrument, registry_clock):
    # A system instruction given as parts: the block is its own text part after them.
    quick_breaker_settings(status_in_prompt="true", hide_open_tools="true")
    instrument("google_genai")
    flaky, echo = Tool.flaky("flaky", failures=2), Tool.healthy("echo")
    steps = [call("flaky", 1), call("flaky", 2), call("flaky", 3), call("echo", 4), "first", call("flaky", 5), "second"]
    model = server().script(steps)
    instruction = types.Content(parts=[types.Part(text="Be brief.")])
    chat_config = config([function(flaky), function(echo)], instructions=instruction)

    async def converse() -> list[str]:
        genai_client = client()
        chat = genai_client.aio.chats.create(model=model, config=chat_config)
        first = await chat.send_message("one")
        registry_clock.advance(COOLDOWN * 2)  # past the cooldown: half-open, back for the probe
        second = await chat.send_message("two")
        return [first.text, second.text]

    assert asyncio.run(converse()) == ["first", "second"]
    bodies = server().requests(model)
    prompts = [instructions_of(body) or "" for body in bodies]
    menus = [set(declarations(body)) for body in bodies]
    assert prompts[:2] == ["Be brief."] * 2 and prompts[-1] == "Be brief."
    for text in prompts[2:5]:
        assert text.startswith(f"Be brief.\n\n{STATUS_HEADER}") and text.count(STATUS_HEADER) == 1
    assert "'flaky' (open)" in prompts[2] and "'flaky' (half-open)" in prompts[5]
    assert menus == [{"flaky", "echo"}] * 2 + [{"echo"}] * 3 + [{"flaky", "echo"}] * 2
    # Called anyway while hidden: the usual rejection; the probe later ran and closed the breaker.
    assert [rejected(r) for r in answers(bodies)] == [False, False, True, False, False]
    assert flaky.runs == 3 and only_breaker("flaky").state is State.CLOSED


def test_a_forced_function_stays_on_the_menu(instrument):
    quick_breaker_settings(hide_open_tools="true", recovery_timeout="600")
    instrument("google_genai")
    weather, echo = Tool.failing("weather"), Tool.healthy("echo")
    forced = types.ToolConfig(
        function_calling_config=types.FunctionCallingConfig(mode="ANY", allowed_function_names=["weather"])
    )
    steps = [call("weather", 1), call("weather", 2), call("echo", 3), "done"]
    _, bodies = generate([function(weather), function(echo)], steps, tool_config=forced)
    assert [set(declarations(body)) for body in bodies] == [{"weather", "echo"}] * 4


def test_a_streamed_request_is_guarded(instrument):
    breaker_settings(failure_threshold="2")
    instrument("google_genai")
    tool, genai_client = Tool.failing("weather"), client()
    model = server().script([call("weather", i) for i in range(3)] + ["done"])
    stream = genai_client.models.generate_content_stream(model=model, contents="go", config=config([function(tool)]))
    assert [chunk.text for chunk in stream][-1] == "done"
    assert tool.runs == 2
    assert [rejected(r) for r in answers(server().requests(model))] == [False, False, True]


def test_identical_invalid_calls_start_clean_in_a_new_request(instrument):
    # The loop guard's run is one request: a new conversation has never seen the error.
    instrument("google_genai")
    echo = Tool.healthy("echo")
    steps = [("echo", {"x": "not a number"})] * 5 + ["done"]
    first = answers(generate([function(echo)], steps)[1])
    second = answers(generate([function(echo)], steps)[1])
    assert first == second
    assert [("3 times" in r["error"]) for r in first] == [False, False, False, True, True]


def test_an_untested_version_is_reported_and_left_unpatched(tmp_path):
    """google-genai outside the tested range: ``doctor`` reports it, the switch patches nothing."""
    info = tmp_path / "google_genai-2.9.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: google-genai\nVersion: 2.9.0\n")
    (info / "RECORD").write_text("")
    env = script_env(PYTHONPATH=str(tmp_path), PYTHONUNBUFFERED="1")
    doctor = [sys.executable, "-m", "otel_breaker", "doctor"]
    asked = subprocess.run(
        doctor, env={**env, "OTEL_BREAKER_FRAMEWORKS": "google_genai"}, capture_output=True, text=True, timeout=120
    )
    assert asked.returncode == 1, asked.stdout
    assert f"google-genai 2.9.0 is outside the supported range {GoogleGenAIAdapter.version_range}" in asked.stdout
    auto = subprocess.run(doctor, env=env, capture_output=True, text=True, timeout=120)
    assert auto.returncode == 0 and "google-genai 2.9.0: skipped" in auto.stdout, auto.stdout
    program = (
        "from google.genai import _extra_utils, models; "
        "print(hasattr(_extra_utils.invoke_function_from_dict_args, '__wrapped__'), "
        "hasattr(models.Models._generate_content, '__wrapped__'))"
    )
    switched_on = {**env, "OTEL_BREAKER_ENABLED": "true"}
    done = subprocess.run([sys.executable, "-c", program], env=switched_on, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]
    assert "outside the tested range" in done.stderr
    # In range, the same program finds both patched.
    in_range = subprocess.run(
        [sys.executable, "-c", program],
        env=script_env(OTEL_BREAKER_ENABLED="true"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert in_range.stdout.split() == ["True", "True"], in_range.stderr


def test_an_agent_scope_names_the_agent_whose_breaker_it_is(instrument, otel):
    """google-genai has no agent object: ``agent_scope`` names one, so two services' agents
    calling the same dead function keep breakers of their own."""
    from otel_breaker import agent_scope

    breaker_settings(failure_threshold="2")
    instrument("google_genai")
    tool = Tool.failing("weather")
    with agent_scope("support"):
        for request in range(2):
            generate([function(tool)], [call("weather", request), "done"])
    with agent_scope("billing"):
        final, bodies = generate([function(tool)], [call("weather", 9), "done"])
    assert final == "done" and not rejected(answers(bodies)[0])
    assert tool.runs == 3  # the support agent's breaker opened; billing's is its own
    states = {b.agent_name: b.state for b in default_registry().find("weather")}
    assert states == {"support": State.OPEN, "billing": State.CLOSED}
    names = {span.attributes.get("gen_ai.agent.name") for span in otel.tool_spans("weather")}
    assert names == {"support", "billing"}


#: What the model reads once a run spent its waste budget on a function.
SPENT = "unavailable for the rest of this run"


def _open_weather() -> Tool:
    """``weather`` fails once in an earlier request: its breaker opens (threshold 1, a long cooldown)."""
    breaker_settings(failure_threshold="1", recovery_timeout="600")
    tool = Tool.failing("weather")
    assert generate([function(tool)], [call("weather", 0), "done"])[0] == "done"
    assert tool.runs == 1
    return tool


@pytest.mark.parametrize("streamed", ["sync", "async"])
def test_a_streamed_request_is_one_run_of_the_waste_budget(instrument, streamed):
    """``generate_content_stream``, sync and async: the request's 4th call of the open function
    reads that the run spent its budget, and the function leaves the requests that follow;
    the next streamed request starts whole."""
    instrument("google_genai")
    tool = _open_weather()
    echo = Tool.healthy("echo")

    async def consume_async(genai_client: Any, model: str) -> list[str]:
        functions = config([function(tool), function(echo)])
        stream = await genai_client.aio.models.generate_content_stream(model=model, contents="go", config=functions)
        return [chunk.text async for chunk in stream]

    for _ in range(2):
        model, genai_client = server().script([*(call("weather", i) for i in range(1, 7)), "done"]), client()
        if streamed == "sync":
            functions = config([function(tool), function(echo)])
            texts = [
                c.text
                for c in genai_client.models.generate_content_stream(model=model, contents="go", config=functions)
            ]
        else:
            texts = asyncio.run(consume_async(genai_client, model))
        assert texts[-1] == "done"
        bodies = server().requests(model)
        read = [r["error"] for r in answers(bodies)]
        assert tool.runs == 1
        assert len(read) == 6
        assert all(UNAVAILABLE in r for r in read[:3]), read
        assert all(SPENT in r for r in read[3:]), read
        assert [set(declarations(body)) for body in bodies] == [{"weather", "echo"}] * 4 + [{"echo"}] * 3


def test_a_chat_is_one_run_of_the_waste_budget(instrument):
    """A chat's messages are one run: its 4th call of the open function, in the second
    message, reads that the run spent its budget; a new chat starts whole."""
    instrument("google_genai")
    tool = _open_weather()
    for _ in range(2):
        steps = [call("weather", 1), call("weather", 2), "first", call("weather", 3), call("weather", 4), "second"]
        model = server().script(steps)
        genai_client = client()
        chat = genai_client.chats.create(model=model, config=config([function(tool)]))
        assert chat.send_message("one").text == "first"
        assert chat.send_message("two").text == "second"
        read = [r["error"] for r in answers(server().requests(model))]
        assert tool.runs == 1
        assert len(read) == 4
        assert all(UNAVAILABLE in r for r in read[:3]), read
        assert SPENT in read[3], read
