"""A tool call's signature: its tool name plus its canonical arguments, hashed.

Two calls with the same signature are the same call as far as the loop guard
(:mod:`otel_breaker.loops`) is concerned: key order does not matter, a
framework's plumbing (callbacks, ids, config) is left out, size and depth are
bounded, and arguments that cannot be read give a signature too, never an error.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
from typing import Any

from otel_breaker.sanitize import bounded
from otel_breaker.toolcall import ToolCall

#: Characters of canonical arguments hashed at most; nesting followed at most this deep.
MAX_SIGNATURE_CHARS = 16_384
MAX_DEPTH = 8
MAX_ITEMS = 256
#: Characters of the last error kept (for :class:`~otel_breaker.loops.ToolLoopError`).
MAX_ERROR_CHARS = 500

# Keyword arguments that are a framework's plumbing, not the model's arguments: they
# differ per call (ids, callbacks) and would hide a repeat.
_PLUMBING = frozenset(
    {"config", "callbacks", "run_manager", "tool_call_id", "run_id", "parent_run_id", "tags", "metadata", "context"}
)


def _plain(value: Any, depth: int, budget: list[int]) -> Any:
    """A JSON-ready, bounded copy of ``value``: mappings sorted by key, objects by type name."""
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        return "…"
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, str):
        return value[:MAX_SIGNATURE_CHARS]
    if isinstance(value, (bytes, bytearray)):
        return hashlib.blake2b(bytes(value[:MAX_SIGNATURE_CHARS]), digest_size=8).hexdigest()
    if isinstance(value, dict):
        items = []
        for count, (key, item) in enumerate(value.items()):
            if count >= MAX_ITEMS:
                break
            items.append((str(key)[:256], _plain(item, depth + 1, budget)))
        return {"{}": sorted(items, key=lambda pair: pair[0])}
    if isinstance(value, (list, tuple)):
        return [_plain(item, depth + 1, budget) for item in value[:MAX_ITEMS]]
    if isinstance(value, (set, frozenset)):
        return sorted(repr(_plain(item, depth + 1, budget)) for item in list(value)[:MAX_ITEMS])
    dump = getattr(value, "model_dump", None)  # a pydantic model: its fields
    if callable(dump) and not inspect.isclass(value):
        try:
            return _plain(dump(), depth + 1, budget)
        except Exception:
            pass
    return f"<{type(value).__qualname__}>"


def signature(tool: str, arguments: Any) -> str:
    """A short hash of the tool name and its canonical arguments (never raises)."""
    try:
        text = json.dumps(_plain(arguments, 0, [4 * MAX_ITEMS]), sort_keys=True, default=str, ensure_ascii=False)
    except Exception:
        text = f"<{type(arguments).__qualname__}>"
    digest = hashlib.blake2b(digest_size=12)
    digest.update(bounded(tool).encode("utf-8", "replace"))
    digest.update(b"\0")
    digest.update(text[:MAX_SIGNATURE_CHARS].encode("utf-8", "replace"))
    return digest.hexdigest()


def arguments_of(call: ToolCall, args: tuple, kwargs: dict) -> Any:
    """The model's arguments: what the adapter described, else the call's own
    arguments without a framework's plumbing (callbacks, ids, config)."""
    if call.arguments is not None:
        return call.arguments
    return (list(args), {k: v for k, v in kwargs.items() if k not in _PLUMBING})
