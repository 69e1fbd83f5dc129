"""Every failure a command can meet, as the one line an operator reads (and its exit status).

The command line (and anything else that reports to a person) asks `explain` what to print. It
knows the services' own errors — Temporal's RPC statuses, PostgreSQL's SQLSTATE classes, refused or
lost connections — and says which service, where, what it answered and what to check.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg
from temporalio.client import WorkflowFailureError
from temporalio.service import RPCError

from commands import EXIT_ERROR
from pressroom.database import DatabaseUnavailable, describe_url
from pressroom.errors import DevStackError, PressroomError, one_line
from pressroom.settings import ConfigurationError, Settings, get_settings
from pressroom.temporal import TemporalUnavailable, describe_rpc_error


@dataclass(frozen=True)
class Failure:
    line: str
    status: int = EXIT_ERROR


def _settings() -> Settings | None:
    try:
        return get_settings()
    except ConfigurationError:
        return None


def _postgres_where(settings: Settings | None) -> str:
    return f" at {describe_url(settings.database_url)}" if settings and settings.database_url else ""


def explain(error: BaseException) -> Failure:
    """One line and an exit status for any exception a command raised."""
    if isinstance(error, (PressroomError, ConfigurationError, DatabaseUnavailable, TemporalUnavailable,
                          DevStackError)):
        return Failure(one_line(str(error)))
    settings = _settings()
    if isinstance(error, RPCError):
        if settings is None:
            return Failure(one_line(f"Temporal refused the call: {error}"))
        return Failure(one_line(describe_rpc_error(error, settings)))
    if isinstance(error, WorkflowFailureError):
        cause = error.cause
        return Failure(one_line(f"the workflow failed: {getattr(cause, 'message', None) or cause or error}"))
    if isinstance(error, asyncpg.UndefinedTableError):
        return Failure(one_line(f"PostgreSQL{_postgres_where(settings)} has no table the command needs "
                                f"({error}); run `pressroom migrate`"))
    if isinstance(error, asyncpg.PostgresError):
        return Failure(one_line(f"PostgreSQL{_postgres_where(settings)} refused the command: "
                                f"{type(error).__name__} (SQLSTATE {error.sqlstate}): {error}"))
    if isinstance(error, asyncpg.InterfaceError):
        return Failure(one_line(f"the connection to PostgreSQL{_postgres_where(settings)} failed: "
                                f"{type(error).__name__}: {error}"))
    if isinstance(error, ConnectionError):
        return Failure(one_line(f"a connection failed ({type(error).__name__}: {error}); "
                                "run `pressroom check` to see which service"))
    if isinstance(error, TimeoutError):
        return Failure(one_line(f"a service did not answer in time ({error or 'timeout'}); "
                                "run `pressroom check` to see which"))
    if isinstance(error, OSError):
        return Failure(one_line(f"{error.strerror or type(error).__name__}"
                                f"{': ' + str(error.filename) if error.filename else ''}"))
    # A fault of Pressroom itself: still one line, with the way to the traceback.
    return Failure(one_line(f"unexpected {type(error).__name__}: {error} "
                            "(set PRESSROOM_DEBUG=1 to see the traceback, and please report it)"))
