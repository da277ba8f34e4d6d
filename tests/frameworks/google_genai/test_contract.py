"""The shared framework contract, on google-genai's automatic function calling.

google-genai has no agent: a request's function calls are keyed by the function's
name and code (and by the agent of an enclosing framework's tool call, when there
is one), so the scenarios about agent names are skipped here; the calls, spans and
rejections they also check are covered in test_google_genai.py. A name no function
has is not answered by the SDK (it raises ``KeyError`` out of the request), so there
is no unknown-tool loop to guard.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("google.genai")
sys.path.insert(0, str(Path(__file__).parent))

from contract import FrameworkContract
from driver import GoogleGenAIDriver
from loop_contract import LoopContract
from run_contract import RunContract

NO_AGENT = "google-genai has no agent: test_google_genai.py covers the calls, spans and rejections"


class TestContract(FrameworkContract, LoopContract, RunContract):
    driver = GoogleGenAIDriver()

    @pytest.mark.skip(reason=NO_AGENT)
    def test_failures_counted_once_and_model_reads_rejection(self): ...

    @pytest.mark.skip(reason=NO_AGENT)
    def test_agents_sharing_a_tool_name_do_not_share_a_breaker(self): ...

    @pytest.mark.skip(reason=NO_AGENT)
    def test_each_agent_sees_only_the_breakers_that_can_reject_its_calls(self): ...
