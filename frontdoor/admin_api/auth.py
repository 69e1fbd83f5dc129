"""The Admin API's tokens, checked as the reference platform checks them (its
services/auth/api-key/admin.js), with PyJWT.

`Authorization: Ghost {jwt}`: HS256 only; header `kid` names an admin key (api_keys); the payload
has `iat` and `exp`, at most 5 minutes apart and `iat` not older than 5 minutes (the reference's
maxAge); `aud` ends in `admin/` as the reference's `/?admin/?$` requires; the signature is an HMAC
with the key's secret, hex decoded. Every refusal is an ApiError with the reference's message; its
reason is counted and logged (never the token, never the key). Repeated failures from one address
are answered more and more slowly.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import OrderedDict
from dataclasses import dataclass

import jwt

from frontdoor.admin_api.envelope import ApiError

MAX_AGE_SECONDS = 300
LEEWAY_SECONDS = 10  # clocks differ a little; a token from further in the future is refused
_AUDIENCE = re.compile(r"/?admin/?$")
_KID = re.compile(r"[0-9a-f]{24}")


@dataclass(frozen=True)
class Caller:
    key_id: str
    integration_id: str | None


def _unauthorized(message: str, reason: str, code: str = "INVALID_JWT") -> ApiError:
    return ApiError(401, "UnauthorizedError", message, code=code, reason=reason)


def token_of(header: str | None) -> str:
    if not header:
        raise ApiError(403, "NoPermissionError", "Authorization failed",
                       context="Unable to determine the authenticated user or integration. "
                               "Send an Admin API token: `Authorization: Ghost {token}`.", reason="no token")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "ghost" or not token.strip():
        raise _unauthorized('Authorization header format is "Authorization: Ghost [token]"', "header format",
                            "INVALID_AUTH_HEADER")
    return token.strip()


async def authenticate(pool, header: str | None, now: float | None = None) -> Caller:
    """The key the request's token was signed with, or ApiError (401, or 400 for a token that is
    not a JWT at all, as the reference answers)."""
    token = token_of(header)
    try:
        head = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise ApiError(400, "BadRequestError", "Invalid token", code="INVALID_JWT", reason="not a jwt") from None
    kid = head.get("kid")
    if not kid:
        raise ApiError(400, "BadRequestError", "Admin API kid missing.", code="MISSING_ADMIN_API_KID",
                       reason="kid missing")
    if head.get("alg") != "HS256":
        raise _unauthorized("Invalid token: invalid algorithm", "algorithm")
    if not isinstance(kid, str) or not _KID.fullmatch(kid):
        raise _unauthorized("Unknown Admin API Key", "unknown kid", "UNKNOWN_ADMIN_API_KEY")
    key = await pool.fetchrow("SELECT id, type, secret, integration_id FROM api_keys WHERE id = $1", kid)
    if key is None:
        raise _unauthorized("Unknown Admin API Key", "unknown kid", "UNKNOWN_ADMIN_API_KEY")
    if key["type"] != "admin":
        raise _unauthorized("Invalid API Key type", "key type", "INVALID_API_KEY_TYPE")
    verify(token, bytes.fromhex(key["secret"]), now)
    return Caller(key_id=key["id"], integration_id=key["integration_id"])


def verify(token: str, secret: bytes, now: float | None = None) -> dict:
    """The token's claims if it is signed with `secret` and valid now; else the reference's 401."""
    now = time.time() if now is None else now
    try:
        claims = jwt.decode(token, secret, algorithms=["HS256"], leeway=LEEWAY_SECONDS,
                            options={"require": ["iat", "exp"], "verify_aud": False, "verify_exp": False,
                                     "verify_iat": False, "verify_nbf": False})
    except jwt.InvalidSignatureError:
        raise _unauthorized("Invalid token: invalid signature", "signature") from None
    except jwt.InvalidAlgorithmError:
        raise _unauthorized("Invalid token: invalid algorithm", "algorithm") from None
    except jwt.MissingRequiredClaimError as error:
        raise _unauthorized(f"Invalid token: {error.claim} required", "claims") from None
    except jwt.PyJWTError:
        raise _unauthorized("Invalid token", "malformed") from None
    iat, exp = claims["iat"], claims["exp"]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (iat, exp)):
        raise _unauthorized("Invalid token: iat and exp must be numbers", "claims")
    if iat > now + LEEWAY_SECONDS:
        raise _unauthorized("Invalid token: jwt issued in the future", "future")
    if exp <= now - LEEWAY_SECONDS:
        raise _unauthorized("Invalid token: jwt expired", "expired")
    if now - iat > MAX_AGE_SECONDS + LEEWAY_SECONDS:
        raise _unauthorized("Invalid token: maxAge exceeded", "expired")
    if exp - iat > MAX_AGE_SECONDS:
        raise _unauthorized("Invalid token: exp must be at most 5 minutes after iat", "lifetime")
    nbf = claims.get("nbf")
    if isinstance(nbf, (int, float)) and nbf > now + LEEWAY_SECONDS:
        raise _unauthorized("Invalid token: jwt not active", "future")
    audience = claims.get("aud")
    audiences = audience if isinstance(audience, list) else [audience]
    if not any(isinstance(a, str) and _AUDIENCE.search(a) for a in audiences):
        raise _unauthorized("Invalid token: jwt audience invalid. expected: /admin/", "audience")
    return claims


class Slowdown:
    """Failures per address in a sliding minute; past `free` of them, each further failure is
    answered after a delay that doubles (at most `most` seconds). Bounded memory: the oldest
    addresses are forgotten first."""

    def __init__(self, free: int = 5, window: float = 60.0, most: float = 8.0, remembered: int = 10_000) -> None:
        self.free, self.window, self.most, self.remembered = free, window, most, remembered
        self._failures: OrderedDict[str, list[float]] = OrderedDict()

    def failed(self, address: str) -> float:
        """Record a failure; the seconds to wait before answering it."""
        now = time.monotonic()
        recent = [t for t in self._failures.pop(address, []) if now - t < self.window]
        recent.append(now)
        self._failures[address] = recent[-64:]
        while len(self._failures) > self.remembered:
            self._failures.popitem(last=False)
        over = len(recent) - self.free
        return 0.0 if over <= 0 else min(0.25 * 2 ** (over - 1), self.most)

    async def wait(self, address: str) -> None:
        delay = self.failed(address)
        if delay:
            await asyncio.sleep(delay)
