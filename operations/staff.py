"""Staff who may sign in to the dashboard, and their sessions.

A password is kept as an Argon2id hash (argon2-cffi's defaults, RFC 9106's second recommendation);
a session as the SHA-256 of a random token whose only copy is the staff member's cookie. Signing in
checks a hash even for an address that is no staff's, so that a wrong address and a wrong password
take the same time and get the same answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import asyncpg
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from operations.answers import Answer, Moment
from pressroom import database
from pressroom.errors import BadInput, NotFound
from pressroom.inputs import email_address
from pressroom.settings import Settings, get_settings

SHORTEST_PASSWORD = 12
LONGEST_PASSWORD = 1024  # hashing a megabyte on every try would be a way to load the server
SESSION_HOURS = 12

_hasher = PasswordHasher()
# Checked when the address is no staff's: the same work, the same answer.
_STAND_IN_HASH = _hasher.hash(secrets.token_urlsafe(24))


class StaffMember(Answer):
    staff_id: str
    email: str
    created_at: Moment


class Session(Answer):
    """A signed-in staff member, as a request's cookie names them."""

    staff_id: str
    email: str
    expires_at: Moment


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _password(password: str) -> str:
    if len(password) < SHORTEST_PASSWORD:
        raise BadInput(f"the password has {len(password)} characters; it needs at least {SHORTEST_PASSWORD}")
    if len(password) > LONGEST_PASSWORD:
        raise BadInput(f"the password is longer than {LONGEST_PASSWORD} characters")
    return password


async def add_staff(email: str, password: str, *, settings: Settings | None = None) -> StaffMember:
    """A new staff member; an address that is already staff's is refused."""
    email, password = email_address(email), _password(password)
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        try:
            row = await conn.fetchrow(
                "INSERT INTO staff (id, email, password_hash) VALUES ($1, $2, $3) "
                "RETURNING id AS staff_id, email, created_at",
                f"staff-{secrets.token_hex(8)}", email, _hasher.hash(password))
        except asyncpg.UniqueViolationError:
            raise BadInput("that address is already staff's (`pressroom staff list`)") from None
    return StaffMember.model_validate(dict(row))


async def list_staff(*, settings: Settings | None = None) -> list[StaffMember]:
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        rows = await conn.fetch("SELECT id AS staff_id, email, created_at FROM staff ORDER BY created_at, id")
    return [StaffMember.model_validate(dict(row)) for row in rows]


async def remove_staff(email: str, *, settings: Settings | None = None) -> StaffMember:
    """Remove a staff member and end every session of theirs."""
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        row = await conn.fetchrow("DELETE FROM staff WHERE lower(email) = lower($1) "
                                  "RETURNING id AS staff_id, email, created_at", email.strip())
    if row is None:
        raise NotFound("no staff member has that address (`pressroom staff list`)")
    return StaffMember.model_validate(dict(row))


# Each verification is 0.2-0.4 s of one core's CPU: at most one fewer than the cores at once (one
# core stays the event loop's), on threads of their own (the loop's default executor also
# resolves names and serves other work).
SIGN_INS_AT_ONCE = max(1, (os.cpu_count() or 1) - 1)
_checker = ThreadPoolExecutor(max_workers=SIGN_INS_AT_ONCE, thread_name_prefix="sign-in")


class Busy(Exception):
    """As many sign-ins as allowed are being checked; this one is refused rather than queued."""


_checking = 0  # verifications under way; only the event loop's thread touches it


def _verify(password_hash: str, password: str) -> bool:
    try:
        return bool(_hasher.verify(password_hash, password))
    except (VerificationError, InvalidHashError):
        return False


async def sign_in(pool: asyncpg.Pool, email: str, password: str, *,
                  at_once: int = SIGN_INS_AT_ONCE) -> tuple[str, Session] | None:
    """(the session's token, the session) when the address and password are a staff member's; None
    otherwise, whichever was wrong. The hash is checked on a thread, at most `at_once` at a time, so
    that no other request waits on it; past that, Busy."""
    global _checking
    if not email or len(password) > LONGEST_PASSWORD or len(email) > 320:
        return None
    if _checking >= at_once:
        raise Busy("too many sign-ins are being checked at once")
    row = await pool.fetchrow("SELECT id, email, password_hash FROM staff WHERE lower(email) = lower($1)",
                              email.strip())
    # Counted from here only: a slow read of the row holds no verification's place.
    if _checking >= at_once:
        raise Busy("too many sign-ins are being checked at once")
    _checking += 1
    try:
        matched = await asyncio.get_running_loop().run_in_executor(
            _checker, _verify, row["password_hash"] if row else _STAND_IN_HASH, password)
    finally:
        _checking -= 1
    if not matched:
        return None
    if row is None:
        return None
    token = secrets.token_urlsafe(32)
    expires = datetime.now(UTC) + timedelta(hours=SESSION_HOURS)
    await pool.execute("INSERT INTO staff_sessions (token_hash, staff_id, expires_at) VALUES ($1, $2, $3)",
                       token_hash(token), row["id"], expires)
    return token, Session(staff_id=row["id"], email=row["email"], expires_at=expires)


async def session_of(pool: asyncpg.Pool, token: str | None) -> Session | None:
    """The live session the token names, or None."""
    if not token or len(token) > 100:
        return None
    row = await pool.fetchrow(
        "SELECT s.id AS staff_id, s.email, ss.expires_at FROM staff_sessions ss JOIN staff s ON s.id = ss.staff_id "
        "WHERE ss.token_hash = $1 AND ss.expires_at > now()", token_hash(token))
    return Session.model_validate(dict(row)) if row else None


async def sign_out(pool: asyncpg.Pool, token: str) -> None:
    """End the session on the server (and any expired ones while here)."""
    await pool.execute("DELETE FROM staff_sessions WHERE token_hash = $1 OR expires_at <= now()", token_hash(token))
