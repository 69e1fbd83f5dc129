"""Log lines an operator can search: one line each, with the run and activity they belong to.

Temporal's `workflow.logger` and `activity.logger` put the run's details on each record; this
formatter writes them as `key=value` fields instead of a dict glued to the message. A filter
masks anything shaped like an e-mail address and the configured secrets, as a last line of
defence: code must not log them in the first place.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

_ADDRESS = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
# Which details of a run each line carries, in this order.
_FIELDS = (("workflow_type", "workflow"), ("workflow_id", "workflow_id"), ("run_id", "run_id"),
           ("activity_type", "activity"), ("attempt", "attempt"))


class RedactingFilter(logging.Filter):
    """Replaces e-mail addresses and the given secrets in every record's final message."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self._secrets = [s for s in secrets if s]

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        for secret in self._secrets:
            message = message.replace(secret, "***")
        record.msg, record.args = _ADDRESS.sub("<address>", message), None
        return True


class RunFormatter(logging.Formatter):
    """`time level logger message workflow=… workflow_id=… run_id=… activity=… attempt=…`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s", "%Y-%m-%dT%H:%M:%S%z")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        details = {**getattr(record, "temporal_workflow", {}), **getattr(record, "temporal_activity", {})}
        fields = " ".join(f"{label}={details[key]}" for key, label in _FIELDS if details.get(key) is not None)
        return f"{line} {fields}" if fields else line


def configure(secrets: Iterable[str] = (), level: int = logging.INFO) -> None:
    """Structured, redacted lines on stderr for the worker and the CLI."""
    from temporalio import activity, workflow

    # The run's details go in fields (RunFormatter), not appended to the message as a dict.
    activity.logger.activity_info_on_message = False
    workflow.logger.workflow_info_on_message = False
    handler = logging.StreamHandler()
    handler.setFormatter(RunFormatter())
    handler.addFilter(RedactingFilter(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
