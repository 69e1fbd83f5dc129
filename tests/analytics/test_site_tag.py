"""With PRESSROOM_EMAIL_TAG set, every phase asks Mailgun only for this site's newsletter events
(`tags: bulk-email AND <tag>`, as the reference filters them): on a Mailgun domain shared with
another sender, the other sender's events are neither fetched nor counted."""

from __future__ import annotations

from datetime import timedelta

import pytest

from operations.analytics import analytics_backfill
from pressroom.settings import ConfigurationError, load_settings
from tests.conftest import make_settings

from .conftest import actual_counts, address, seed_newsletter, sim_now
from .test_fetch import run_fetch

OURS, THEIRS = ("bulk-email", "site-a"), ("bulk-email", "site-b")


def add(mailgun, recipients: range, tags, timestamp=None) -> None:
    mailgun.add_synthetic_events(email_id="e0", recipients=[address(n) for n in recipients], tags=tags,
                                 timestamp=timestamp)


async def test_with_a_site_tag_every_phase_fetches_only_this_sites_events(dev_env, db, mailgun, postgres_url):
    settings = make_settings(postgres_url, mailgun, analytics_end_margin_seconds=0,
                             analytics_trust_threshold_seconds=300, email_tag="site-a")
    await seed_newsletter(db, members=40, emails=1)
    add(mailgun, range(0, 10), OURS)
    add(mailgun, range(10, 20), THEIRS)  # another sender on the same domain, same email id even
    add(mailgun, range(20, 25), ("bulk-email",))
    first_now = sim_now(mailgun)
    first = await run_fetch(dev_env, settings, first_now)
    assert sum(p.events for p in first.phases) == 20  # delivered and opened, 10 recipients: ours only
    assert (await actual_counts(db))[0]["e0"][:2] == (10, 10)

    # Late events (stored after the window that should have had them): the missing phase's.
    mailgun.advance(900)
    late = first_now.timestamp() - 60  # inside the missing phase's window, behind the latest phases' cursor
    add(mailgun, range(25, 30), OURS, timestamp=late)
    add(mailgun, range(30, 35), THEIRS, timestamp=late)
    second = await run_fetch(dev_env, settings, sim_now(mailgun))
    missing = next(p for p in second.phases if p.phase == "missing")
    assert missing.events == 10 and missing.applied == 10

    # A backfill of an old range.
    old = mailgun.now() - 3 * 86400
    add(mailgun, range(35, 38), OURS, timestamp=old)
    add(mailgun, range(38, 40), THEIRS, timestamp=old)
    moment = sim_now(mailgun) - timedelta(days=3)
    await analytics_backfill((moment - timedelta(hours=1)).isoformat(), (moment + timedelta(hours=2)).isoformat(),
                             settings)
    third = await run_fetch(dev_env, settings, sim_now(mailgun))
    backfill = next(p for p in third.phases if p.phase == "backfill")
    assert backfill.events == 6 and backfill.applied == 6
    assert (await actual_counts(db))[0]["e0"][:2] == (18, 18)


def test_a_site_tag_is_one_plain_word():
    with pytest.raises(ConfigurationError, match="PRESSROOM_EMAIL_TAG is invalid: must be one tag"):
        load_settings(email_tag="site-a OR bulk-email")
    assert load_settings(email_tag="site-a.example:1").email_tag == "site-a.example:1"
