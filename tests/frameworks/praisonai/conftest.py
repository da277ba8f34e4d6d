"""Fixtures for the praisonaiagents suite: a local OpenAI-compatible model and counted tools."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_openai_server import FakeOpenAI

QUIET = {"PRAISONAI_TELEMETRY_DISABLED": "true", "PRAISONAI_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}


@pytest.fixture(scope="session")
def model():
    """The scripted model every agent of the suite talks to (127.0.0.1 only)."""
    server = FakeOpenAI().start()
    saved = {k: os.environ.get(k) for k in {**server.env(), **QUIET}}
    os.environ.update({**server.env(), **QUIET})
    # praisonaiagents logs every tool failure with a traceback; the tests check outcomes instead.
    logging.getLogger("praisonaiagents").setLevel(logging.CRITICAL)
    logging.getLogger().setLevel(logging.CRITICAL)
    yield server
    server.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(autouse=True)
def fresh_model(request):
    """Each test starts with an empty request log (when it uses the model)."""
    if "model" in request.fixturenames:
        request.getfixturevalue("model").reset(calls=3)
    yield
