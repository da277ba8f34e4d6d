"""The shared framework contract, on a Haystack Agent's real loop."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

pytest.importorskip("haystack")
sys.path.insert(0, str(Path(__file__).parent))

from contract import FrameworkContract
from driver import HaystackDriver
from loop_contract import LoopContract
from run_contract import RunContract


class TestContract(FrameworkContract, LoopContract, RunContract):
    driver = HaystackDriver()
    guards_unknown_tools = True
    invalid_arguments: ClassVar[dict[str, Any]] = {"y": 1}  # Haystack checks names, not types
