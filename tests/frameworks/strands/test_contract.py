"""The shared framework contract, on Strands Agents' real agent loop."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("strands")
sys.path.insert(0, str(Path(__file__).parent))

from contract import FrameworkContract
from driver import StrandsDriver
from loop_contract import LoopContract
from run_contract import RunContract


class TestContract(FrameworkContract, LoopContract, RunContract):
    driver = StrandsDriver()
    guards_unknown_tools = True
