"""PostgreSQL access: the connection pool every activity shares, and schema migrations."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from importlib import resources
from urllib.parse import parse_qs, urlsplit

import asyncpg

from pressroom import tracing

log = logging.getLogger(__name__)

# Any constant shared by every Pressroom process: it serialises migrations across processes.
MIGRATION_LOCK_ID = 7_201_947_113


class DatabaseUnavailable(Exception):
    """PostgreSQL cannot be reached; the message names the host, never the password."""


def describe_url(url: str) -> str:
    """The URL without its password, for messages."""

    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.username + '@' if parts.username else ''}{host}{port}{parts.path}"


# The URL's (and libpq's variables') files of its TLS: a missing one is named, not taken for a bad URL.
_TLS_FILES = (("sslrootcert", "PGSSLROOTCERT"), ("sslcert", "PGSSLCERT"), ("sslkey", "PGSSLKEY"))


def _missing_tls_file(url: str) -> str | None:
    """The first TLS file the URL (or its variable) names that cannot be read, as `sslrootcert FILE`."""
    query = parse_qs(urlsplit(url).query)
    for parameter, variable in _TLS_FILES:
        named = (query.get(parameter) or [os.environ.get(variable, "")])[0]
        if named and not os.access(named, os.R_OK):
            return f"{parameter} {named}"
    return None


async def _connecting(url: str, opening):
    """Await a connection attempt; a failure is one line naming the server, never the password."""
    try:
        return await opening
    except (FileNotFoundError, PermissionError) as error:
        missing = _missing_tls_file(url)
        if missing is None:
            raise DatabaseUnavailable(
                f"cannot connect to PostgreSQL at {describe_url(url)}: {error.__class__.__name__}: {error}") from None
        raise DatabaseUnavailable(f"DATABASE_URL's {missing} does not exist or cannot be read: give the TLS "
                                  "file's path (readable by this user)") from None
    except (OSError, asyncpg.PostgresError, TimeoutError) as error:
        raise DatabaseUnavailable(
            f"cannot connect to PostgreSQL at {describe_url(url)}: {error.__class__.__name__}: {error}"
        ) from None
    except asyncpg.ClientConfigurationError as error:
        if "root certificate" in str(error):  # sslmode verify-ca or verify-full, and no sslrootcert
            raise DatabaseUnavailable(
                f"DATABASE_URL's sslmode checks the server's certificate, but no root certificate was given: {error}; "
                "name the CA's certificate with sslrootcert=FILE in DATABASE_URL") from None
        raise DatabaseUnavailable(f"DATABASE_URL cannot be used: {error}") from None
    except ValueError as error:  # asyncpg rejects a malformed URL with ValueError
        raise DatabaseUnavailable(f"DATABASE_URL is malformed: {error}") from None


# Read here, not through Settings, because every connection made (commands, tests, benches) takes it;
# Settings declares and validates the same variable.
POOLER_VARIABLE = "PRESSROOM_DATABASE_POOLER"


def statement_cache_size() -> int:
    """0 behind a transaction pooler (PgBouncer's pool_mode=transaction): each transaction may land on
    another server connection, where asyncpg's named prepared statements are missing or already exist
    (DuplicatePreparedStatementError). Otherwise asyncpg's default."""
    return 0 if os.environ.get(POOLER_VARIABLE, "none").strip() == "transaction" else 100


def _connection_class() -> type[asyncpg.Connection]:

    # With tracing on, each statement is a span of the activity or command that runs it.
    return tracing.traced_connection_class() if tracing.enabled() else asyncpg.Connection


async def _keep_session(conn: asyncpg.Connection) -> None:
    """A released connection's reset, past what asyncpg always does (roll back an open transaction,
    drop its listeners): nothing. Its default reset query (unlock advisory locks, CLOSE ALL, UNLISTEN,
    RESET ALL) is one more round trip on every release, a large share of a short activity's cost,
    for session state Pressroom never leaves on a pooled connection: no SET, LISTEN or session
    advisory lock goes through a pool (those use a connection of their own), and cursors end with
    their transaction."""


async def connect(url: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    """A pool on DATABASE_URL."""
    return await _connecting(url, asyncpg.create_pool(url, min_size=min_size, max_size=max_size, timeout=10,
                                                      command_timeout=300, connection_class=_connection_class(),
                                                      reset=_keep_session,
                                                      statement_cache_size=statement_cache_size()))


async def connect_once(url: str) -> asyncpg.Connection:
    """One connection on DATABASE_URL, for commands that make a few queries and leave."""
    return await _connecting(url, asyncpg.connect(url, timeout=10, connection_class=_connection_class(),
                                                        statement_cache_size=statement_cache_size()))


# A server that calls the operations (the dashboard's pages) lends them its pool for the request,
# instead of each opening a connection of its own: the operations leave no session state behind.
_LENT_POOL: ContextVar[asyncpg.Pool | None] = ContextVar("pressroom_lent_pool", default=None)


@contextmanager
def pool_lent(pool: asyncpg.Pool) -> Iterator[None]:
    """Within the block (this task and those it starts), `connection()` borrows from `pool`."""
    token = _LENT_POOL.set(pool)
    try:
        yield
    finally:
        _LENT_POOL.reset(token)


@asynccontextmanager
async def connection(url: str, pool: asyncpg.Pool | None = None) -> AsyncIterator[asyncpg.Connection]:
    """One connection for a command's few queries, closed when the block ends; or borrowed from
    `pool` (a server's, passed by the caller) or the pool lent to this task, and given back."""
    lent = pool if pool is not None else _LENT_POOL.get()
    if lent is not None:
        async with lent.acquire() as borrowed:
            yield borrowed
        return
    conn = await connect_once(url)
    try:
        yield conn
    finally:
        await conn.close()


def migrations() -> list[tuple[str, str]]:
    """(version, sql) for every file in schema/, in order of name."""
    files = sorted((f for f in resources.files("schema").iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)
    return [(f.name.removesuffix(".sql"), f.read_text()) for f in files]


async def migrate(url: str) -> list[str]:
    """Apply the migrations not yet applied, each once, and return their versions.

    Each migration runs in a transaction of its own that first takes a transaction-level advisory
    lock, so concurrent runs are safe (the second waits, then finds the version applied) through a
    transaction pooler too, which keeps no session lock. Each migration commits with its version row,
    so a failure leaves no half-applied file.
    """
    conn = await connect_once(url)
    try:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_ID)
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())")
        done = []
        for version, sql in migrations():
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_ID)
                if await conn.fetchval("SELECT 1 FROM schema_migrations WHERE version = $1", version):
                    continue
                await conn.execute(sql)
                await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", version)
            log.info("applied migration %s", version)
            done.append(version)
        return done
    finally:
        await conn.close()
