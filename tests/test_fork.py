"""Pre-fork servers fork while other threads run: every child must still call its tools.

A lock held by another thread at the moment of ``fork`` stays held forever in
the child (that thread does not exist there). The breakers, the registry,
telemetry, health checks and the token estimator re-create their locks and
background machinery in the child.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import traceback
from pathlib import Path

import pytest

from otel_breaker import CircuitBreaker, CircuitBreakerConfig, State, guard, telemetry
from otel_breaker import health as health_module
from otel_breaker.registry import BreakerRegistry, default_registry
from otel_breaker.toolcall import ToolCall

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

CHILDREN = 30
#: Each child gets this long to finish its guarded calls; a child stuck on a lock never does.
CHILD_TIME_BOUND = 10.0


class Down(Exception):
    pass


def _fail() -> None:
    raise Down


def _drive(stop: threading.Event, breakers: list[CircuitBreaker], registry: BreakerRegistry) -> None:
    """Move breakers through every transition, as fast as possible, and create new ones."""
    index = 0
    while not stop.is_set():
        for breaker in breakers:
            breaker.force_open()
            breaker.stats  # noqa: B018 - takes the lock
            breaker.force_close()
            try:
                breaker.call(_fail)
            except Down:
                pass
            breaker.reset()
        registry.breaker_for(ToolCall(f"driven-{index % 500}", session_id=f"s{index}"))
        telemetry.TELEMETRY.estimator.observe(f"driven-{index % 50}", 10, 5)
        index += 1


def _child(breakers: list[CircuitBreaker], registry: BreakerRegistry) -> int:
    """What a worker does first: guarded calls that take every lock (failures, new breakers)."""
    for breaker in breakers:
        breaker.force_close()
        try:
            breaker.call(_fail)  # opens it (failure_threshold=1)
        except Down:
            pass
        assert breaker.stats.state is State.OPEN
        breaker.force_close()
        assert breaker.call(lambda: 7) == 7
    assert registry.breaker_for(ToolCall("child-tool", session_id="child")).call(lambda: 1) == 1
    assert guard("child_guarded")(lambda: 2)() == 2
    telemetry.TELEMETRY.estimator.observe("child-tool", 10, 5)
    telemetry.TELEMETRY.transitions()
    health_module.MONITOR.pending()
    return 0


def _wait_all(pids: list[int], bound: float) -> tuple[list[int], list[int]]:
    """Wait up to ``bound`` seconds for the children (running side by side); kill the hung ones.

    Returns (hung, failed) pids."""
    hung, failed = [], []
    deadline = time.monotonic() + bound  # the children run at the same time
    for pid in pids:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                if os.waitstatus_to_exitcode(status) != 0:
                    failed.append(pid)
                break
            if time.monotonic() > deadline:
                hung.append(pid)
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                break
            time.sleep(0.01)  # polling a child process, bounded by the deadline
    return hung, failed


def _in_child(target) -> None:  # pragma: no cover - runs in the child
    code = 1
    try:
        code = target()
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def _fork_children(target) -> list[int]:
    pids = []
    for _ in range(CHILDREN):
        pid = os.fork()
        if pid == 0:
            _in_child(target)
        pids.append(pid)
        time.sleep(0.002)  # let the driving threads run between forks
    return pids


def test_children_forked_while_threads_drive_breakers_all_finish_their_calls():
    registry = BreakerRegistry(settings=default_registry().settings, max_breakers=100_000)
    breakers = [
        CircuitBreaker(f"forked-{i}", CircuitBreakerConfig(failure_threshold=1, recovery_timeout=3600))
        for i in range(3)
    ]
    stop = threading.Event()
    drivers = [threading.Thread(target=_drive, args=(stop, breakers, registry), daemon=True) for _ in range(2)]
    for driver in drivers:
        driver.start()
    try:
        pids = _fork_children(lambda: _child(breakers, registry))
    finally:
        stop.set()
        for driver in drivers:
            driver.join()
    hung, failed = _wait_all(pids, CHILD_TIME_BOUND)
    assert (len(hung), len(failed)) == (0, 0), f"of {CHILDREN} forked children, {len(hung)} hung, {len(failed)} failed"


def test_a_forked_child_runs_health_checks_and_async_deadlines_of_its_own():
    """The parent's health-check thread and event loop do not exist in the child:
    the child starts its own."""
    checks = []
    opened = CircuitBreaker(
        "health-forked",
        CircuitBreakerConfig(
            failure_threshold=1,
            recovery_timeout=3600,
            health_check=lambda: checks.append(1) or True,
            health_check_interval=0.01,
        ),
    )
    opened.force_open(3600)  # scheduled on the parent's health thread
    assert health_module.MONITOR.pending() >= 1

    loop_ready = threading.Event()

    def parent_loop() -> None:
        async def main() -> None:
            slow = CircuitBreaker("slow-parent", CircuitBreakerConfig(timeout=3600))
            loop_ready.set()
            await slow.acall(asyncio.sleep, 0.5)

        asyncio.run(main())

    thread = threading.Thread(target=parent_loop, daemon=True)
    thread.start()
    loop_ready.wait(5)

    def child() -> int:
        opened.force_open(3600)
        deadline = time.monotonic() + 5
        while opened.state is State.OPEN and time.monotonic() < deadline:
            time.sleep(0.01)  # the child's own health thread moves it to half-open
        if opened.state is State.OPEN:
            return 3

        async def timed() -> str:
            quick = CircuitBreaker("quick-child", CircuitBreakerConfig(timeout=0.05))
            try:
                await quick.acall(asyncio.sleep, 10)
            except TimeoutError:
                return "timed out"
            return "ran"

        return 0 if asyncio.run(timed()) == "timed out" else 4

    pid = os.fork()
    if pid == 0:
        _in_child(child)
    hung, failed = _wait_all([pid], CHILD_TIME_BOUND)
    thread.join(5)
    assert (hung, failed) == ([], [])


def _record_durations(stop: threading.Event) -> None:
    """Guarded calls as fast as possible: each records a duration into the SDK's histogram."""
    tool = guard("recorded_in_parent")(lambda: 1)
    while not stop.is_set():
        tool()


def _child_calls_recorded_tool() -> int:  # pragma: no cover - runs in the child
    tool = guard("recorded_in_parent")(lambda: 1)
    for _ in range(50):
        if tool() != 1:
            return 5
    return 0


def test_children_forked_while_a_thread_records_sdk_metrics_all_finish_their_calls(otel):
    """The SDK's histogram takes a lock of its own on every record; a thread holding it
    at the fork would leave it held in the child. Our at-fork handlers keep the
    instruments we record to out of any thread's hands while the process forks."""
    stop = threading.Event()
    recorders = [threading.Thread(target=_record_durations, args=(stop,), daemon=True) for _ in range(2)]
    for recorder in recorders:
        recorder.start()
    try:
        time.sleep(0.05)  # the recorders are in their loop
        pids = _fork_children(_child_calls_recorded_tool)
    finally:
        stop.set()
        for recorder in recorders:
            recorder.join()
    hung, failed = _wait_all(pids, CHILD_TIME_BOUND)
    assert (len(hung), len(failed)) == (0, 0), f"of {CHILDREN} forked children, {len(hung)} hung, {len(failed)} failed"
    # the parent's recording still works after the forks
    assert otel.value("gen_ai.execute_tool.duration", gen_ai_tool_name="recorded_in_parent") > 0


#: A runner of storm rounds. It loads the OpenTelemetry API (and with ``sdk`` the SDK, with
#: in-memory providers) but nothing of the package, then forks each round from itself: a round
#: starts as a fresh interpreter would, with nothing of ours imported, at the cost of a fork.
#: A round imports the package and the breaker (nothing of the call path yet), starts threads
#: that drive breakers through every transition (failures open them, a probe after the injected
#: clock passes the cooldown closes them), and forks children while those threads make their
#: very first calls. Each child makes one breaker call and exits; the round waits for all of
#: them at once, up to a bound, and kills the hung ones (a hung child first writes its stack to
#: stderr). The runner prints the totals of its rounds.
STORM = textwrap.dedent(
    """
    import faulthandler, json, os, signal, sys, threading, time

    ROUNDS, CHILDREN, BOUND = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    SDK, ENTRANCE = sys.argv[4], sys.argv[5]
    import opentelemetry._logs, opentelemetry.metrics, opentelemetry.trace  # what the package's import loads
    if SDK == "sdk":
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
    assert not any(name.startswith("otel_breaker") for name in sys.modules)
    sys.setswitchinterval(0.001)  # the threads and the forking thread take turns often: a round ends sooner


    class ManualClock:
        def __init__(self):
            self.now = 1000.0

        def __call__(self):
            return self.now


    class Down(Exception):
        pass


    def fail():
        raise Down


    def succeed():
        return 1


    # A tool's calls as a framework's adapter makes them: the guard (and with it the
    # call path) is loaded by the first call, in the thread that makes it.
    class ThroughTheGuard:

        def __init__(self, name, config):
            from otel_breaker.toolcall import ToolCall

            self.call_of = ToolCall(name)
            self.config = config

        def call(self, fn):
            from otel_breaker.guards import default_guard

            return default_guard().call(self.call_of, fn, config=self.config)

        @property
        def stats(self):
            from otel_breaker.registry import default_registry

            return default_registry().breaker_for(self.call_of).stats


    def drive(stop, breaker, clock, open_error):
        while not stop.is_set():
            for _ in range(2):  # the second failure opens it
                try:
                    breaker.call(fail)
                except (Down, open_error):
                    pass
            clock.now += 10  # past the cooldown: the next call is the half-open probe
            try:
                breaker.call(succeed)
            except open_error:
                pass


    def wait_for(pids, bound):
        '''Wait up to ``bound`` seconds for the processes (running side by side); kill the hung ones.'''
        waiting, failed = set(pids), 0
        deadline = time.monotonic() + bound
        while waiting and time.monotonic() < deadline:
            for pid in list(waiting):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    waiting.discard(pid)
                    failed += os.waitstatus_to_exitcode(status) != 0
            time.sleep(0.01)  # polling child processes, bounded by the deadline
        for pid in waiting:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        return len(waiting), failed


    def storm():
        from otel_breaker import CircuitBreaker, CircuitBreakerConfig, CircuitOpenError

        config = CircuitBreakerConfig(failure_threshold=2, recovery_timeout=5)
        stop = threading.Event()
        breakers, threads = [], []
        if ENTRANCE == "adapter":
            from otel_breaker.registry import default_registry

            shared_clock = ManualClock()
            default_registry().use_clock(shared_clock)  # every breaker the guard finds reads it
        for index in range(4):
            if ENTRANCE == "adapter":
                clock = shared_clock
                breaker = ThroughTheGuard(f"storm-{index}", config)
            else:
                clock = ManualClock()
                breaker = CircuitBreaker(f"storm-{index}", config, clock=clock)
            breakers.append(breaker)
            threads.append(threading.Thread(target=drive, args=(stop, breaker, clock, CircuitOpenError), daemon=True))
        for thread in threads:
            thread.start()
        pids = []
        for number in range(CHILDREN):
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    faulthandler.dump_traceback_later(BOUND * 0.8)  # a hung child shows where it waits
                    try:
                        breakers[number % len(breakers)].call(succeed)
                    except CircuitOpenError:
                        pass
                    code = 0
                finally:
                    os._exit(code)
            pids.append(pid)
            time.sleep(0.003)  # the threads run between forks
        stop.set()
        for thread in threads:
            thread.join()
        hung, failed = wait_for(pids, BOUND)  # the children run side by side: one bound for all
        opened = sum(breaker.stats.opened_count for breaker in breakers)
        return {"hung": hung, "failed": failed, "opened": opened}


    totals = {"rounds": 0, "hung": 0, "failed": 0, "rounds_without_transitions": 0, "rounds_lost": 0}
    for _ in range(ROUNDS):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            code = 1
            try:
                os.write(write_end, json.dumps(storm()).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        lost, _ = wait_for([pid], BOUND + 30)  # a round's own threads and forks, then its children's bound
        with os.fdopen(read_end) as report:
            text = report.read()
        totals["rounds"] += 1
        if lost or not text:
            totals["rounds_lost"] += 1
            continue
        figures = json.loads(text)
        totals["hung"] += figures["hung"]
        totals["failed"] += figures["failed"]
        totals["rounds_without_transitions"] += figures["opened"] == 0
    print(json.dumps(totals))
    """
)
ROUNDS = 10
#: The bound on all the children of one round together (a busy machine is slow, a hung child never ends).
STORM_BOUND = 10.0


@pytest.mark.parametrize("sdk", ["no-sdk", "sdk"])
@pytest.mark.parametrize("entrance", ["breaker", "adapter"])
def test_children_forked_during_the_first_calls_of_threads_never_hang(entrance, sdk):
    """No import and no lock a thread may hold lies on a breaker call's path: a child
    forked while other threads make their first calls (and move their breakers
    between states) makes its own call and exits. ``adapter``: the threads' first calls
    load the call path, as a framework's adapter does; the fork waits for that import to
    end (or makes it). Each round starts with nothing of ours imported, in a process of
    its own, so a hang there cannot stop this suite."""
    done = subprocess.run(
        [sys.executable, "-c", STORM, str(ROUNDS), str(CHILDREN), str(STORM_BOUND), sdk, entrance],
        capture_output=True,
        text=True,
        timeout=ROUNDS * (STORM_BOUND + 40),
        check=False,
        # the start-up hook would import the package: a round starts with nothing of ours imported
        env={name: value for name, value in os.environ.items() if name != "OTEL_BREAKER_ENABLED"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    totals = json.loads(done.stdout.strip().splitlines()[-1])
    expected = {"rounds": ROUNDS, "hung": 0, "failed": 0, "rounds_without_transitions": 0, "rounds_lost": 0}
    assert totals == expected, f"{ROUNDS} rounds of {CHILDREN} forked children: {totals}\n{done.stderr[-3000:]}"


def test_a_fork_loads_the_call_path_before_the_child_exists():
    """A thread's first call through the guard imports the call path; the import holds its
    module lock before the module shows in ``sys.modules``, where no scan sees it. So the
    fork loads the call path itself (or waits for the thread loading it): the child finds it
    whole, and no import of it is left for a call to make in the parent either."""
    program = textwrap.dedent(
        """
        import os, sys
        import otel_breaker

        loaded_before = "otel_breaker.guards" in sys.modules
        pid = os.fork()
        if pid == 0:
            os._exit(0 if "otel_breaker.guards" in sys.modules else 3)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        print(loaded_before, code, "otel_breaker.guards" in sys.modules)
        """
    )
    env = {name: value for name, value in os.environ.items() if name != "OTEL_BREAKER_ENABLED"}
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "0", "True"]


def test_a_child_forked_while_a_thread_is_finding_the_guard_gets_the_guard_whole():
    """The window the storms above hit now and then, held open: a thread's first call
    imports the guard and holds the guard's module lock while the module is still being
    found, before ``sys.modules`` shows it. The fork waits for that import to end; a child
    forked in the middle of it would wait on that lock forever."""
    program = textwrap.dedent(
        """
        import importlib, importlib.abc, os, signal, sys, threading, time

        import otel_breaker

        finding, go_on = threading.Event(), threading.Event()


        class SlowToFind(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "otel_breaker.guards" and threading.current_thread() is not threading.main_thread():
                    finding.set()
                    go_on.wait(10)
                return None  # the ordinary finders find it


        sys.meta_path.insert(0, SlowToFind())
        threading.Thread(target=importlib.import_module, args=("otel_breaker.guards",), daemon=True).start()
        finding.wait(10)
        threading.Timer(0.3, go_on.set).start()  # the thread's import goes on while the process forks
        pid = os.fork()
        if pid == 0:
            from otel_breaker.guards import default_guard

            os._exit(0)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                print("exit", os.waitstatus_to_exitcode(status))
                break
            time.sleep(0.01)  # polling the child, bounded by the deadline
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            print("hung")
        """
    )
    env = {name: value for name, value in os.environ.items() if name != "OTEL_BREAKER_ENABLED"}
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["exit", "0"]


#: Modules that make a lock at module level or in an ``__init__`` with no fork handler of
#: their own, and why a child is safe all the same.
LOCKS_WITHOUT_OWN_FORK_HANDLER = {
    "otel_breaker/store/redis_feed.py": "a store's change feed: the Redis store's fork handler calls its after_fork",
    "otel_breaker/store/redis_setup.py": "a store's clients: the Redis store's fork handler calls their after_fork",
    "otel_breaker/store/redis_report.py": "a store's reporter: the Redis store's fork handler calls its after_fork",
    "otel_breaker/telemetry/metrics.py": "the telemetry's metrics: its fork handler calls their after_fork_in_child",
    "otel_breaker/board/server.py": (
        "a board server's locks belong to its serving threads; a forked child never serves on its "
        "parent's socket (the status endpoint forgets the parent's server at the fork)"
    ),
}


def test_every_module_that_keeps_a_lock_registers_a_fork_handler():
    """A lock that lives for the process (made at module level, or in an ``__init__`` of an
    object the process keeps) must be re-created in a forked child: a thread that held it
    at the fork does not exist there, and the child's first use would wait forever. Each
    module that makes one calls ``os.register_at_fork``, or says above why it need not."""
    package = Path(__file__).resolve().parent.parent / "otel_breaker"
    lock_kinds = {"Lock", "RLock", "Condition", "Semaphore", "BoundedSemaphore"}
    offenders = []
    unneeded = []
    for path in sorted(package.rglob("*.py")):
        module = path.relative_to(package.parent).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        lock_lines = []
        registers = False
        # (node, the function it is in: None at module level and in class bodies)
        pending: list[tuple[ast.AST, str | None]] = [(node, None) for node in tree.body]
        while pending:
            node, function = pending.pop()
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                owner_name = owner.id if isinstance(owner, ast.Name) else None
                if owner_name == "os" and node.func.attr == "register_at_fork":
                    registers = True
                made_here = function is None or function == "__init__"
                if owner_name == "threading" and node.func.attr in lock_kinds and made_here:
                    lock_lines.append(node.lineno)
            inner = node.name if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else function
            if isinstance(node, ast.Lambda):
                inner = "<lambda>"
            pending.extend((child, inner) for child in ast.iter_child_nodes(node))
        if lock_lines and not registers and module not in LOCKS_WITHOUT_OWN_FORK_HANDLER:
            offenders.extend(f"{module}:{line}" for line in sorted(lock_lines))
        if module in LOCKS_WITHOUT_OWN_FORK_HANDLER and (registers or not lock_lines):
            unneeded.append(module)
    for offender in offenders:
        print("lock with no fork handler:", offender)
    assert not offenders, f"locks kept with no os.register_at_fork handler in their module: {offenders}"
    assert not unneeded, f"listed as without a fork handler, but need no entry now: {unneeded}"
