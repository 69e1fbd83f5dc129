"""Log lines an operator can search: one line each, with the run and activity they belong to.

Temporal's `workflow.logger` and `activity.logger` put the run's details on each record; the
formatters write them as `key=value` fields (or JSON) instead of a dict glued to the message. The
formatters mask the whole formatted record, exception text and traceback included: anything
shaped like an e-mail address, plain or percent-encoded, base64 that decodes to one, and the
configured secrets in those encodings. A last line of defence: code must not log them in the first
place. Libraries' own loggers (httpx logs every request URL at INFO) stay at WARNING unless asked.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import re
import time
from collections import Counter
from collections.abc import Iterable
from urllib.parse import quote, quote_plus, unquote

# Imported here, outside any workflow sandbox: importing opentelemetry inside one reads os.environ,
# which the sandbox refuses, and the record of a workflow's log line is formatted inside it.
from opentelemetry import trace
from temporalio import activity, workflow

# Anything shaped like an e-mail address, the dotless `user@localhost` and a quoted local part
# (`"a b"@example.com`) too; the Mailgun client masks its error texts with the same pattern.
ADDRESS = re.compile(r"(?:\"[^\"\r\n]*\"|[^\s<>\"',;:()]+)@[^\s<>\"',;:()]+")
# An address percent-encoded once or twice (quote, quote_plus: `bob%40example.com`, `%2540`).
_ENCODED_ADDRESS = re.compile(r"[\w.~/%+!*-]+%(?:25)?40[\w.~%+-]+", re.IGNORECASE)
# A run that may be base64, URL-safe (a path segment) or standard, padded or not: masked when it
# decodes to text holding an address or a secret (a Mailgun page token, an Authorization header).
_BASE64 = (re.compile(r"[A-Za-z0-9+_-]{8,}={0,2}"), re.compile(r"[A-Za-z0-9+/]{8,}={0,2}"))
ADDRESS_MASK, SECRET_MASK, ENCODED_MASK = "<address>", "***", "<encoded>"
# Which details of a run each line carries, in this order.
_FIELDS = (("workflow_type", "workflow"), ("workflow_id", "workflow_id"), ("run_id", "run_id"),
           ("activity_type", "activity"), ("attempt", "attempt"))
# Loggers whose INFO lines are Pressroom's (and Temporal's) own; every other logger is a library's.
OWN_LOGGERS = ("pressroom", "temporalio", "root")


class Mask:
    """Masks addresses and the given secrets in a text, in the encodings they travel in."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        forms = set()
        for secret in (s for s in secrets if s):
            forms.update({secret, quote(secret, safe=""), quote_plus(secret)})
        self._secrets = sorted(forms, key=len, reverse=True)  # the longest form first
        self._plain = [s for s in self._secrets if len(s) >= 4]

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, SECRET_MASK)
        text = _ENCODED_ADDRESS.sub(ADDRESS_MASK, text)
        text = ADDRESS.sub(ADDRESS_MASK, text)
        for runs in _BASE64:
            text = runs.sub(self._decoded, text)
        return text

    def _decoded(self, match: re.Match[str]) -> str:
        run = match.group(0)
        for alphabet in (None, b"-_"):
            try:
                decoded = base64.b64decode(run.rstrip("=") + "=" * (-len(run.rstrip("=")) % 4), altchars=alphabet,
                                           validate=True).decode("utf-8")
            except (binascii.Error, ValueError):
                continue
            decoded = unquote(decoded)
            if ADDRESS.search(decoded) or _ENCODED_ADDRESS.search(decoded) or any(s in decoded for s in self._plain):
                return ENCODED_MASK
        return run


def mask(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` without addresses or `secrets`, in any encoding they are known to travel in."""
    return Mask(secrets)(text)


def run_fields(record: logging.LogRecord) -> dict[str, object]:
    """The run's details on a record, by the labels both formats use; the trace id when tracing."""
    details = {**getattr(record, "temporal_workflow", {}), **getattr(record, "temporal_activity", {})}
    fields = {label: details[key] for key, label in _FIELDS if details.get(key) is not None}
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        fields["trace_id"] = format(context.trace_id, "032x")
    return fields


def error_field(record: logging.LogRecord) -> str | None:
    """A record's exception as `Type: message` on one line."""
    if not record.exc_info or record.exc_info[1] is None:
        return None
    error = record.exc_info[1]
    return " ".join(f"{type(error).__name__}: {error}".split())


class RunFormatter(logging.Formatter):
    """`time level logger message workflow=… workflow_id=… run_id=… activity=… attempt=… error=…`,
    masked whole: one line per event, the traceback below it only with `tracebacks`."""

    def __init__(self, secrets: Iterable[str] = (), tracebacks: bool = False) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s", "%Y-%m-%dT%H:%M:%S%z")
        self._mask = Mask(secrets)
        self._tracebacks = tracebacks

    def format(self, record: logging.LogRecord) -> str:
        fields = dict(run_fields(record))
        if self._tracebacks:
            line = super().format(record)  # the message, then exception text and stack on lines below
        else:
            # One line per event, even for a library's message with line breaks (the Temporal core's).
            message = record.getMessage()
            record.message = " ".join(line.strip() for line in message.splitlines()) if "\n" in message else message
            record.asctime = self.formatTime(record, self.datefmt)
            line = self.formatMessage(record)
            if error_field(record):
                fields["error"] = repr(error_field(record))
        text = " ".join(f"{label}={value}" for label, value in fields.items())
        return self._mask(f"{line} {text}" if text else line)


class JsonFormatter(logging.Formatter):
    """One JSON object per line with the fields of RunFormatter: time, level, logger, message, then
    workflow, workflow_id, run_id, activity, attempt (and trace_id) when the record has them; every
    text masked before it is encoded."""

    def __init__(self, secrets: Iterable[str] = (), tracebacks: bool = False) -> None:
        super().__init__(datefmt="%Y-%m-%dT%H:%M:%S%z")
        self._mask = Mask(secrets)
        self._tracebacks = tracebacks

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {"time": self.formatTime(record, self.datefmt), "level": record.levelname,
                                    "logger": record.name, "message": record.getMessage(), **run_fields(record)}
        if record.exc_info:
            entry["error"] = error_field(record)
            if self._tracebacks:
                entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info and self._tracebacks:
            entry["stack"] = self.formatStack(record.stack_info)
        masked = {key: self._mask(value) if isinstance(value, str) else value for key, value in entry.items()}
        return json.dumps(masked, default=lambda value: self._mask(str(value)), ensure_ascii=False)


FORMATTERS = {"text": RunFormatter, "json": JsonFormatter}


class LevelByOwner(logging.Filter):
    """Pressroom's and Temporal's lines from `level`, every library's from `library_level`."""

    def __init__(self, level: int, library_level: int) -> None:
        super().__init__()
        self._level, self._library_level = level, library_level

    def filter(self, record: logging.LogRecord) -> bool:
        own = record.name.split(".", 1)[0] in OWN_LOGGERS
        return record.levelno >= (self._level if own else self._library_level)


def level_number(level: int | str) -> int:
    return level if isinstance(level, int) else logging.getLevelNamesMapping()[level.upper()]


def configure(secrets: Iterable[str] = (), level: int | str = logging.INFO, log_format: str = "text",
              library_level: int | str = logging.WARNING) -> None:
    """Structured, masked lines on stderr for the worker and the CLI, as text or JSON."""

    level, library_level = level_number(level), level_number(library_level)
    # The run's details go in fields (RunFormatter), not appended to the message as a dict.
    activity.logger.activity_info_on_message = False
    workflow.logger.workflow_info_on_message = False

    handler = logging.StreamHandler()
    # A traceback only for whoever debugs: PRESSROOM_DEBUG=1 or the DEBUG level.
    tracebacks = level <= logging.DEBUG or bool(os.environ.get("PRESSROOM_DEBUG"))
    handler.setFormatter(FORMATTERS[log_format](secrets, tracebacks=tracebacks))
    handler.addFilter(LevelByOwner(level, library_level))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(min(level, library_level))


def configure_from(settings, *, level: int | str | None = None) -> None:
    """`configure` from the settings: every secret they hold masked, their format and levels
    (`level` instead of PRESSROOM_LOG_LEVEL for Pressroom's own lines, when given)."""
    configure(settings.secret_values(), level or settings.log_level, settings.log_format, settings.library_log_level)


class Refusals:
    """Refusals of outside requests, counted exactly by reason, and logged at most once per reason
    every `every` seconds (a line says how many it stands for): a flood of forged requests cannot
    flood the log. The reason is ours, never the request's content."""

    def __init__(self, logger: logging.Logger, what: str, every: float = 10.0) -> None:

        self._log, self._what, self._every = logger, what, every
        self.counts: Counter[str] = Counter()  # since the last `take`
        self._last: dict[str, float] = {}
        self._held: Counter[str] = Counter()

    def refused(self, reason: str, status: int) -> str:
        """Count (and maybe log) one refusal; its kind (the reason before any colon)."""

        kind = reason.split(":", 1)[0]
        self.counts[kind] += 1
        now = time.monotonic()
        if now - self._last.get(kind, float("-inf")) < self._every:
            self._held[kind] += 1
            return kind
        self._last[kind] = now
        held = self._held.pop(kind, 0)
        self._log.warning("%s refused (%d): %s%s", self._what, status, reason,
                          f" (and {held} more since the last such line)" if held else "")
        return kind

    def take(self):
        """The counts since the last take (to add to the database), and start again."""

        counts, self.counts = self.counts, Counter()
        return counts

    def give_back(self, counts) -> None:
        self.counts.update(counts)
