"""Small helpers shared by the verbs."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


def one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Report bad arguments as one line on stderr (exit code 2), not a usage block."""

    def error(message: str) -> NoReturn:
        sys.stderr.write(f"{parser.prog}: {message} (see --help)\n")
        sys.exit(2)

    parser.error = error  # type: ignore[method-assign]
    return parser
