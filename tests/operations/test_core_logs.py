"""The Temporal core's own warnings reach Python's logging (stderr, Pressroom's format), not stdout."""

from __future__ import annotations

import logging

from pressroom import logs
from pressroom.temporal import process_runtime, telemetry


def test_core_logs_are_forwarded_to_the_temporalio_logger_at_warn():
    config = telemetry()
    assert config.logging.forwarding is not None and config.logging.forwarding.logger.name == "temporalio.core"
    assert "temporalio_sdk_core=WARN" in config.logging.filter.formatted()
    assert process_runtime() is not None  # the process's runtime is built from it


def test_a_library_message_with_line_breaks_is_one_line():
    record = logging.LogRecord("temporalio.core.temporalio_client", logging.WARNING, __file__, 1,
                               "ResourceExhausted:\n  consistent query buffer is full\n  retrying", None, None)
    line = logs.RunFormatter().format(record)
    assert "\n" not in line and line.endswith("ResourceExhausted: consistent query buffer is full retrying")
