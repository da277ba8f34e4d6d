"""Start worker processes, release them at once, collect their results."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

WORKER = Path(__file__).with_name("worker.py")


def run_workers(control, control_url: str, scenario: str, options: list[dict], timeout: float = 60.0) -> list[dict]:
    """Run one worker per options dict; they start together once all are ready."""
    run = uuid.uuid4().hex[:8]
    keys = {"ready_key": f"run:{run}:ready", "go_key": f"run:{run}:go", "reached_key": f"run:{run}:reached"}
    processes = []
    for opts in options:
        payload = json.dumps({**opts, **keys, "control_url": control_url})
        processes.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), scenario, payload],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    deadline = time.monotonic() + timeout
    try:
        while int(control.get(keys["ready_key"]) or 0) < len(processes):  # bounded polling for real processes
            for process in processes:
                if process.poll() is not None:
                    raise AssertionError(f"worker exited early: {process.stderr.read()}")
            if time.monotonic() > deadline:
                raise AssertionError("workers did not get ready")
            time.sleep(0.01)
        control.set(keys["go_key"], 1)
        results = []
        for process in processes:
            out, err = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
            assert process.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    reached = int(control.get(keys["reached_key"]) or 0)
    by_tool = {k.decode(): int(v) for k, v in control.hgetall(keys["reached_key"] + ":tools").items()}
    for result in results:
        result["_reached_total"] = reached
        result["_reached_by_tool"] = by_tool
    return results
