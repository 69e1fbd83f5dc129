"""Every way an Admin API token can be wrong is refused with the reference's 401 (or its 400 for a
token that is not one), counted, and answered more slowly when one address keeps failing."""

from __future__ import annotations

import time

import httpx
import jwt
import pytest

from frontdoor.admin_api.auth import Slowdown
from operations.integrations import add_integration, list_integrations, remove_integration
from tests.admin_api.conftest import API, token


async def get(door, authorization: str | None, path: str = "site/") -> httpx.Response:
    headers = {"Authorization": authorization} if authorization is not None else {}
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.get(door.base + API + path, headers=headers)


def error_of(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"errors"} and len(body["errors"]) == 1
    error = body["errors"][0]
    assert {"message", "context", "type"} <= set(error)
    return error


async def test_a_good_token_reads_the_site(admin_door, admin_key):
    response = await get(admin_door, f"Ghost {token(admin_key)}")
    assert response.status_code == 200
    assert response.json()["site"]["url"].startswith("http")
    assert "access-control-allow-origin" not in response.headers  # CORS closed


async def test_a_versioned_audience_is_accepted_as_the_reference_accepts_it(admin_door, admin_key):
    for audience in ("/admin/", "admin", "/v5/admin/", ["/admin/"]):
        assert (await get(admin_door, f"Ghost {token(admin_key, audience=audience)}")).status_code == 200


@pytest.mark.parametrize("case, expected", [
    ("wrong signature", "Invalid token: invalid signature"),
    ("expired", "Invalid token: jwt expired"),
    ("future", "Invalid token: jwt issued in the future"),
    ("too long a lifetime", "Invalid token: exp must be at most 5 minutes after iat"),
    ("old iat", "Invalid token: maxAge exceeded"),
    ("wrong audience", "Invalid token: jwt audience invalid. expected: /admin/"),
    ("no audience", "Invalid token: jwt audience invalid. expected: /admin/"),
    ("unknown kid", "Unknown Admin API Key"),
    ("HS512", "Invalid token: invalid algorithm"),
    ("none", "Invalid token: invalid algorithm"),
    ("no exp", "Invalid token: exp required"),
    ("scheme", 'Authorization header format is "Authorization: Ghost [token]"'),
])
async def test_each_wrong_token_is_refused_with_401(admin_door, admin_key, case, expected):
    now = time.time()
    key_id, secret = admin_key.split(":")
    wrong = {
        "wrong signature": lambda: token(admin_key, secret=bytes.fromhex("ab" * 32)),
        "expired": lambda: token(admin_key, iat=now - 400, lifetime=300),
        "future": lambda: token(admin_key, iat=now + 120, lifetime=60),
        "too long a lifetime": lambda: token(admin_key, lifetime=3600),
        "old iat": lambda: token(admin_key, iat=now - 600, lifetime=300, claims={"exp": int(now) + 60}),
        "wrong audience": lambda: token(admin_key, audience="/content/"),
        "no audience": lambda: jwt.encode({"iat": int(now), "exp": int(now) + 300}, bytes.fromhex(secret),
                                          algorithm="HS256", headers={"kid": key_id}),
        "unknown kid": lambda: token(admin_key, kid="0" * 24),
        "HS512": lambda: token(admin_key, alg="HS512"),
        "none": lambda: jwt.encode({"iat": int(now), "exp": int(now) + 300, "aud": "/admin/"}, None,
                                   algorithm="none", headers={"kid": key_id}),
        "no exp": lambda: jwt.encode({"iat": int(now), "aud": "/admin/"}, bytes.fromhex(secret), algorithm="HS256",
                                     headers={"kid": key_id}),
        "scheme": lambda: None,
    }[case]()
    response = await get(admin_door, f"Bearer {token(admin_key)}" if case == "scheme" else f"Ghost {wrong}")
    assert response.status_code == 401, response.text
    error = error_of(response)
    assert error["type"] == "UnauthorizedError" and error["message"] == expected
    assert admin_door.door.admin_api.refusals.counts  # counted


async def test_no_token_and_not_a_token_as_the_reference_answers(admin_door, admin_key):
    missing = await get(admin_door, None)
    assert missing.status_code == 403 and error_of(missing)["type"] == "NoPermissionError"
    garbage = await get(admin_door, "Ghost not.a.jwt")
    assert garbage.status_code == 400 and error_of(garbage)["type"] == "BadRequestError"
    _key_id, secret = admin_key.split(":")
    no_kid = jwt.encode({"iat": int(time.time()), "exp": int(time.time()) + 300, "aud": "/admin/"},
                        bytes.fromhex(secret), algorithm="HS256")
    answer = await get(admin_door, f"Ghost {no_kid}")
    assert answer.status_code == 400 and error_of(answer)["message"] == "Admin API kid missing."


async def test_a_refusal_never_logs_the_token(admin_door, admin_key, caplog):
    bad = token(admin_key, audience="/content/")
    for _ in range(3):
        await get(admin_door, f"Ghost {bad}")
    assert caplog.records and bad not in caplog.text and admin_key.split(":")[1] not in caplog.text


async def test_a_removed_integrations_key_stops_working(admin_door, api_settings):
    key = (await add_integration("Short lived", settings=api_settings)).admin_api_key
    assert (await get(admin_door, f"Ghost {token(key)}")).status_code == 200
    assert [i.key_id for i in await list_integrations(settings=api_settings) if i.name == "Short lived"] == \
        [key.split(":")[0]]
    await remove_integration("Short lived", settings=api_settings)
    refused = await get(admin_door, f"Ghost {token(key)}")
    assert refused.status_code == 401 and error_of(refused)["message"] == "Unknown Admin API Key"


def test_repeated_failures_from_one_address_are_slowed():
    slowdown = Slowdown(free=3, most=4.0)
    delays = [slowdown.failed("203.0.113.9") for _ in range(8)]
    assert delays[:3] == [0, 0, 0] and delays[3:] == [0.25, 0.5, 1.0, 2.0, 4.0]
    assert slowdown.failed("198.51.100.1") == 0  # another address is not slowed


async def test_unsupported_routes_and_methods_say_what_is_supported(api):
    unknown = await api.get("themes/")
    assert unknown.status_code == 501
    error = error_of(unknown)
    assert "GET posts/" in error["context"] and "not supported" in error["message"]
    wrong_method = await api.patch("posts/")
    assert wrong_method.status_code == 405 and "GET" in error_of(wrong_method)["context"]
