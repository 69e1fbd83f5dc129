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
        error = error_field(record)
        if error is not None:
            for secret in self._secrets:
                error = error.replace(secret, "***")
            record.error_text = ADDRESS.sub("<address>", error)
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


def error_field(record: logging.LogRecord) -> str | None:
    """The exception of a record as `Type: message` on one line (its traceback only when debugging)."""
    if not record.exc_info or record.exc_info[1] is None:
        return None
    error = record.exc_info[1]
    return " ".join(f"{type(error).__name__}: {error}".split())


class RunFormatter(logging.Formatter):
    """`time level logger message workflow=… workflow_id=… run_id=… activity=… attempt=… error=…`:
    one line per event; the traceback follows only with `tracebacks` (PRESSROOM_DEBUG=1 or DEBUG)."""

    def __init__(self, tracebacks: bool = False) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s", "%Y-%m-%dT%H:%M:%S%z")
        self.tracebacks = tracebacks

    def format(self, record: logging.LogRecord) -> str:
        if self.tracebacks:
            line = super().format(record)
        else:
            line = self.formatMessage(self._with_time(record))
        fields = dict(run_fields(record))
        if not self.tracebacks and record.exc_info:
            fields["error"] = repr(getattr(record, "error_text", None) or ADDRESS.sub("<address>", error_field(record) or ""))
        text = " ".join(f"{label}={value}" for label, value in fields.items())
        return f"{line} {text}" if text else line

    def _with_time(self, record: logging.LogRecord) -> logging.LogRecord:
        record.message = record.getMessage()
        record.asctime = self.formatTime(record, self.datefmt)
        return record


class JsonFormatter(logging.Formatter):
    """One JSON object per line with the fields of RunFormatter: time, level, logger, message, then
    workflow, workflow_id, run_id, activity, attempt (and trace_id) when the record has them."""

    def __init__(self, tracebacks: bool = False) -> None:
        super().__init__(datefmt="%Y-%m-%dT%H:%M:%S%z")
        self.tracebacks = tracebacks

    def format(self, record: logging.LogRecord) -> str:
        import json

        entry: dict[str, object] = {"time": self.formatTime(record, self.datefmt), "level": record.levelname,
                                    "logger": record.name, "message": record.getMessage(), **run_fields(record)}
        if record.exc_info:
            entry["error"] = getattr(record, "error_text", None) or ADDRESS.sub("<address>", error_field(record) or "")
            if self.tracebacks:
                entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


FORMATTERS = {"text": RunFormatter, "json": JsonFormatter}


def configure(secrets: Iterable[str] = (), level: int = logging.INFO, log_format: str = "text") -> None:
    """Structured, redacted lines on stderr for the worker and the CLI, as text or JSON."""
    from temporalio import activity, workflow

    # The run's details go in fields (RunFormatter), not appended to the message as a dict.
    activity.logger.activity_info_on_message = False
    workflow.logger.workflow_info_on_message = False
    import os

    handler = logging.StreamHandler()
    tracebacks = level <= logging.DEBUG or bool(os.environ.get("PRESSROOM_DEBUG"))
    handler.setFormatter(FORMATTERS[log_format](tracebacks=tracebacks))
    handler.addFilter(RedactingFilter(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # One line per event: not one per HTTP request to Mailgun (the send's own lines say what was sent).
    for chatty in ("httpx", "httpcore"):
        logging.getLogger(chatty).setLevel(max(level, logging.WARNING))
