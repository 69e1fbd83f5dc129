"""Log lines an operator can search: one line each, with the run and activity they belong to.

Temporal's `workflow.logger` and `activity.logger` put the run's details on each record; the
formatters write them as `key=value` fields (or JSON) instead of a dict glued to the message. The
formatters mask the whole formatted record, exception text and traceback included: anything
shaped like an e-mail address, plain or percent-encoded, base64 that decodes to one, and the
configured secrets in those encodings. A last line of defence: code must not log them in the first
place. Libraries' own loggers (httpx logs every request URL at INFO) stay at WARNING unless asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pressroom.settings import Settings

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
# (`"a b"@example.com`) too; the Mailgun client masks its error texts with the same pattern. A local
# part starts only where a run of its characters starts (the look-behind): without it, a long run
# without `@` is scanned again from each of its characters, quadratic time on the event loop.
ADDRESS = re.compile(r"(?:\"[^\"\r\n]*\"|(?<![^\s<>\"',;:()])[^\s<>\"',;:()]+)@[^\s<>\"',;:()]+")
# An address percent-encoded once or twice (quote, quote_plus: `bob%40example.com`, `%2540`).
_ENCODED_ADDRESS = re.compile(r"(?<![\w.~/%+!*-])[\w.~/%+!*-]+%(?:25)?40[\w.~%+-]+", re.IGNORECASE)
# A run that may be base64, URL-safe (a path segment) or standard, padded or not: masked when it
# decodes to text holding an address or a secret (a Mailgun page token, an Authorization header).
_BASE64 = (re.compile(r"[A-Za-z0-9+_-]{8,}={0,2}"), re.compile(r"[A-Za-z0-9+/]{8,}={0,2}"))
# A member's link key (the hex HMAC-SHA256 of their uuid) and any other 256-bit hex digest; and the
# value of a link's `uuid` or `key`, whole or cut short (a server's error line cuts a long link),
# and any uuid given as a query value (a member's uuid is their link's identity).
_HEX_KEY = re.compile(r"(?<![0-9A-Fa-f])[0-9A-Fa-f]{64}(?![0-9A-Fa-f])")
_QUERY_START = r"(?:[?&;]|%3F|%26|%253F|%2526)"
_LINK_VALUE = re.compile(rf"({_QUERY_START}(?:uuid|key)(?:=|%3D|%253D))[^&\s'\"%]+", re.IGNORECASE)
_QUERY_UUID = re.compile(rf"({_QUERY_START}[\w.-]*(?:=|%3D|%253D))"
                         r"[0-9A-Fa-f]{8}(?:-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}", re.IGNORECASE)
# The value of a cookie, header or field whose name says it is a credential (`pressroom_session=…`,
# `Authorization: Ghost …`, `api_key=…`): a request's head that aiohttp quotes carries them. Tried
# only where a name starts (the look-behind), so a long run is scanned once.
_CREDENTIAL = r"(?:session|token|secret|passw|auth|cookie|csrf|jwt|api[_-]?key|sid)"
_CREDENTIAL_WORD = re.compile(_CREDENTIAL, re.IGNORECASE)  # most lines have none: the pattern is not tried
_NAMED_SECRET = re.compile(rf"((?<![\w-])[\w-]{{0,40}}{_CREDENTIAL}[\w-]{{0,40}}\s*[=:]\s*)"
                           r"(?:(?:Ghost|Bearer|Basic)\s+)?[^\s;&,'\"]+", re.IGNORECASE)
ADDRESS_MASK, SECRET_MASK, ENCODED_MASK = "<address>", "***", "<encoded>"
# What one line may carry of a message or an error (an outside request's text comes in them):
# masked whole up to _MASKED_AT_MOST characters, then cut to MAX_TEXT.
MAX_TEXT = 2000
_MASKED_AT_MOST = 16 * 1024
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
        text = _LINK_VALUE.sub(lambda m: f"{m.group(1)}{SECRET_MASK}", text)
        text = _QUERY_UUID.sub(lambda m: f"{m.group(1)}{SECRET_MASK}", text)
        text = _HEX_KEY.sub(SECRET_MASK, text)
        if _CREDENTIAL_WORD.search(text):
            text = _NAMED_SECRET.sub(lambda m: f"{m.group(1)}{SECRET_MASK}", text)
        text = _ENCODED_ADDRESS.sub(ADDRESS_MASK, text)
        text = ADDRESS.sub(ADDRESS_MASK, text)
        for runs in _BASE64:
            text = runs.sub(self._decoded, text)
        return text

    def bounded(self, text: str) -> str:
        """`text` masked, and cut to MAX_TEXT characters: what a line may carry of one message."""
        text = self(text[:_MASKED_AT_MOST])
        return text if len(text) <= MAX_TEXT else f"{text[:MAX_TEXT]}… (cut, {len(text) - MAX_TEXT} characters more)"

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
    """A record's exception as `Type: message` on one line (at most _MASKED_AT_MOST characters)."""
    if not record.exc_info or record.exc_info[1] is None:
        return None
    error = record.exc_info[1]
    return " ".join(f"{type(error).__name__}: {str(error)[:_MASKED_AT_MOST]}".split())


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
            # The message, then exception text and stack on lines below.
            line = super().format(record)[:_MASKED_AT_MOST * 4]
        else:
            # One line per event, even for a library's message with line breaks (the Temporal core's).
            message = record.getMessage()
            message = " ".join(line.strip() for line in message.splitlines()) if "\n" in message else message
            record.message = self._mask.bounded(message)
            record.asctime = self.formatTime(record, self.datefmt)
            line = self.formatMessage(record)
            error = error_field(record)
            if error:
                fields["error"] = repr(self._mask.bounded(error))
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
                                    "logger": record.name, "message": self._mask.bounded(record.getMessage()),
                                    **run_fields(record)}
        if record.exc_info:
            error = error_field(record)
            entry["error"] = self._mask.bounded(error) if error else None
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


def configure_from(settings: Settings, *, level: int | str | None = None) -> None:
    """`configure` from the settings: every secret they hold masked, their format and levels
    (`level` instead of PRESSROOM_LOG_LEVEL for Pressroom's own lines, when given)."""
    configure(settings.secret_values(), level or settings.log_level, settings.log_format, settings.library_log_level)


class Throttle:
    """At most one line every `every` seconds: `due()` is None while lines are held, else how many
    were held since the last line (for the line to say so)."""

    def __init__(self, every: float = 10.0) -> None:
        self._every = every
        self._last = float("-inf")
        self._held = 0

    def due(self, every: float | None = None) -> int | None:
        """`every`: this time instead of the one given at the start (a filter's, which may change)."""
        now = time.monotonic()
        if now - self._last < (self._every if every is None else every):
            self._held += 1
            return None
        self._last, held, self._held = now, self._held, 0
        return held


def since(held: int) -> str:
    return f" (and {held} more since the last such line)" if held else ""


class ThrottledLines(logging.Filter):
    """A logger's lines, each kind (its message template) at most once every `every` seconds, the
    line saying how many it stands for: a library's error line per bad request (aiohttp's) cannot
    flood the log, nor be formatted (and masked) once per request."""

    def __init__(self, every: float = 10.0) -> None:
        super().__init__()
        self.every = every
        self._kinds: dict[object, Throttle] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        throttle = self._kinds.get(record.msg)
        if throttle is None:
            if len(self._kinds) >= 100:  # templates are a library's few; anything else shares one
                throttle = self._kinds.setdefault(None, Throttle(self.every))
            else:
                throttle = self._kinds[record.msg] = Throttle(self.every)
        held = throttle.due(self.every)
        if held is None:
            return False
        if held:
            record.msg = f"{record.msg}{since(held)}"
        return True


def throttle(logger_name: str, every: float = 10.0) -> ThrottledLines:
    """Throttle a logger's lines (once per logger: a second call returns the first filter)."""
    logger = logging.getLogger(logger_name)
    for existing in logger.filters:
        if isinstance(existing, ThrottledLines):
            return existing
    throttled = ThrottledLines(every)
    logger.addFilter(throttled)
    return throttled


class MaskedLines(logging.Filter):
    """A library's lines masked when they are made, whatever handler writes them: aiohttp quotes a
    bad request's first bytes (its cookies, a link's key) in its message and its error. Such an error
    becomes `Type: text` on the line, masked; another error (a handler's bug) keeps its traceback
    for the formatter, which masks it too."""

    def __init__(self, secrets: Iterable[str] = (), quoting: tuple[type[BaseException], ...] = ()) -> None:
        super().__init__()
        self._mask = Mask(secrets)
        self._quoting = quoting

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        error = record.exc_info[1] if record.exc_info else None
        if error is not None and isinstance(error, self._quoting):
            message = f"{message}: {error_field(record)}"
            record.exc_info, record.exc_text = None, None
        record.msg, record.args = self._mask.bounded(message), ()
        return True


def mask_lines(logger_names: Iterable[str], secrets: Iterable[str] = (),
               quoting: tuple[type[BaseException], ...] = ()) -> None:
    """Mask these loggers' lines as they are made (once per logger: a second call changes nothing)."""
    for name in logger_names:
        logger = logging.getLogger(name)
        if not any(isinstance(existing, MaskedLines) for existing in logger.filters):
            logger.addFilter(MaskedLines(secrets, quoting))


class Refusals:
    """Refusals of outside requests, counted exactly by reason, and logged at most once per reason
    every `every` seconds (a line says how many it stands for): a flood of forged requests cannot
    flood the log. The reason is ours, never the request's content."""

    def __init__(self, logger: logging.Logger, what: str, every: float = 10.0) -> None:
        self._log, self._what, self._every = logger, what, every
        self.counts: Counter[str] = Counter()  # since the last `take`
        self._throttles: dict[str, Throttle] = {}

    def refused(self, reason: str, status: int) -> str:
        """Count (and maybe log) one refusal; its kind (the reason before any colon)."""
        kind = reason.split(":", 1)[0]
        self.counts[kind] += 1
        held = self._throttles.setdefault(kind, Throttle(self._every)).due()
        if held is not None:
            self._log.warning("%s refused (%d): %s%s", self._what, status, reason, since(held))
        return kind

    def take(self) -> Counter[str]:
        """The counts since the last take (to add to the database), and start again."""
        counts, self.counts = self.counts, Counter()
        return counts

    def give_back(self, counts: Counter[str]) -> None:
        self.counts.update(counts)
