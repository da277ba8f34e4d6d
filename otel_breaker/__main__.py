"""``python -m otel_breaker`` runs the ``otel-breaker`` command."""

import sys

from otel_breaker.cli import main

sys.exit(main())
