"""A failure's reason says each code once, wherever it is read: `members show` as `newsletter
report` (a provider's message often begins with the codes, in its own forms)."""

from __future__ import annotations

import json
import os

from operations.answers import FailureReason, reason_words
from tests.analytics.conftest import seed_newsletter
from tests.operations.test_waiting import cli

WORDS = "452 4.2.2 The email account is over quota"


def test_each_code_once_whatever_the_message_begins_with():
    for message in ("4.2.2 The email account is over quota", "452 4.2.2 The email account is over quota",
                    "smtp; 452 4.2.2 The email account is over quota",  # SES's diagnostic code (RFC 3464)
                    "452-4.2.2 The email account is over quota", "#4.2.2 The email account is over quota"):
        assert reason_words(452, "4.2.2", message) == WORDS, message
        assert FailureReason(severity="temporary", code=452, enhanced_code="4.2.2", message=message,
                             n=1).words() == WORDS
    assert reason_words(550, None, "5.1.1 unknown user") == "550 5.1.1 unknown user"  # not its own code: kept
    assert reason_words(None, None, None) == ""


async def test_members_show_says_a_failure_code_once(settings, db):
    await seed_newsletter(db, members=2, emails=2)
    for email_id, message in (("e0", "4.2.2 The email account is over quota"),
                              ("e1", "452 4.2.2 The email account is over quota")):
        await db.execute("INSERT INTO email_recipient_failures (email_id, member_id, email_recipient_id, code, "
                         "enhanced_code, message, severity, failed_at, event_id) SELECT $1, member_id, id, 452, "
                         "'4.2.2', $2, 'temporary', now(), $1 FROM email_recipients "
                         "WHERE member_id = 'm0' AND email_id = $1", email_id, message)
    env = {**os.environ, "DATABASE_URL": settings.database_url}
    code, out, err = await cli("members", "show", "m0", "--json", env=env)
    assert code == 0, err
    assert {e["email_id"]: e["failure_enhanced_code"] for e in json.loads(out)["emails"]} == \
        {"e0": "4.2.2", "e1": "4.2.2"}
    code, out, err = await cli("members", "show", "m0", env=env)
    assert code == 0, err
    shown = " ".join(out.split())  # the table wraps long cells
    assert shown.count("failed (temporary): 452 4.2.2 The email account is over quota") == 2, out
    assert "452 452" not in shown and "4.2.2 4.2.2" not in shown
