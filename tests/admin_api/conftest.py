"""The front door with its Admin API on a free port, an integration's key, and tokens signed as
the reference platform's client signs them (PyJWT here; the npm client in test_js_client.py)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import httpx
import jwt
import pytest

from operations.integrations import add_integration
from pressroom.settings import Settings
from tests.conftest import make_settings
from tests.frontdoor.conftest import RunningDoor, close_door, open_door

API = "/ghost/api/admin/"


def token(key: str, *, audience: str | list[str] = "/admin/", iat: float | None = None, lifetime: float = 300,
          alg: str = "HS256", kid: str | None = None, secret: bytes | None = None, claims: dict | None = None) -> str:
    key_id, hex_secret = key.split(":")
    now = int(time.time()) if iat is None else int(iat)
    payload = {"iat": now, "exp": now + int(lifetime), "aud": audience, **(claims or {})}
    return jwt.encode(payload, secret if secret is not None else bytes.fromhex(hex_secret), algorithm=alg,
                      headers={"kid": key_id if kid is None else kid})


@pytest.fixture
def api_settings(postgres_url, mailgun, db) -> Settings:
    return make_settings(postgres_url, mailgun, webhook_signing_key=mailgun.webhook_signing_key)


@pytest.fixture
async def admin_door(api_settings: Settings) -> AsyncIterator[RunningDoor]:
    running = await open_door(api_settings)
    try:
        yield running
    finally:
        await close_door(running)


@pytest.fixture
async def admin_key(api_settings: Settings) -> str:
    return (await add_integration("Tests", settings=api_settings)).admin_api_key


@pytest.fixture
async def api(admin_door: RunningDoor, admin_key: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client whose every request carries a fresh token, as the reference's client does."""
    async def sign(request: httpx.Request) -> None:
        request.headers["Authorization"] = f"Ghost {token(admin_key)}"

    async with httpx.AsyncClient(base_url=admin_door.base + API, event_hooks={"request": [sign]},
                                 timeout=30) as client:
        yield client
