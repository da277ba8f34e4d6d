"""Fixtures for the CrewAI suite: nothing leaves the machine, the scripted model is importable."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

for key, value in {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_DISABLE_TRACKING": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "OPENAI_API_KEY": "sk-local",
}.items():
    os.environ.setdefault(key, value)
