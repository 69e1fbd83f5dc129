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

# Anything shaped like an e-mail address, the dotless `user@localhost` too; the Mailgun client
# masks its error texts with the same pattern.
ADDRESS = re.compile(r"[^\s<>\"',;:()]+@[^\s<>\"',;:()]+")
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
        record.msg, record.args = ADDRESS.sub("<address>", message), None
        return True


def run_fields(record: logging.LogRecord) -> dict[str, object]:
    """The run's details on a record, by the labels both formats use; the trace id when tracing."""
    details = {**getattr(record, "temporal_workflow", {}), **getattr(record, "temporal_activity", {})}
    fields = {label: details[key] for key, label in _FIELDS if details.get(key) is not None}
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        fields["trace_id"] = format(context.trace_id, "032x")
    return fields


class RunFormatter(logging.Formatter):
    """`time level logger message workflow=… workflow_id=… run_id=… activity=… attempt=…`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s", "%Y-%m-%dT%H:%M:%S%z")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = " ".join(f"{label}={value}" for label, value in run_fields(record).items())
        return f"{line} {fields}" if fields else line


class JsonFormatter(logging.Formatter):
    """One JSON object per line with the fields of RunFormatter: time, level, logger, message, then
    workflow, workflow_id, run_id, activity, attempt (and trace_id) when the record has them."""

    def __init__(self) -> None:
        super().__init__(datefmt="%Y-%m-%dT%H:%M:%S%z")

    def format(self, record: logging.LogRecord) -> str:
        import json

        entry: dict[str, object] = {"time": self.formatTime(record, self.datefmt), "level": record.levelname,
                                    "logger": record.name, "message": record.getMessage(), **run_fields(record)}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


FORMATTERS = {"text": RunFormatter, "json": JsonFormatter}


def configure(secrets: Iterable[str] = (), level: int = logging.INFO, log_format: str = "text") -> None:
    """Structured, redacted lines on stderr for the worker and the CLI, as text or JSON."""
    from temporalio import activity, workflow

    # The run's details go in fields (RunFormatter), not appended to the message as a dict.
    activity.logger.activity_info_on_message = False
    workflow.logger.workflow_info_on_message = False
    handler = logging.StreamHandler()
    handler.setFormatter(FORMATTERS[log_format]())
    handler.addFilter(RedactingFilter(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
