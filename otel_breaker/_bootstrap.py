"""Start-up hook run by ``otel_breaker.pth`` when ``OTEL_BREAKER_ENABLED`` is true.

Every Python process of the environment runs it (``pip`` too), so it does
almost nothing: it puts one meta-path finder in front of the import system
that finds nothing and only notices the first import of a supported agent
framework. Only then is otel-breaker itself imported, its configuration read
(one log line per bad ``OTEL_BREAKER_*`` value) and the framework's tool
calls patched. A process that never imports a framework pays for this module
and one string check per import; nothing of OpenTelemetry, asyncio or
packaging is imported.

The ``.pth`` line executes this file by path rather than importing it, so the
``otel_breaker`` package (which imports OpenTelemetry) is not loaded at
start-up. It therefore imports nothing but ``sys`` (and ``os``, which ``site``
has loaded already), reads the list of frameworks from ``catalogue.py`` the
same way (that module imports nothing), and any failure is one line on stderr, never a traceback in the user's process.
"""

import sys


def _watched_modules() -> frozenset:
    """The catalogue's ``WATCHED_MODULES``: ``catalogue.py`` (next to this file) run by
    path from its cached bytecode, as the ``.pth`` line runs this file, because importing
    ``otel_breaker.catalogue`` would import the package. The catalogue imports nothing."""
    import os  # loaded already: ``site`` imports it

    path = os.path.join(os.path.dirname(globals().get("__file__") or ""), "catalogue.py")
    loader = sys.modules["_frozen_importlib_external"].SourceFileLoader("otel_breaker.catalogue", path)
    table = {"__name__": "otel_breaker.catalogue", "__file__": path}
    exec(loader.get_code("otel_breaker.catalogue"), table)
    return table["WATCHED_MODULES"]


#: Modules whose import means a supported framework is being loaded: every entry's
#: ``imports`` in ``otel_breaker/catalogue.py``, the one list of frameworks.
FRAMEWORK_MODULES = _watched_modules()


class FrameworkImportWatch:
    """A meta-path finder that finds nothing: on the first import of a
    supported framework it starts otel-breaker, then stays out of the way."""

    otel_breaker_watch = True  # marker: installed once, whichever copy of this module installs it

    def __init__(self) -> None:
        self.fired = False

    def find_spec(self, fullname, path=None, target=None):
        if self.fired or fullname not in FRAMEWORK_MODULES:
            return None
        self.fired = True  # before starting: our own imports must not start it again
        before = list(sys.meta_path)
        activate()
        # Starting may put finders in front of this one (the post-import hooks that
        # patch the framework): the import in progress has already passed that
        # position, so they are asked here, or this very module would escape them.
        for finder in sys.meta_path:
            if finder is self:
                break
            if finder in before or not hasattr(finder, "find_spec"):
                continue
            try:
                spec = finder.find_spec(fullname, path, target)
            except Exception:
                continue
            if spec is not None:
                return spec
        return None


def activate() -> None:
    """Start otel-breaker (idempotent); a failure is one line on stderr."""
    try:
        from otel_breaker.instrumentation.autostart import autostart

        autostart()
    except Exception as exc:  # never break the host program
        from otel_breaker.sanitize import log_line

        sys.stderr.write(
            log_line(f"otel-breaker: auto-instrumentation failed to start: {type(exc).__name__}: {exc}") + "\n"
        )


def _disabled_by_launcher_variable() -> bool:
    import os

    names = os.environ.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "")
    return "otel_breaker" in (name.strip() for name in names.split(","))


def install() -> None:
    """Put the watch in front of the import system (once per process)."""
    if _disabled_by_launcher_variable():
        return
    if any(getattr(finder, "otel_breaker_watch", False) for finder in sys.meta_path):
        return
    watch = FrameworkImportWatch()
    sys.meta_path.insert(0, watch)
    if any(name in sys.modules for name in FRAMEWORK_MODULES):  # imported before us: start now
        watch.fired = True
        activate()


install()
