"""The command-line tests run ``python -m otel_breaker`` in subprocesses (see cli_helpers)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
