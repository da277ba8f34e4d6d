"""The shared framework contract, on LlamaIndex's real ``FunctionAgent`` workflow."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

pytest.importorskip("llama_index.core")
sys.path.insert(0, str(Path(__file__).parent))

from contract import FrameworkContract
from driver import LlamaIndexDriver
from loop_contract import LoopContract
from run_contract import RunContract


class TestContract(FrameworkContract, LoopContract, RunContract):
    driver = LlamaIndexDriver()
    loop_calls = 8  # the workflow's own max_iterations (20) ends a longer run
    invalid_arguments: ClassVar[dict[str, Any]] = {"y": 1}  # FunctionTool checks names, not types
