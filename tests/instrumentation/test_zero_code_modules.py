"""A zero-code start hooks the import of every module an adapter patches.

The switch patches a framework module by module, as each is imported; an explicit
``instrument()`` patches every target at once. A target whose module the switch does
not hook would be guarded in one mode and not in the other.
"""

from __future__ import annotations

import pytest

from otel_breaker.instrumentation import ADAPTERS, load_adapter_class
from otel_breaker.instrumentation.frameworks import target_modules


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_every_target_module_is_hooked(name):
    adapter = load_adapter_class(name)()
    hooked = set(target_modules(adapter))
    targets = {target.module for target in adapter.targets()}
    assert targets <= hooked, f"{name}: the switch would never patch {sorted(targets - hooked)}"
    assert set(adapter.modules) <= hooked
