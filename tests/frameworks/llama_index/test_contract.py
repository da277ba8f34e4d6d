"""The shared framework contract, on LlamaIndex's real ``FunctionAgent`` workflow."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("llama_index.core")
sys.path.insert(0, str(Path(__file__).parent))

from contract import FrameworkContract
from driver import LlamaIndexDriver
from loop_contract import LoopContract


class TestContract(FrameworkContract, LoopContract):
    driver = LlamaIndexDriver()
