"""Small helpers shared by the verbs."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import NoReturn


def one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Report bad arguments as one line on stderr (exit code 2), not a usage block."""

    def error(message: str) -> NoReturn:
        sys.stderr.write(f"{parser.prog}: {message} (see --help)\n")
        sys.exit(2)

    parser.error = error  # type: ignore[method-assign]
    return parser


def number(
    kind: type, what: str, *, low: float = -math.inf, high: float = math.inf, unit: str = ""
) -> Callable[[str], int | float]:
    """An argparse ``type`` for one number of ``kind`` in ``[low, high]``.

    Messages name ``what`` was expected: "expected a whole number", then the range.
    ``unit`` is a suffix users may write (``30s``).
    """
    bounds = f"{what} {low:g} to {high:g}" if high != math.inf else f"{what} >= {low:g}"

    def parse(raw: str) -> int | float:
        try:
            value = kind(raw.strip().removesuffix(unit) if unit else raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {raw!r}") from None
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"expected {bounds}, got {raw}")
        return value

    return parse


def number_list(kind: type, what: str, *, low: float = -math.inf, unit: str = "") -> Callable[[str], tuple]:
    """An argparse ``type`` for comma-separated numbers, each ``>= low``."""
    one = number(kind, what, low=low, unit=unit)

    def parse(raw: str) -> tuple:
        try:
            values = tuple(one(item) for item in raw.split(",") if item.strip())
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"expected {what} >= {low:g} separated by commas, got {raw!r}") from None
        if not values:
            raise argparse.ArgumentTypeError(f"expected {what} separated by commas, got {raw!r}")
        return values

    return parse
