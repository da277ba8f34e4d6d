"""smolagents: real ToolCallingAgent and CodeAgent loops driven by a scripted model.

The model asks for a tool several times and then gives the final answer. A
failing tool opens its breaker at the threshold; later calls must not run the
tool body, the model must read the rejection text, and the loop must end
normally. A healthy tool must behave exactly as without instrumentation.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
from smolagents import CodeAgent, ToolCallingAgent, tool
from smolagents.agents import ActionStep
from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole, Model
from smolagents.monitoring import LogLevel
from smolagents.tools import Tool

from otel_breaker import State
from otel_breaker.config import load_settings, set_settings
from otel_breaker.guards import Guard
from otel_breaker.instrumentation.smolagents import SmolagentsAdapter
from otel_breaker.registry import BreakerRegistry, default_registry

REJECTION = "is temporarily unavailable"
BODY_RUNS: dict[str, int] = {}


@pytest.fixture(autouse=True)
def _reset_counts():
    BODY_RUNS.clear()
    yield


def _threshold(n: int = 2) -> None:
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": str(n)}))


@tool
def flaky(q: str) -> str:
    """A tool whose backend is down.

    Args:
        q: query
    """
    BODY_RUNS["flaky"] = BODY_RUNS.get("flaky", 0) + 1
    raise RuntimeError("backend down")


@tool
def healthy(q: str) -> str:
    """A tool that works.

    Args:
        q: query
    """
    BODY_RUNS["healthy"] = BODY_RUNS.get("healthy", 0) + 1
    return f"ok:{q}"


BACKEND_UP = [True]


@tool
def backend(q: str) -> str:
    """A tool whose backend goes down and comes back.

    Args:
        q: query
    """
    BODY_RUNS["backend"] = BODY_RUNS.get("backend", 0) + 1
    if not BACKEND_UP[0]:
        raise ConnectionError("backend down")
    return f"ok:{q}"


def _text(message) -> str:
    content = message.content
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


class ScriptedToolCallingModel(Model):
    """Asks for ``tool_name`` ``n`` times (``parallel`` calls per message), then answers "done"."""

    def __init__(self, tool_name: str, n: int = 4, parallel: int = 1):
        super().__init__(model_id="scripted-tool-calling")
        self.tool_name, self.n, self.parallel = tool_name, n, parallel
        self.step = 0
        self.seen: list[str] = []

    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kwargs):
        if self.step > 0:
            self.seen.append(_text(messages[-1]))
        self.step += 1
        if self.step <= self.n:
            calls = [
                ChatMessageToolCall(
                    id=f"call_{self.step}" + (f"_{i}" if self.parallel > 1 else ""),
                    type="function",
                    function=ChatMessageToolCallFunction(name=self.tool_name, arguments={"q": f"x{self.step}_{i}"}),
                )
                for i in range(self.parallel)
            ]
        else:
            calls = [
                ChatMessageToolCall(
                    id="call_final",
                    type="function",
                    function=ChatMessageToolCallFunction(name="final_answer", arguments={"answer": "done"}),
                )
            ]
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=calls)


class ScriptedCodeModel(Model):
    """Writes code calling ``tool_name`` ``n`` times (one call per step), then ``final_answer("done")``."""

    def __init__(self, tool_name: str, n: int = 4):
        super().__init__(model_id="scripted-code")
        self.tool_name, self.n = tool_name, n
        self.step = 0
        self.seen: list[str] = []

    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kwargs):
        if self.step > 0:
            self.seen.append(_text(messages[-1]))
        self.step += 1
        if self.step <= self.n:
            code = f'Thought: call it\n<code>\nr = {self.tool_name}(q="x{self.step}")\nprint(r)\n</code>'
        else:
            code = 'Thought: finish\n<code>\nfinal_answer("done")\n</code>'
        return ChatMessage(role=MessageRole.ASSISTANT, content=code)


def _agent(kind: str, tool_obj: Tool, name: str | None = None, n: int = 4, parallel: int = 1):
    if kind == "tool_calling":
        model = ScriptedToolCallingModel(tool_obj.name, n, parallel)
        agent = ToolCallingAgent(
            tools=[tool_obj], model=model, max_steps=n + 3, verbosity_level=LogLevel.OFF, name=name
        )
    else:
        model = ScriptedCodeModel(tool_obj.name, n)
        agent = CodeAgent(tools=[tool_obj], model=model, max_steps=n + 3, verbosity_level=LogLevel.OFF, name=name)
    return agent, model


def _observations(agent) -> list[str]:
    return [step.observations for step in agent.memory.steps if isinstance(step, ActionStep) and step.observations]


# -- a failing tool ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tool_calling", "code"])
def test_failing_tool_opens_breaker_and_model_reads_rejection(kind, otel, instrument):
    instrument("smolagents")
    _threshold(2)
    name = f"researcher_{kind}"  # counters are process-lifetime totals: keep this test's series apart
    agent, model = _agent(kind, flaky, name=name)

    result = agent.run("use the tool four times, then say done")

    assert result == "done"  # the loop ended normally
    assert BODY_RUNS == {"flaky": 2}  # calls 3 and 4 did not run the tool
    assert sum("backend down" in s for s in model.seen) == 2
    rejected_texts = [s for s in model.seen if REJECTION in s]
    assert len(rejected_texts) == 2
    assert all("CircuitOpenError" in s for s in rejected_texts)

    spans = otel.tool_spans("flaky")
    assert len(spans) == 4
    assert [s.attributes["otel_breaker.rejected"] for s in spans] == [False, False, True, True]
    assert all(s.attributes["gen_ai.agent.name"] == name for s in spans)
    assert all(s.attributes["otel_breaker.framework"] == "smolagents" for s in spans)
    assert [s.attributes.get("error.type") for s in spans] == ["RuntimeError"] * 2 + ["circuit_open"] * 2
    if kind == "tool_calling":
        assert [s.attributes["gen_ai.tool.call.id"] for s in spans] == ["call_1", "call_2", "call_3", "call_4"]
    else:
        assert all("gen_ai.tool.call.id" not in s.attributes for s in spans)  # code has no call ids

    (breaker,) = default_registry().find("flaky")
    assert breaker.state is State.OPEN
    assert breaker.agent_name == name
    labels = {"gen_ai_tool_name": "flaky", "gen_ai_agent_name": name}
    assert otel.metric_value("otel_breaker.calls", otel_breaker_outcome="failure", **labels) == 2
    assert otel.metric_value("otel_breaker.calls", otel_breaker_outcome="success", **labels) == 0
    assert otel.metric_value("otel_breaker.calls.rejected", **labels) == 2
    assert otel.metric_value("otel_breaker.state", otel_breaker_state="open", **labels) == 1
    assert otel.metric_value("otel_breaker.state", otel_breaker_state="closed", **labels) == 0


def test_streaming_run_is_guarded_and_leaves_no_context_behind(otel, instrument):
    """``run(stream=True)`` hands the step generator to the caller: the agent mark
    must hold while each step runs and be gone between steps."""
    from otel_breaker.instrumentation import smolagents as adapter_module

    instrument("smolagents")
    _threshold(2)
    agent, model = _agent("tool_calling", flaky, name="streamer")

    between_steps = []
    final = None
    for event in agent.run("go", stream=True):
        between_steps.append(adapter_module._caller.get())
        final = event
    assert final.output == "done"
    assert set(between_steps) == {None}
    assert BODY_RUNS == {"flaky": 2}
    assert sum(REJECTION in s for s in model.seen) == 2
    assert [s.attributes["gen_ai.agent.name"] for s in otel.tool_spans("flaky")] == ["streamer"] * 4


def test_parallel_tool_calls_keep_their_own_call_ids(otel, instrument):
    """Several calls in one model message run in worker threads; each span has its own id."""
    instrument("smolagents")
    agent, _ = _agent("tool_calling", healthy, name="parallel", n=2, parallel=3)

    assert agent.run("go") == "done"
    ids = sorted(s.attributes["gen_ai.tool.call.id"] for s in otel.tool_spans("healthy"))
    assert ids == [f"call_{step}_{i}" for step in (1, 2) for i in range(3)]
    assert BODY_RUNS == {"healthy": 6}


def test_code_agent_tool_span_is_child_of_caller_span(otel, instrument):
    """CodeAgent runs the model's code in a worker thread; the caller's context is carried there."""
    instrument("smolagents")
    agent, _ = _agent("code", healthy, name="coder", n=1)
    tracer = otel.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("agent run") as parent:
        assert agent.run("go") == "done"
    (span,) = otel.tool_spans("healthy")
    assert span.parent is not None and span.parent.span_id == parent.get_span_context().span_id
    assert span.attributes["gen_ai.agent.name"] == "coder"


# -- a healthy tool is untouched -------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tool_calling", "code"])
def test_healthy_tool_results_are_identical_with_and_without_instrumentation(kind, otel, instrument):
    plain_agent, plain_model = _agent(kind, healthy, name=f"healthy_{kind}")
    plain_result = plain_agent.run("go")
    plain_observations = _observations(plain_agent)
    plain_seen = list(plain_model.seen)

    instrument("smolagents")
    agent, model = _agent(kind, healthy, name=f"healthy_{kind}")
    result = agent.run("go")

    assert result == plain_result == "done"
    assert _observations(agent) == plain_observations
    assert any("ok:x" in o for o in plain_observations)
    assert model.seen == plain_seen
    assert BODY_RUNS == {"healthy": 8}
    spans = otel.tool_spans("healthy")
    assert len(spans) == 4 and not any(s.attributes["otel_breaker.rejected"] for s in spans)
    labels = {"gen_ai_tool_name": "healthy", "gen_ai_agent_name": f"healthy_{kind}"}
    assert otel.metric_value("otel_breaker.calls", otel_breaker_outcome="success", **labels) == 4
    assert otel.metric_value("otel_breaker.calls", otel_breaker_outcome="failure", **labels) == 0


def test_direct_tool_call_returns_the_same_value(instrument):
    expected = healthy(q="direct")
    instrument("smolagents")
    assert healthy(q="direct") == expected == "ok:direct"
    assert healthy("direct") == expected
    assert default_registry().find("healthy")  # guarded, process scope


def test_final_answer_is_never_guarded(otel, instrument):
    instrument("smolagents")
    agent, _ = _agent("tool_calling", healthy, n=1)
    assert agent.run("go") == "done"
    assert not default_registry().find("final_answer")
    assert not otel.tool_spans("final_answer")


# -- keying, recovery, uninstrument ----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tool_calling", "code"])
def test_each_agent_has_its_own_breaker(kind, otel, instrument):
    instrument("smolagents")
    _threshold(2)
    first, _first_model = _agent(kind, flaky, name="first")
    second, second_model = _agent(kind, flaky, name="second", n=2)

    assert first.run("go") == "done"
    assert BODY_RUNS == {"flaky": 2}
    assert second.run("go") == "done"
    assert BODY_RUNS == {"flaky": 4}  # the second agent's breaker was still closed
    assert not any(REJECTION in s for s in second_model.seen)

    breakers = {b.agent_name: b for b in default_registry().find("flaky")}
    assert set(breakers) == {"first", "second"}
    assert breakers["first"].state is State.OPEN and breakers["second"].state is State.OPEN

    spans = otel.tool_spans("flaky")
    assert {s.attributes.get("gen_ai.agent.name") for s in spans} == {"first", "second"}
    for agent_name in {"first", "second"}:
        assert otel.metric_value("otel_breaker.calls", gen_ai_tool_name="flaky", gen_ai_agent_name=agent_name) > 0


def test_breaker_recovers_after_cooldown():
    """After the cooldown the next call is a probe; a good probe closes the breaker.

    The adapter runs on its own registry with an injected clock: no waiting."""
    now = [1000.0]
    registry = BreakerRegistry(
        settings=load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2", "OTEL_BREAKER_RECOVERY_TIMEOUT": "30"}),
        clock=lambda: now[0],
    )
    adapter = SmolagentsAdapter(Guard(registry))
    adapter.patch()
    try:
        BACKEND_UP[0] = False
        agent, model = _agent("tool_calling", backend, name="recovering", n=3)
        assert agent.run("go") == "done"
        (breaker,) = registry.find("backend")
        changes = []
        breaker.on_state_change(lambda change: changes.append((change.from_state.value, change.to_state.value)))
        assert breaker.state is State.OPEN and BODY_RUNS == {"backend": 2}
        assert REJECTION in model.seen[2]

        now[0] += 31  # the cooldown is over
        BACKEND_UP[0] = True
        model.step = 0
        assert agent.run("go again", reset=False) == "done"
        assert changes == [("open", "half_open"), ("half_open", "closed")]
        assert breaker.state is State.CLOSED
        assert BODY_RUNS == {"backend": 5}
        assert all("ok:x" in s for s in model.seen[-3:])
    finally:
        adapter.unpatch()
        BACKEND_UP[0] = True


class _WrongArgumentsCodeModel(Model):
    """Writes code that calls ``healthy`` with an argument it does not take, five times,
    then calls it correctly and finishes with what it returned."""

    def __init__(self):
        super().__init__(model_id="scripted-wrong-arguments")
        self.step = 0
        self.seen: list[str] = []

    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kwargs):
        if self.step > 0:
            self.seen.append(_text(messages[-1]))
        self.step += 1
        if self.step <= 5:
            code = 'Thought: call it\n<code>\nr = healthy(query="x")\nprint(r)\n</code>'
        elif self.step == 6:
            code = 'Thought: call it right\n<code>\nr = healthy(q="x")\nfinal_answer(r)\n</code>'
        else:
            code = 'Thought: finish\n<code>\nfinal_answer("late")\n</code>'
        return ChatMessage(role=MessageRole.ASSISTANT, content=code)


def test_wrong_arguments_in_generated_code_are_the_models_mistake(otel, instrument):
    """Five calls with an argument the tool does not take, then a valid one: the same
    answer with and without otel-breaker, never a rejection."""
    _threshold(2)

    def run():
        model = _WrongArgumentsCodeModel()
        agent = CodeAgent(tools=[healthy], model=model, max_steps=8, verbosity_level=LogLevel.OFF, name="coder")
        return agent.run("go"), [s.split("Call id")[0] for s in model.seen]

    plain = run()
    instrument("smolagents")
    guarded = run()
    assert guarded == plain
    assert guarded[0] == "ok:x"
    assert not any(REJECTION in s for s in guarded[1])
    assert otel.metric_value("otel_breaker.calls", gen_ai_tool_name="healthy", otel_breaker_outcome="failure") == 0
