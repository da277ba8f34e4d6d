"""ToolCall: the one description of a tool call every layer shares."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from otel_breaker.toolcall import ToolCall


def test_constructor_takes_exactly_the_fields_with_their_defaults():
    """The hand-written constructor must follow the dataclass fields: a field added
    to one and not the other fails here."""
    parameters = list(inspect.signature(ToolCall).parameters.values())
    fields = dataclasses.fields(ToolCall)
    assert [p.name for p in parameters] == [f.name for f in fields]
    assert [p.default for p in parameters] == [
        inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default for f in fields
    ]


def test_every_field_is_set_immutable_and_compared():
    values = {f.name: f"v{i}" for i, f in enumerate(dataclasses.fields(ToolCall))}
    call = ToolCall(**values)
    assert {name: getattr(call, name) for name in values} == values
    assert call == ToolCall(**values) and hash(call) == hash(ToolCall(**values))
    assert call != ToolCall(**{**values, "source": "other"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        call.tool = "changed"  # type: ignore[misc]
    assert call.with_call_id("c2") == ToolCall(**{**values, "call_id": "c2"})
    assert ToolCall("search").framework == "python" and ToolCall("search").tool_type == "function"
