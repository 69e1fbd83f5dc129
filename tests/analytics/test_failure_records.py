"""Failure records as the reference platform keeps them: one row per recipient of an email.

A later temporary failure overwrites a temporary one, a permanent one overwrites a temporary one,
nothing overwrites a permanent one; a failure Mailgun explains with nothing reads "Error <code>".
Events come from the simulator over HTTP and are fetched by the real workflow on the dev server.
"""

from __future__ import annotations

from .conftest import address, seed_newsletter, sim_now
from .test_fetch import run_fetch

EMAIL = "e0"


def fail(mailgun, member: int, severity: str, at: float, message: str, code: int | None = None) -> None:
    """One failed event for member `member` of email e0, at time `at` (simulator clock)."""
    code = code if code is not None else (550 if severity == "permanent" else 452)
    mailgun.add_synthetic_events(
        email_id=EMAIL, recipients=[address(member)], timestamp=at - 1.0,  # failures come 1 s after `timestamp`
        events=["failed" if severity == "permanent" else "failed-temporary"],
        delivery_status={"code": code, "message": message, "description": ""})


async def stored(db, member: int) -> list[tuple]:
    rows = await db.fetch(
        "SELECT f.severity, f.message, f.code, extract(epoch FROM f.failed_at)::float8 AS at "
        "FROM email_recipient_failures f JOIN email_recipients er ON er.id = f.email_recipient_id "
        "WHERE er.email_id = $1 AND er.member_email = $2", EMAIL, address(member))
    return [(r["severity"], r["message"], r["code"], round(r["at"])) for r in rows]


async def fetch(dev_env, settings, mailgun) -> None:
    mailgun.advance(30)  # what was just added is in the past and visible
    await run_fetch(dev_env, settings, sim_now(mailgun))


async def test_failure_without_message_or_description_is_stored_as_error_code(dev_env, db, mailgun,
                                                                              analytics_settings):
    await seed_newsletter(db, members=2, emails=1)
    base = round(mailgun.now()) - 600
    mailgun.add_synthetic_events(email_id=EMAIL, recipients=[address(0)], timestamp=base, events=["failed"],
                                 delivery_status={"code": 554, "message": "", "description": ""})
    mailgun.add_synthetic_events(email_id=EMAIL, recipients=[address(1)], timestamp=base, events=["failed"],
                                 delivery_status={"code": 550, "message": " ", "description": "Mailbox gone"})
    await fetch(dev_env, analytics_settings, mailgun)
    assert await stored(db, 0) == [("permanent", "Error 554", 554, base + 1)]
    assert await stored(db, 1) == [("permanent", "Mailbox gone", 550, base + 1)]


async def test_later_temporary_failure_overwrites_temporary_failure(dev_env, db, mailgun, analytics_settings):
    await seed_newsletter(db, members=2, emails=1)
    base = round(mailgun.now()) - 600
    # Member 0: two temporary failures read in one go; member 1: one per fetch.
    fail(mailgun, 0, "temporary", base, "first try")
    fail(mailgun, 0, "temporary", base + 60, "second try")
    fail(mailgun, 1, "temporary", base, "first try")
    await fetch(dev_env, analytics_settings, mailgun)
    assert await stored(db, 1) == [("temporary", "first try", 452, base)]

    later = round(mailgun.now()) + 5
    fail(mailgun, 1, "temporary", later, "second try")
    await fetch(dev_env, analytics_settings, mailgun)
    assert await stored(db, 0) == [("temporary", "second try", 452, base + 60)]
    assert await stored(db, 1) == [("temporary", "second try", 452, later)]


async def test_permanent_failure_overwrites_temporary_failure(dev_env, db, mailgun, analytics_settings):
    await seed_newsletter(db, members=2, emails=1)
    base = round(mailgun.now()) - 600
    fail(mailgun, 0, "temporary", base, "over quota")
    fail(mailgun, 0, "permanent", base + 60, "no such mailbox")
    fail(mailgun, 1, "temporary", base, "over quota")
    await fetch(dev_env, analytics_settings, mailgun)
    assert await stored(db, 1) == [("temporary", "over quota", 452, base)]

    later = round(mailgun.now()) + 5
    fail(mailgun, 1, "permanent", later, "no such mailbox")
    await fetch(dev_env, analytics_settings, mailgun)
    assert await stored(db, 0) == [("permanent", "no such mailbox", 550, base + 60)]
    assert await stored(db, 1) == [("permanent", "no such mailbox", 550, later)]


async def test_nothing_overwrites_permanent_failure(dev_env, db, mailgun, analytics_settings):
    await seed_newsletter(db, members=2, emails=1)
    base = round(mailgun.now()) - 600
    # Member 0 in one read: permanent first, then a later temporary and a later permanent.
    fail(mailgun, 0, "permanent", base, "no such mailbox")
    fail(mailgun, 0, "temporary", base + 60, "over quota")
    fail(mailgun, 0, "permanent", base + 120, "domain gone", code=551)
    fail(mailgun, 1, "permanent", base, "no such mailbox")
    await fetch(dev_env, analytics_settings, mailgun)

    later = round(mailgun.now()) + 5
    fail(mailgun, 1, "temporary", later, "over quota")
    fail(mailgun, 1, "permanent", later + 60, "domain gone", code=551)
    await fetch(dev_env, analytics_settings, mailgun)
    await fetch(dev_env, analytics_settings, mailgun)  # a second read of the same events changes nothing
    for member in (0, 1):
        assert await stored(db, member) == [("permanent", "no such mailbox", 550, base)]
    assert await db.fetchval("SELECT count(*) FROM email_recipient_failures") == 2
