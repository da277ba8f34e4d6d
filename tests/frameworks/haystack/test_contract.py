"""The shared framework contract, on a Haystack Agent's real loop."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("haystack")
sys.path.insert(0, str(Path(__file__).parent))

from contract import FrameworkContract
from driver import HaystackDriver
from loop_contract import LoopContract


class TestContract(FrameworkContract, LoopContract):
    driver = HaystackDriver()
    sees_invalid_arguments = False  # refused before the patched tool path
