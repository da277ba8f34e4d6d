"""What a model's tokens cost: ``OTEL_BREAKER_PRICES`` -> USD per input and output token.

The token estimator (:mod:`otel_breaker.tokens`) prices the tokens a rejection
saved with these; the settings check the variable with the same parser, so a
bad price is reported when the environment is read, not when the first cost is
estimated. Stdlib only, below both.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from otel_breaker.sanitize import quoted

#: A price above this (USD per token) is a typo: the dearest models cost well under a cent a token.
MAX_PRICE_PER_TOKEN = 1.0
#: A price file's path is quoted whole up to this length.
MAX_PATH_CHARS = 200


@dataclass(frozen=True)
class Price:
    """USD per input and per output token of one model."""

    input: float
    output: float


def _price(model: str, input_price: Any, output_price: Any) -> Price:
    """A validated price: finite numbers, 0 <= price <= :data:`MAX_PRICE_PER_TOKEN`."""
    values = []
    for name, value in (("input", input_price), ("output", output_price)):
        if isinstance(value, bool):
            raise ValueError(f"model {quoted(model)}: {name} price {quoted(value)} is not a number")
        try:
            if isinstance(value, str) and not value.isascii():
                raise ValueError("not ASCII digits")
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"model {quoted(model)}: {name} price {quoted(value)} is not a number") from None
        if not math.isfinite(number) or not 0 <= number <= MAX_PRICE_PER_TOKEN:
            raise ValueError(
                f"model {quoted(model)}: {name} price {quoted(value)} must be a finite USD amount per token "
                f"between 0 and {MAX_PRICE_PER_TOKEN:g}"
            )
        values.append(number)
    if not model:
        raise ValueError("a price entry names no model")
    return Price(*values)


def parse_prices(raw: str | None) -> dict[str, Price]:
    """Prices from a JSON file path or an inline ``model=in:out;model2=in:out`` value.

    A JSON file maps model -> {"input": usd_per_token, "output": usd_per_token}.
    Raises ValueError naming what is wrong (NaN, infinite and negative prices included).
    """
    if not raw:
        return {}
    text = raw.strip()
    if os.path.exists(text):
        shown = quoted(text, MAX_PATH_CHARS)
        try:
            with open(text, encoding="utf-8") as handle:
                data = json.load(handle)
        except OSError as exc:
            raise ValueError(f"price file {shown}: cannot be read ({exc.strerror or exc})") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"price file {shown}: not valid JSON ({exc})") from None
        if not isinstance(data, Mapping):
            raise ValueError(f"price file {shown}: expected an object of model -> {{input, output}}")
        prices = {}
        for model, entry in data.items():
            if not isinstance(entry, Mapping) or "input" not in entry or "output" not in entry:
                raise ValueError(f"price file {shown}: model {quoted(model)} needs numeric 'input' and 'output'")
            try:
                prices[str(model)] = _price(str(model), entry["input"], entry["output"])
            except ValueError as exc:
                raise ValueError(f"price file {shown}: {exc}") from None
        return prices
    prices = {}
    for entry in filter(None, (part.strip() for part in text.split(";"))):
        model, sep, pair = entry.partition("=")
        parts = pair.split(":")
        if not sep or len(parts) != 2:
            expected = "model=usd_per_input_token:usd_per_output_token"
            raise ValueError(f"prices entry {quoted(entry)}: expected {expected}")
        try:
            prices[model.strip()] = _price(model.strip(), parts[0].strip(), parts[1].strip())
        except ValueError as exc:
            raise ValueError(f"prices entry {quoted(entry)}: {exc}") from None
    return prices
