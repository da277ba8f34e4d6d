"""The contract every framework adapter keeps, run against each framework's real loop.

A framework's suite supplies a :class:`FrameworkDriver` (build an agent with
given tools and a scripted model, run it, read what the model was sent) and an
``agent_script.py`` (an unmodified offline agent whose tool always fails, printing
the :data:`REPORT` line); then::

    class TestContract(FrameworkContract):
        driver = MyDriver()

runs every scenario below in that framework's nox session: a healthy agent behaves
identically with and without otel-breaker, failures are counted once (also with
the framework's own tool spans going through the span processor), the rejection is
a value the loop accepts and the model reads, the status block reaches the model
only when asked for (naming a tool while its breaker is open, then half-open,
gone once it closes; only to the agent whose calls that breaker can reject; and
never carrying a hostile tool name or error text raw), agent names scope
breakers and spans, ``uninstrument()`` restores exactly, and zero-code
enablement works both ways.

Every driver also implements ``tools_sent(agent)`` (the tools on the model's
menu at each of its calls), for the ``OTEL_BREAKER_HIDE_OPEN_TOOLS`` scenarios:
switched off, the menu is exactly as without otel-breaker even with a tool open;
switched on, it is exactly the same while nothing is open; an open tool leaves it
(or is marked unavailable where the framework cannot drop a tool) while the
healthy alternative stays, it is back once its breaker is half-open, and a call to
it anyway gets the usual rejection.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import pathlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import pytest
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from status_prompt import COOLDOWN, EVIL_NAME, INJECTION, breaker_settings, quick_breaker_settings
from zero_code import launcher, run_script, script_env

from otel_breaker import State, processor
from otel_breaker.degrade import STATUS_HEADER, safe_name
from otel_breaker.instrumentation import ADAPTERS, BreakerInstrumentor, load_adapter_class
from otel_breaker.menu import UNAVAILABLE_NOTE
from otel_breaker.registry import default_registry

#: The instructions every contract agent is built with.
PROMPT = "You are a careful assistant."
#: What a rejection tells the model (the start of the rejection text).
UNAVAILABLE = "is temporarily unavailable"
#: The per-request scenario: requests, each building a new agent, and tool calls per request.
REQUESTS = 5
CALLS_PER_REQUEST = 3
#: The first characters of the JSON line an ``agent_script.py`` prints.
REPORT = '{"body_runs"'

__all__ = [
    "EVIL_NAME",
    "INJECTION",
    "FrameworkContract",
    "FrameworkDriver",
    "Sent",
    "Tool",
    "call",
    "route_framework_spans",
    "tool_targets",
]


@dataclass
class Tool:
    """A tool as every framework gets it: ``fn(x: int) -> str`` with a docstring.

    ``runs`` counts how often the body ran (the drivers wrap ``fn`` in the
    framework's own tool type, keeping name and docstring).
    """

    name: str
    fn: Callable[[int], str]
    runs: int = 0

    def __call__(self, x: int) -> str:
        self.runs += 1
        return self.fn(x)

    @classmethod
    def failing(cls, name: str, message: str = "service down") -> Tool:
        def fn(x: int) -> str:
            raise RuntimeError(message)

        return cls(name, fn)

    @classmethod
    def unreachable(cls, name: str) -> Tool:
        """Its host refuses connections: a transport failure, not the tool's own error."""

        def fn(x: int) -> str:
            raise ConnectionRefusedError(111, "Connection refused")

        return cls(name, fn)

    @classmethod
    def healthy(cls, name: str) -> Tool:
        return cls(name, lambda x: f"{name} ok {x}")

    @classmethod
    def flaky(cls, name: str, failures: int, message: str = "service down") -> Tool:
        """Fails ``failures`` times, then works."""
        tool = cls(name, lambda x: "")

        def fn(x: int) -> str:
            if tool.runs <= failures:
                raise RuntimeError(message)
            return f"{name} ok {x}"

        tool.fn = fn
        return tool

    @classmethod
    def advancing(cls, name: str, seconds: float) -> Tool:
        """Works, taking ``seconds`` on the registry's fake clock (``registry_clock``): no sleeping."""

        def fn(x: int) -> str:
            default_registry().clock.advance(seconds)
            return f"{name} ok {x}"

        return cls(name, fn)


#: A scripted model step: a tool call ``(tool name, arguments)`` or the final answer text.
Step = tuple[str, dict[str, Any]] | str


def call(name: str, x: int = 1) -> tuple[str, dict[str, Any]]:
    return (name, {"x": x})


@dataclass
class Sent:
    """One request the model received: its instructions (system prompt) and the
    text of every tool result in the conversation so far, in order."""

    instructions: str | None
    tool_results: list[str] = field(default_factory=list)


class FrameworkDriver(Protocol):
    """How the contract drives one framework's real agent loop, offline."""

    #: The adapter identifier (``ADAPTERS`` key).
    framework: str
    #: An unmodified agent script (no otel-breaker import) printing the REPORT line.
    script: pathlib.Path
    #: Optional (default False): the framework emits its own ``execute_tool`` spans.
    native_tool_spans: bool
    #: Optional (default True): the framework names the agent a tool call is made for.
    names_agents: bool
    #: Optional (default 0): tool calls one turn may have in flight when a breaker opens.
    in_flight_tool_calls: int

    def build(
        self, tools: list[Tool], steps: list[Step], *, name: str = "assistant", instructions: str = PROMPT
    ) -> Any:
        """An agent named ``name`` with ``tools``, whose model answers with ``steps`` in turn."""

    def run(self, agent: Any, prompt: str = "go") -> str:
        """Run the agent loop to its end; the final answer text."""

    def sent(self, agent: Any) -> list[Sent]:
        """What the model was sent on each of its calls so far."""

    def tools_sent(self, agent: Any) -> list[dict[str, Any]]:
        """The tools the model was offered on each of its calls so far:
        name -> its definition as sent (description, schema)."""


def tool_targets(framework: str) -> dict[str, Any]:
    """``module:qualname`` -> the object there now, for every patch point of an adapter."""
    found = {}
    for target in load_adapter_class(framework)().targets():
        owner: Any = importlib.import_module(target.module)
        *path, attribute = target.qualname.split(".")
        for part in path:
            owner = getattr(owner, part)
        found[f"{target.module}:{target.qualname}"] = (
            owner.__dict__.get(attribute) if isinstance(owner, type) else getattr(owner, attribute, None)
        )
    return found


class _Forwarder(SpanProcessor):
    """The global tracer provider's processor: hands spans to the current test's processors."""

    def __init__(self) -> None:
        self.targets: list[SpanProcessor] = []

    def on_start(self, span, parent_context=None) -> None:
        for target in self.targets:
            target.on_start(span, parent_context)

    def on_end(self, span) -> None:
        for target in self.targets:
            target.on_end(span)


_FORWARDER = _Forwarder()


def _global_forwarder() -> _Forwarder | None:
    """The forwarder behind the global tracer provider (installed once per process),
    or None when something else set the global provider first."""
    if not getattr(_FORWARDER, "installed", False):
        provider = TracerProvider()
        provider.add_span_processor(_FORWARDER)
        trace_api.set_tracer_provider(provider)
        _FORWARDER.installed = trace_api.get_tracer_provider() is provider
    return _FORWARDER if _FORWARDER.installed else None


@contextlib.contextmanager
def route_framework_spans(otel) -> Iterator[InMemorySpanExporter]:
    """For the block: the framework's own spans (sent to the global tracer provider)
    go through the same span processor as ours, and into the exporter yielded."""
    forwarder = _global_forwarder()
    if forwarder is None:
        pytest.skip("the global tracer provider was set elsewhere")
    exporter = InMemorySpanExporter()
    breaker_processor = processor.BreakerSpanProcessor()
    processor.attach(otel.tracer_provider, breaker_processor)
    added = [breaker_processor, SimpleSpanProcessor(exporter)]
    forwarder.targets.extend(added)
    try:
        yield exporter
    finally:
        for target in added:
            forwarder.targets.remove(target)


def tool_spans_of_every_scope(otel, tool: str) -> list:
    """Every finished ``execute_tool`` span of ``tool``, ours or the framework's, guarded or not."""
    return [
        s
        for s in otel.finished_spans()
        if s.name.startswith("execute_tool")
        and (s.attributes.get("gen_ai.tool.name") == tool or s.name == f"execute_tool {tool}")
    ]


def _breaker(tool: str, agent_name: str | None = None):
    found = [b for b in default_registry().find(tool) if agent_name is None or b.agent_name == agent_name]
    assert len(found) == 1, f"expected one breaker for {tool!r} ({agent_name}), found {found}"
    return found[0]


class FrameworkContract:
    """The shared scenarios; a framework's ``TestContract`` sets :attr:`driver`."""

    driver: ClassVar[FrameworkDriver]

    @pytest.fixture
    def framework_spans(self, otel):
        """The framework's own spans go through the same span processor as ours; the exporter keeps them."""
        with route_framework_spans(otel) as exporter:
            yield exporter

    # -- never change a healthy agent -------------------------------------------------

    def _healthy_outcome(self) -> tuple[str, list[Sent], int]:
        tool = Tool.healthy("echo")
        agent = self.driver.build([tool], [call("echo", 1), call("echo", 2), "done"])
        final = self.driver.run(agent)
        return final, self.driver.sent(agent), tool.runs

    def test_healthy_agent_identical_with_and_without(self, instrument):
        breaker_settings(status_in_prompt="true")
        baseline = self._healthy_outcome()
        assert baseline[0] == "done" and baseline[2] == 2
        instrument(self.driver.framework)
        assert self._healthy_outcome() == baseline

    # -- failures, rejection --------------------------------------------------------------

    def test_failures_counted_once_and_model_reads_rejection(self, instrument, otel, framework_spans):
        # The framework's own tool spans go through the span processor too: they must not count again.
        breaker_settings(failure_threshold="2")
        instrument(self.driver.framework)
        tool = Tool.failing("weather")
        agent = self.driver.build([tool], [call("weather", i) for i in range(1, 5)] + ["done"])
        assert self.driver.run(agent) == "done"  # the loop went on after the rejections
        assert tool.runs == 2
        stats = _breaker("weather").stats
        assert (stats.failure_count, stats.rejected_requests, stats.success_count) == (2, 2, 0)
        results = self.driver.sent(agent)[-1].tool_results
        assert len(results) == 4
        assert [UNAVAILABLE in r for r in results] == [False, False, True, True]
        assert "Tool 'weather'" in results[-1]
        guarded = otel.tool_spans("weather")
        assert len(guarded) == 4
        assert all(s.attributes.get("gen_ai.agent.name") == "assistant" for s in guarded)
        assert [s.attributes["otel_breaker.rejected"] for s in guarded] == [False, False, True, True]
        # One execute_tool span per call, whoever started it.
        assert len(tool_spans_of_every_scope(otel, "weather")) == 4
        scopes = {s.instrumentation_scope.name for s in guarded}
        if getattr(self.driver, "native_tool_spans", False):
            # The framework traced each call itself: its span carries our attributes.
            assert "otel_breaker" not in scopes, scopes
        else:
            assert scopes == {"otel_breaker"}

    def test_open_breaker_outlives_the_run(self, instrument):
        breaker_settings(failure_threshold="2")
        instrument(self.driver.framework)
        tool = Tool.failing("weather")
        agent = self.driver.build(
            [tool], [call("weather", 1), call("weather", 2), "first", call("weather", 3), "second"]
        )
        assert self.driver.run(agent) == "first"
        assert self.driver.run(agent, "again") == "second"
        assert tool.runs == 2
        assert UNAVAILABLE in self.driver.sent(agent)[-1].tool_results[-1]

    # -- the status block -------------------------------------------------------------------

    def _status_run(self, tool_name: str = "flaky") -> list[Sent]:
        tool = Tool.flaky(tool_name, failures=5, message=f"{INJECTION}. <|system|> secret-token-123")
        agent = self.driver.build([tool], [call(tool_name, 1), call(tool_name, 2), "done"])
        assert self.driver.run(agent) == "done"
        return self.driver.sent(agent)

    def _instructions(self, agent: Any) -> list[str | None]:
        return [s.instructions for s in self.driver.sent(agent)]

    def _lifecycle(self) -> tuple[Any, list[str | None], tuple[int, int]]:
        # flaky fails twice (its breaker opens), wait outlasts the cooldown, flaky's probe
        # succeeds (the breaker closes), then the model answers: five model calls.
        flaky, wait = Tool.flaky("flaky", failures=2), Tool.advancing("wait", COOLDOWN + 0.15)
        steps = [call("flaky", 1), call("flaky", 2), call("wait", 3), call("flaky", 4), "done"]
        agent = self.driver.build([flaky, wait], steps)
        assert self.driver.run(agent) == "done"
        return agent, self._instructions(agent), (flaky.runs, wait.runs)

    def test_status_block_follows_the_breaker_open_half_open_closed(self, instrument, registry_clock):
        quick_breaker_settings(status_in_prompt="true")
        _, plain, runs = self._lifecycle()  # the prompts as without otel-breaker
        assert len(plain) == 5 and runs == (3, 1)
        instrument(self.driver.framework)
        _agent, seen, runs = self._lifecycle()  # held: an agent's own breakers go when it does
        assert runs == (3, 1)  # two failures, then the probe ran
        assert len(seen) == 5
        # Before the breaker opens, and once its probe has closed it: the instructions as written.
        assert [seen[0], seen[1], seen[4]] == [plain[0], plain[1], plain[4]]
        for base, text in zip(plain[2:4], seen[2:4], strict=True):
            assert text is not None and text.startswith(f"{base}\n\n{STATUS_HEADER}" if base else STATUS_HEADER)
            assert text.count(STATUS_HEADER) == 1
            assert "'wait'" not in text[text.index(STATUS_HEADER) :]  # the healthy tool is never listed
        assert "'flaky' (open): may be retried in about 1s" in seen[2]
        assert "'flaky' (half-open): one trial call may be made now" in seen[3]
        assert _breaker("flaky").state is State.CLOSED

    def _lookups(self, name: str, tool: Tool, calls: int) -> tuple[Any, list[str | None]]:
        agent = self.driver.build([tool], [call("lookup", i) for i in range(1, calls + 1)] + ["done"], name=name)
        assert self.driver.run(agent) == "done"
        return agent, self._instructions(agent)

    def test_each_agent_sees_only_the_breakers_that_can_reject_its_calls(self, instrument):
        # A long cooldown: alpha's breaker must still be open when the states are read,
        # however slowly the four runs go.
        quick_breaker_settings(status_in_prompt="true", recovery_timeout="600")
        _, plain_alpha = self._lookups("alpha", Tool.failing("lookup"), 2)
        _, plain_beta = self._lookups("beta", Tool.healthy("lookup"), 1)
        instrument(self.driver.framework)
        # Both agents are held to the end: an agent's own breakers go when it does.
        _alpha, alpha_prompts = self._lookups("alpha", Tool.failing("lookup"), 2)
        _beta, beta_prompts = self._lookups("beta", Tool.healthy("lookup"), 1)
        states = {b.agent_name: b.state for b in default_registry().find("lookup")}
        assert states == {"alpha": State.OPEN, "beta": State.CLOSED}
        assert len(alpha_prompts) == 3 and alpha_prompts[:2] == plain_alpha[:2]
        assert "'lookup' (open)" in (alpha_prompts[2] or "")
        assert beta_prompts == plain_beta  # alpha's open breaker cannot reject beta's calls

    def test_hostile_tool_names_and_errors_never_reach_the_prompt_raw(self, instrument):
        # A tool name carrying markup and instructions, and a failing tool whose error text does.
        quick_breaker_settings(status_in_prompt="true")
        instrument(self.driver.framework)
        default_registry().get(EVIL_NAME).force_open(60)
        prompts = [s.instructions or "" for s in self._status_run()]
        assert len(prompts) == 3
        assert all(p.startswith(PROMPT) and safe_name(EVIL_NAME) in p for p in prompts)
        assert "'flaky'" not in prompts[0] and "'flaky' (open)" in prompts[-1]
        for text in prompts:
            assert text.count(STATUS_HEADER) == 1
            assert "<|" not in text and "|>" not in text
            assert "ignore previous instructions" not in text.lower()
            assert INJECTION not in text and "secret-token" not in text
            # No line break of a tool name gets through: the header, the advice, one line per tool.
            lines = text[text.index(STATUS_HEADER) :].split("\n")
            assert lines[0] == STATUS_HEADER and all(line.startswith("- '") for line in lines[2:])
        assert [len(t[t.index(STATUS_HEADER) :].split("\n")) for t in prompts] == [3, 3, 4]

    def test_status_block_absent_by_default(self, instrument):
        quick_breaker_settings()
        instrument(self.driver.framework)
        sent = self._status_run()
        assert sent[0].instructions and sent[0].instructions.startswith(PROMPT)
        assert all(s.instructions == sent[0].instructions for s in sent)
        assert STATUS_HEADER not in sent[0].instructions

    # -- one breaker for everything behind a dead upstream ------------------------------------

    def test_healthy_agent_identical_with_upstreams_configured(self, instrument):
        breaker_settings(upstreams="echoes=echo,ec*")
        baseline = self._healthy_outcome()
        instrument(self.driver.framework)
        assert self._healthy_outcome() == baseline

    def test_a_dead_upstream_opens_once_for_all_its_tools(self, instrument):
        # OTEL_BREAKER_UPSTREAMS groups the tools; transport failures of one open the group,
        # so a tool of the group that never ran is rejected without a round trip.
        if not getattr(self.driver, "tools_run_in_process", True):
            pytest.skip("the tools run on a server: their errors are its answers, not transport failures")
        breaker_settings(failure_threshold="2", upstreams="serp=web_search,news_search")
        instrument(self.driver.framework)
        web, news = Tool.unreachable("web_search"), Tool.unreachable("news_search")
        steps = [call("web_search", 1), call("web_search", 2), call("news_search", 3), call("web_search", 4), "done"]
        agent = self.driver.build([web, news], steps)
        assert self.driver.run(agent) == "done"
        assert (web.runs, news.runs) == (2, 0)
        results = self.driver.sent(agent)[-1].tool_results
        assert [UNAVAILABLE in r for r in results] == [False, False, True, True]
        assert "'serp'" in results[2]

    # -- agent identity ----------------------------------------------------------------------

    def test_agents_sharing_a_tool_name_do_not_share_a_breaker(self, instrument, otel):
        breaker_settings(failure_threshold="2")
        instrument(self.driver.framework)
        broken, fine = Tool.failing("lookup"), Tool.healthy("lookup")
        alpha = self.driver.build([broken], [call("lookup", i) for i in range(1, 4)] + ["done"], name="alpha")
        beta = self.driver.build([fine], [call("lookup", 1), "done"], name="beta")
        assert self.driver.run(alpha) == "done"
        assert self.driver.run(beta) == "done"
        assert (broken.runs, fine.runs) == (2, 1)
        assert UNAVAILABLE in self.driver.sent(alpha)[-1].tool_results[-1]
        assert UNAVAILABLE not in self.driver.sent(beta)[-1].tool_results[-1]
        assert _breaker("lookup", "alpha").stats.failure_count == 2
        assert _breaker("lookup", "beta").stats.success_count == 1
        names = [s.attributes.get("gen_ai.agent.name") for s in otel.tool_spans("lookup")]
        assert names == ["alpha"] * 3 + ["beta"]

    # -- a breaker follows the tool, not an object --------------------------------------------

    def _per_request(self, tool: Tool, requests: int = REQUESTS, calls: int = CALLS_PER_REQUEST) -> list[Any]:
        """The usual server pattern: every request builds a new agent (same name, same
        tool code) and runs it. Returns what the model read of each tool result."""
        read = []
        for request in range(requests):
            steps = [call(tool.name, request * calls + i) for i in range(1, calls + 1)] + ["done"]
            agent = self.driver.build([tool], steps, name="weather_agent")
            assert self.driver.run(agent) == "done"
            read.append(self.driver.sent(agent)[-1].tool_results)
            del agent
        return read

    def test_a_new_agent_object_per_request_keeps_the_breaker(self, instrument, otel):
        # Five requests, three calls each to a dead tool, threshold 2: the tool runs twice in all.
        breaker_settings(failure_threshold="2")
        instrument(self.driver.framework)
        tool = Tool.failing("weather")
        read = self._per_request(tool)
        allowed = 2 + getattr(self.driver, "in_flight_tool_calls", 0)
        assert tool.runs <= allowed, f"the dead tool ran {tool.runs} times over {REQUESTS} requests"
        assert all(UNAVAILABLE in r for results in read[1:] for r in results)
        breaker = _breaker("weather")  # one breaker for every request's agent
        assert breaker.agent_name == ("weather_agent" if getattr(self.driver, "names_agents", True) else None)
        assert breaker.state is State.OPEN
        if breaker.source is None:  # a local function: keyed by its code, not the framework's classes
            root = load_adapter_class(self.driver.framework)().modules[0].split(".")[0]
            assert breaker.origin is not None and not breaker.origin.startswith(root + "."), breaker.origin
        # The agents are gone; the state gauge still reports the open breaker.
        gc.collect()
        assert otel.value("otel_breaker.state", gen_ai_tool_name="weather", otel_breaker_state="open") == 1

    def test_a_new_agent_object_per_request_is_unchanged_when_healthy(self, instrument):
        baseline_tool = Tool.healthy("weather")
        baseline = (self._per_request(baseline_tool), baseline_tool.runs)
        assert baseline[1] == REQUESTS * CALLS_PER_REQUEST
        instrument(self.driver.framework)
        tool = Tool.healthy("weather")
        assert (self._per_request(tool), tool.runs) == baseline

    # -- patching -----------------------------------------------------------------------------

    def test_uninstrument_restores_exactly(self, instrument):
        before = tool_targets(self.driver.framework)
        instrumentor = instrument(self.driver.framework)
        during = tool_targets(self.driver.framework)
        assert all(during[k] is not before[k] for k in before), "every patch point is wrapped"
        instrumentor.uninstrument()
        after = tool_targets(self.driver.framework)
        assert all(after[k] is before[k] for k in before)

    # -- open tools leave the menu (OTEL_BREAKER_HIDE_OPEN_TOOLS) -------------------------

    def _menus(self, agent: Any) -> list[dict[str, Any]]:
        return self.driver.tools_sent(agent)

    def _healthy_menus(self) -> list[dict[str, Any]]:
        agent = self.driver.build(
            [Tool.healthy("primary"), Tool.healthy("backup")], [call("primary", 1), call("backup", 2), "done"]
        )
        assert self.driver.run(agent) == "done"
        return self._menus(agent)

    @pytest.mark.parametrize("hide", ["false", "true"])
    def test_menu_unchanged_unless_a_tool_is_open(self, instrument, hide):
        breaker_settings(hide_open_tools=hide)
        baseline = self._healthy_menus()
        assert len(baseline) == 3 and all(set(m) >= {"primary", "backup"} for m in baseline)
        instrument(self.driver.framework)
        assert self._healthy_menus() == baseline

    def _dead_primary_menus(self) -> tuple[list[dict[str, Any]], tuple[int, int]]:
        primary, backup = Tool.failing("primary"), Tool.healthy("backup")
        agent = self.driver.build(
            [primary, backup], [call("primary", 1), call("primary", 2), call("primary", 3), call("backup", 4), "done"]
        )
        assert self.driver.run(agent) == "done"
        return self._menus(agent), (primary.runs, backup.runs)

    def test_switch_off_an_open_tool_stays_on_the_menu(self, instrument):
        quick_breaker_settings()  # hiding is off by default
        baseline, _ = self._dead_primary_menus()
        assert len(baseline) == 5 and all(set(m) >= {"primary", "backup"} for m in baseline)
        instrument(self.driver.framework)
        menus, runs = self._dead_primary_menus()
        assert runs == (2, 1)  # the breaker was open for the third call
        assert menus == baseline

    def test_open_tool_leaves_the_menu_until_half_open(self, instrument, registry_clock):
        quick_breaker_settings(hide_open_tools="true")
        instrument(self.driver.framework)
        primary, backup = Tool.flaky("primary", failures=2), Tool.healthy("backup")
        steps = [call("primary", 1), call("primary", 2), call("primary", 3), call("backup", 1), "first"]
        agent = self.driver.build([primary, backup], [*steps, call("primary", 4), "second"])
        assert self.driver.run(agent) == "first"
        registry_clock.advance(COOLDOWN * 2)  # past the cooldown: half-open, back for the probe
        assert self.driver.run(agent, "again") == "second"
        menus = self._menus(agent)
        assert len(menus) == 7

        def offered(menu: dict[str, Any]) -> bool:
            return "primary" in menu and UNAVAILABLE_NOTE not in str(menu["primary"])

        assert [offered(m) for m in menus] == [True, True, False, False, False, True, True]
        assert all(m["backup"] == menus[0]["backup"] for m in menus)
        assert menus[5] == menus[0] and menus[6] == menus[0]  # back exactly as it was
        # The model called the hidden tool anyway (third call): the usual rejection, the body never ran.
        results = self.driver.sent(agent)[4].tool_results
        assert [UNAVAILABLE in r for r in results] == [False, False, True, False]
        assert primary.runs == 3 and backup.runs == 1

    # -- dependencies ------------------------------------------------------------------------

    def test_instrument_with_only_some_frameworks_installed(self):
        """A plain ``instrument()`` (dependency check on) works where only some frameworks are."""
        from importlib.metadata import distribution

        from opentelemetry.instrumentation.dependencies import get_dist_dependency_conflicts

        absent = [n for n in ADAPTERS if load_adapter_class(n)().installed_version() is None]
        assert absent, "the other frameworks are not installed in this session"
        instrumentor = BreakerInstrumentor()
        assert instrumentor._check_dependency_conflicts() is None
        assert get_dist_dependency_conflicts(distribution("otel-breaker")) is None  # the launcher's check
        instrumentor.instrument()
        try:
            assert instrumentor.is_instrumented_by_opentelemetry
            status = instrumentor.status()
            assert status[self.driver.framework].startswith("active"), status
            assert all(status[n].startswith("skipped") for n in absent), status
        finally:
            instrumentor.uninstrument()

    # -- zero code ----------------------------------------------------------------------------

    def test_script_unguarded_baseline(self):
        out, _ = run_script(self.driver.script, script_env(), marker=REPORT)
        assert out["body_runs"] == 5
        assert not any(UNAVAILABLE in t for t in out["tool_results"])

    def test_env_switch_guards_the_script(self):
        env = script_env(OTEL_BREAKER_ENABLED="true", OTEL_BREAKER_FAILURE_THRESHOLD="2")
        out, _ = run_script(self.driver.script, env, marker=REPORT)
        assert out["body_runs"] == 2
        assert sum(UNAVAILABLE in t for t in out["tool_results"]) == 3
        assert out["final"] == "done"

    def test_opentelemetry_instrument_guards_the_script(self):
        env = script_env(
            OTEL_BREAKER_FAILURE_THRESHOLD="2",
            OTEL_TRACES_EXPORTER="console",
            OTEL_METRICS_EXPORTER="none",
            OTEL_LOGS_EXPORTER="none",
        )
        out, stdout = run_script(self.driver.script, env, marker=REPORT, launch=launcher())
        assert out["body_runs"] == 2
        assert sum(UNAVAILABLE in t for t in out["tool_results"]) == 3
        assert '"otel_breaker.guarded": true' in stdout
