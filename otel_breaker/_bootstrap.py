"""Start-up hook run by ``otel_breaker.pth`` in every Python process.

It must cost next to nothing when ``OTEL_BREAKER_ENABLED`` is unset: one
environment lookup, no imports beyond ``os``. When set, it registers post-import
hooks so each agent framework is patched when, and only if, it is imported.
"""

import os

if os.environ.get("OTEL_BREAKER_ENABLED", "").strip().lower() in ("1", "true", "yes", "on"):
    try:
        from otel_breaker.instrumentation.autostart import autostart

        autostart()
    except Exception:  # never break the host program's start-up
        import logging

        logging.getLogger("otel_breaker").warning("otel-breaker: auto-instrumentation failed to start", exc_info=True)
