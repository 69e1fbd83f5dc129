"""`members delete` leaves the member nowhere: not in SES's acceptance records, not in stored provider
events however their JSON escapes the address (`\\u00fc`, a JSON text inside a string), nor in
percent-encoded or base64 forms; their name neither; and not in PostgreSQL's own server log, which a
second `members add` of the same address used to fill with `Key (email)=(…) already exists`."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from urllib.parse import quote, quote_plus

import pytest

from operations.members import add_member, delete_member
from pressroom.errors import BadInput
from pressroom.settings import load_settings

from .test_delete import found_in_clear


def every_form(value: str) -> list[str]:
    """`value` plain, JSON-escaped (once, and again inside a JSON string), percent-encoded and base64-encoded."""
    raw = value.encode()
    escaped = json.dumps(value)[1:-1]
    return list(dict.fromkeys([value, escaped, json.dumps(escaped)[1:-1], quote(value, safe=""), quote(value),
                               quote_plus(value),
                               base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode().rstrip("=")]))


async def test_a_deleted_member_is_in_no_table_and_not_in_the_database_log(postgres_server, postgres_url, db):
    settings = load_settings(database_url=postgres_url, address_hash_key="a-key-of-the-site-0123456789")
    tag = uuid.uuid4().hex[:8]
    added = await add_member(f"jürgen.{tag}@bücher.example", f"Jürgen Müller {tag}", settings=settings)
    address = await db.fetchval("SELECT email FROM members WHERE id = $1", added.member_id)
    name = f"Jürgen Müller {tag}"
    assert "ü" in address
    with pytest.raises(BadInput, match="already exists"):
        await add_member(address, settings=settings)  # before: the unique constraint's error, logged with the key

    member_uuid = await db.fetchval("SELECT uuid::text FROM members WHERE id = $1", added.member_id)
    to = f"{name} <{address}>"
    # SES's Send event kept to confirm sends, and its notification as the inbox holds it: a JSON text
    # inside the SNS envelope's string, every non-ASCII character escaped.
    await db.execute("INSERT INTO provider_acceptances (provider, recipient, marks, provider_message_id, accepted_at) "
                     "VALUES ('ses', lower($1), '{}', 'm1', now())", address)
    ses = {"eventType": "Bounce", "mail": {"destination": [address], "commonHeaders": {"to": [to]}},
           "bounce": {"bouncedRecipients": [{"emailAddress": address}]}}
    await db.execute("INSERT INTO webhook_inbox (provider, kind, event) VALUES ('ses', 'bounce', $1)",
                     json.dumps({"Type": "Notification", "Message": json.dumps(ses)}))
    # A Mailgun event set aside, escaped, with the address in a link and in a base64 variable.
    mailgun = {"event": "failed", "recipient": address, "message": {"headers": {"to": to}},
               "url": f"https://site.example/unsubscribe/?uuid={member_uuid}&email={quote(address, safe='')}",
               "user-variables": {"r": base64.b64encode(address.encode()).decode(), address: "keyed by it"}}
    await db.execute("INSERT INTO delivery_events_rejected (provider, source, event_id, reason, event, digest) "
                     "VALUES ('mailgun', 'push', 'e1', 'bad', $1, 'd1')", json.dumps(mailgun))
    # An event of someone else, escaped too: left as it is.
    other = json.dumps({"event": "failed", "recipient": "zoë@other.example"})
    await db.execute("INSERT INTO delivery_events_rejected (provider, source, event_id, reason, event, digest) "
                     "VALUES ('mailgun', 'push', 'e2', 'bad', $1, 'd2')", other)
    # A failure row naming them.
    await db.execute("INSERT INTO newsletters (id, name, slug) VALUES ('nl', 'Weekly', 'weekly')")
    await db.execute("INSERT INTO posts (id, title, slug, status, published_at) "
                     "VALUES ('p1', 'P', 'p1', 'published', now())")
    await db.execute("INSERT INTO emails (id, post_id, newsletter_id, subject) VALUES ('e1', 'p1', 'nl', 'S')")
    batch = await db.fetchval("INSERT INTO email_batches (email_id, status, provider_id, send_outcome) "
                              "VALUES ('e1', 'submitted', '<m@mg>', 'accepted') RETURNING id")
    recipient = await db.fetchval(
        "INSERT INTO email_recipients (email_id, member_id, batch_id, member_uuid, member_email, member_name) "
        "SELECT 'e1', id, $2, uuid, email, name FROM members WHERE id = $1 RETURNING id", added.member_id, batch)
    await db.execute("INSERT INTO email_recipient_failures (email_id, member_id, email_recipient_id, code, message, "
                     "severity, failed_at, event_id) VALUES ('e1', $1, $2, 550, $3, 'permanent', now(), 'ev1')",
                     added.member_id, recipient, f"550 5.1.1 {to}: mailbox unavailable")
    needles = every_form(address) + every_form(name)
    assert set(await found_in_clear(db, *needles)) >= {"provider_acceptances.recipient", "webhook_inbox.event",
                                                        "delivery_events_rejected.event",
                                                        "email_recipient_failures.message"}

    await delete_member(added.member_id, settings=settings)

    assert await found_in_clear(db, *needles) == []
    assert await db.fetchval("SELECT count(*) FROM provider_acceptances") == 0
    assert await db.fetchval("SELECT event FROM delivery_events_rejected WHERE event_id = 'e2'") == other
    scrubbed = json.loads(await db.fetchval("SELECT event FROM delivery_events_rejected WHERE event_id = 'e1'"))
    assert scrubbed["recipient"] == "<address>" and scrubbed["message"]["headers"]["to"] == "<name> <<address>>"
    assert json.loads(json.loads(await db.fetchval("SELECT event FROM webhook_inbox"))["Message"])["mail"][
        "destination"] == ["<address>"]
    assert await db.fetchval("SELECT message FROM email_recipient_failures") == \
        "550 5.1.1 <name> <<address>>: mailbox unavailable"

    server_log = await asyncio.to_thread((postgres_server.folder / "postgres.log").read_text, errors="replace")
    found = [form for form in [*needles, tag] if form in server_log]  # the tag: any part of either
    assert found == [], f"in PostgreSQL's log: {found}"
