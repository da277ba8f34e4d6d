"""The shared framework contract, on smolagents' real ``ToolCallingAgent`` loop."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("smolagents")
sys.path.insert(0, str(Path(__file__).parent))

from contract import FrameworkContract
from driver import SmolagentsDriver
from loop_contract import LoopContract
from run_contract import RunContract


class TestContract(FrameworkContract, LoopContract, RunContract):
    driver = SmolagentsDriver()
    guards_unknown_tools = True
