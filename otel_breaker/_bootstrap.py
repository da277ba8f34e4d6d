"""Start-up hook imported by ``otel_breaker.pth`` when ``OTEL_BREAKER_ENABLED`` is true.

The ``.pth`` line itself does the environment check, so a process with the
variable unset pays one dictionary lookup and imports nothing of ours. Once
enabled, this registers post-import hooks so each agent framework is patched
when, and only if, the program imports it.
"""

try:
    from otel_breaker.instrumentation.autostart import autostart

    autostart()
except Exception:  # never break the host program's start-up
    import logging

    logging.getLogger("otel_breaker").warning("otel-breaker: auto-instrumentation failed to start", exc_info=True)
