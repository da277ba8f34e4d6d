"""Stands in for a supported framework in start-up tests: importing it is what starts otel-breaker."""
