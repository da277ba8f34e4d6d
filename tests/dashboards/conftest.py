import sys
from pathlib import Path

import pytest

# Make the sibling helper module importable whatever pytest's import mode is.
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def dashboard() -> dict:
    import obs_helpers

    return obs_helpers.load_dashboard()
