"""The shared framework contract, on ``dspy.ReAct``'s real loop."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("dspy")
sys.path.insert(0, str(Path(__file__).parent))

from contract import FrameworkContract
from driver import DSPyDriver
from loop_contract import LoopContract
from run_contract import RunContract


class TestContract(FrameworkContract, LoopContract, RunContract):
    driver = DSPyDriver()
