"""The bench's honest baseline (bench/newsletter.py's raw send) posts, for a batch, the very bytes the
send activity posts for it: the same job, without Temporal, claims or bookkeeping."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from temporalio.testing import ActivityEnvironment

from activities.newsletter.batches import BatchCreationActivities
from activities.newsletter.models import CreateBatchesInput, SendBatchesInput, SendBatchInput
from activities.newsletter.send import BatchSendActivities
from bench.newsletter import post_raw_batch, raw_message
from pressroom.dependencies import Dependencies
from pressroom.providers.mailgun import MailgunClient

from .conftest import seed_email

# Every replacement a reader's values fill but the status (the raw send reads no status), in both
# of the forms authors write, and a link; the footer adds the unsubscribe link.
BODY = ('<p>Hi %%{first_name, "there"}%%, {name} (%recipient.email%)</p>'
        '<p><a href="https://example.com/?k=%%{key}%%&amp;u={uuid}">yours</a> '
        '<a href="%%{manage_account_url}%%">account</a> <a href="{unsubscribe_url}">leave</a></p>')


def parts(body: bytes) -> list[tuple[bytes, bytes]]:
    """A multipart body's (name, value) pairs in order, for a readable difference when one differs."""
    boundary = body.split(b"\r\n", 1)[0]
    return [tuple(re.match(rb'\r\nContent-Disposition: form-data; name="([^"]*)"\r\n\r\n(.*)\r\n\Z', part, re.S)
                  .groups()) for part in body.split(boundary)[1:-1]]


@pytest.mark.parametrize("grouped", [False, True], ids=["send_batch", "send_batches"])
async def test_the_raw_send_posts_the_bytes_the_send_activity_posts_for_a_batch(db, newsletter_settings, grouped):
    settings = newsletter_settings()
    seeded = await seed_email(db, members=1500, html=BODY)
    # Names the values must escape where they land in HTML, and non-ASCII ones.
    await db.execute("UPDATE members SET name = CASE WHEN email LIKE 'm1-%' THEN 'Zoë <b>O''Brien</b> & co' "
                     "WHEN email LIKE 'm2-%' THEN '  Ünal  ' ELSE name END")
    await ActivityEnvironment().run(
        BatchCreationActivities(Dependencies(settings=settings, pool=db, provider=None, temporal=None)).create_batches,
        CreateBatchesInput(email_id=seeded.email_id, retry_failed=False))
    batch_id = await db.fetchval("SELECT batch_id FROM email_recipients WHERE email_id = $1 "
                                 "AND member_email LIKE 'm1-%'", seeded.email_id)

    posted: list[bytes] = []

    def mailgun(request: httpx.Request) -> httpx.Response:
        posted.append(request.content)
        return httpx.Response(200, json={"id": f"<{len(posted)}@{settings.mailgun_domain}>", "message": "Queued."})

    async with MailgunClient(base_url="https://mailgun.test", api_key="key-test", domain=settings.mailgun_domain,
                             transport=httpx.MockTransport(mailgun)) as provider:
        sender = BatchSendActivities(Dependencies(settings=settings, pool=db, provider=provider, temporal=None))
        # Alone, or in a group as a send without caps sends its batches.
        if grouped:
            group = await ActivityEnvironment().run(sender.send_batches,
                                                    SendBatchesInput(batches=[SendBatchInput(batch_id=batch_id)]))
            (sent,) = group.sent
        else:
            sent = await ActivityEnvironment().run(sender.send_batch, SendBatchInput(batch_id=batch_id))
        # The batch's recipients as the bench's raw send holds the rows it COPYs.
        rows = [tuple(row) for row in await db.fetch(
            "SELECT member_email, member_name, member_uuid::text, member_id, batch_id FROM email_recipients "
            "WHERE batch_id = $1 ORDER BY id", batch_id)]
        message = await raw_message(db, settings, provider, seeded.email_id)
        await post_raw_batch(provider, message, batch_id, rows)
        # One value of one member changed: the comparison sees it.
        await post_raw_batch(provider, message, batch_id, [(rows[0][0], rows[0][1] + ".", *rows[0][2:]), *rows[1:]])

    assert sent.recipients == len(rows) and len(rows) in (500, 1000)
    pipeline, raw, changed = posted
    names = [name for name, _ in parts(pipeline)]
    assert names[:4] == [b"from", b"subject", b"html", b"text"]
    assert {b"o:tag", b"h:List-Unsubscribe", b"h:List-Unsubscribe-Post", b"recipient-variables", b"h:Message-Id",
            b"v:email-id"} <= set(names)
    variables = json.loads(dict(parts(pipeline))[b"recipient-variables"])
    assert len(variables) == len(rows) and all("/unsubscribe/?uuid=" in values["unsubscribe_url"]
                                          for values in variables.values())
    assert any("Zoë &lt;b&gt;" in value for values in variables.values() for value in values.values())
    assert parts(raw) == parts(pipeline)
    assert raw == pipeline  # one process, one multipart boundary: byte for byte
    assert changed != pipeline
