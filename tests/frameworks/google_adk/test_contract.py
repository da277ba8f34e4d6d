"""The shared framework contract, on Google ADK's real agent loop."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

pytest.importorskip("google.adk")
sys.path.insert(0, str(Path(__file__).parent))

from contract import FrameworkContract
from driver import ADKDriver
from loop_contract import LoopContract
from run_contract import RunContract


class TestContract(FrameworkContract, LoopContract, RunContract):
    driver = ADKDriver()
    guards_unknown_tools = True
    # A required argument missing (the driver's tools annotate lazily, so ADK skips type checks).
    invalid_arguments: ClassVar[dict[str, Any]] = {"y": 1}
