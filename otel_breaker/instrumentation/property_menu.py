"""A tool menu a framework reads from a property: the open tools leave it.

Where a framework hands the model its tools by reading one property on every model
call (and nowhere else), that property is replaced by one that leaves the open tools
out while ``OTEL_BREAKER_HIDE_OPEN_TOOLS`` is on, and restored by ``uninstrument``
like any other patch. The framework keeps its tools: a call to a hidden one still
reaches the guard and gets the rejection. An adapter declares it with
:class:`MenuProperty`.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any, ClassVar

from otel_breaker.instrumentation.base import FrameworkAdapter, _Patched
from otel_breaker.menu import visible_tools

logger = logging.getLogger("otel_breaker")


def wrap_menu_property(
    adapter: FrameworkAdapter, owner: type, name: str, tool_name: Callable[[Any], Callable[[Any], str | None]]
) -> str | None:
    """Replace ``owner.name`` (a property) by one without the open tools; ``tool_name(obj)``
    gives the guarded name of a menu entry of ``obj``. Returns why not, or None."""
    original = owner.__dict__.get(name)
    if not isinstance(original, property) or original.fget is None:
        return "not found"
    if any(p.owner is owner and p.attribute == name for p in adapter._patched):
        return "already patched"
    fget = original.fget

    def menu(obj: Any) -> Any:
        tools = fget(obj)
        if not adapter.enabled:
            return tools
        try:
            return visible_tools(tools, tool_name(obj), agent=obj)
        except Exception:
            logger.debug("otel-breaker: %s: could not hide open tools", adapter.name, exc_info=True)
            return tools

    wrapper = property(menu, doc=original.__doc__)
    setattr(owner, name, wrapper)
    adapter._patched.append(_Patched(owner, name, original, wrapper))
    return None


def patched_with_menu(
    adapter: FrameworkAdapter,
    skipped: list[str],
    module_name: str,
    where: tuple[str, str, str],
    tool_name: Callable[[Any], Callable[[Any], str | None]],
) -> list[str]:
    """For an adapter's ``patch``/``patch_module``: once ``module_name`` is ``where``'s module
    (``(module, class, property)``), that property leaves the open tools out; ``skipped``
    gains why not, if it cannot."""
    module, owner, name = where
    if module_name != module:
        return skipped
    try:
        reason = wrap_menu_property(adapter, getattr(importlib.import_module(module), owner), name, tool_name)
    except (ImportError, AttributeError) as exc:
        reason = f"cannot import ({exc})"
    return [*skipped, f"{module}:{name}: {reason}"] if reason else skipped


class MenuProperty:
    """Mixin for a :class:`~otel_breaker.instrumentation.base.FrameworkAdapter` (before it
    in the bases) whose framework reads its menu from a property: ``menu_property``
    (``(module, class, property)``) leaves the open tools out once its module is patched;
    ``menu_tool_name(obj)`` gives the guarded name of an entry of ``obj``'s menu."""

    menu_property: ClassVar[tuple[str, str, str]]

    def menu_tool_name(self, obj: Any) -> Callable[[Any], str | None]:
        raise NotImplementedError

    def patch(self) -> list[str]:
        skipped = super().patch()  # type: ignore[misc]
        return self._with_menu(skipped, self.menu_property[0])

    def patch_module(self, module_name: str) -> list[str]:
        return self._with_menu(super().patch_module(module_name), module_name)  # type: ignore[misc]

    def _with_menu(self, skipped: list[str], module_name: str) -> list[str]:
        adapter: Any = self  # a FrameworkAdapter: the mixin comes before it in the bases
        return patched_with_menu(adapter, skipped, module_name, self.menu_property, self.menu_tool_name)
