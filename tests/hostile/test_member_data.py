"""Hostile member data end to end: names stay text in every email, and an address that cannot be a
recipient is left out of its batch, counted and logged without itself, while the rest go out.

Real PostgreSQL, Temporal's dev server, the Mailgun simulator over HTTP and the command line.
"""

from __future__ import annotations

import json
import logging

import pytest
from selectolax.lexbor import LexborHTMLParser
from temporalio.testing import ActivityEnvironment

from activities.newsletter.models import CreateBatchesInput
from operations.members import add_member
from pressroom.inputs import PLAIN_ADDRESS, recipient_problem
from tests.hostile.corpus import NAMES, PHISHING_NAME, STRANGE_ADDRESSES, UNUSABLE_ADDRESSES
from tests.newsletter.conftest import seed_email
from tests.newsletter.test_batch_creation import activities_for, create_in_chunks
from tests.newsletter.test_failures import send_and_follow, wait_until
from tests.newsletter.test_send import delivered
from tests.operations.test_waiting import cli, cli_env
from tests.outbox.test_outbox import settled
from worker import running_worker

WELCOME = ("INSERT INTO automated_emails (name, slug, subject, html) VALUES "
           "('Welcome', 'member-welcome-email-free', 'Welcome, %recipient.name%', "
           "'<p>Hello %recipient.name%, welcome {first_name, \"reader\"}!</p>')")


def body_as_received(mailgun, address: str) -> tuple[str, str]:
    [message] = [m for m in mailgun.messages if address in m.recipients]
    subject, html, _ = message.received_by(address)
    return subject, html


async def test_members_add_with_a_link_in_the_name_gets_a_welcome_without_a_link(db, mailgun, relay, dev_env):
    await db.execute(WELCOME)
    code, _out, err = await cli("members", "add", "bob@hostile.example", "--welcome", "--name", PHISHING_NAME,
                               env=cli_env(relay, dev_env))
    assert code == 0, err
    key = await db.fetchval("SELECT idempotency_key FROM outbox ORDER BY created_at DESC LIMIT 1")
    await settled(db, key)
    subject, html = body_as_received(mailgun, "bob@hostile.example")
    tree = LexborHTMLParser(html)
    assert tree.css("a") == [] and "evil.example" not in [a.attrs.get("href") for a in tree.css("[href]")]
    assert tree.body.text() == f"Hello {PHISHING_NAME}, welcome Bob!"  # shown as text, escaped in the source
    assert "&lt;a href=&quot;https://evil.example/x&quot;&gt;Claim your refund&lt;/a&gt;" in html
    assert subject == f"Welcome, {PHISHING_NAME}"  # a subject is text already: no markup to escape


@pytest.mark.parametrize("kind", list(NAMES))
async def test_every_hostile_name_reaches_the_welcome_email_as_text(db, mailgun, relay, kind):
    await db.execute(WELCOME)
    name = NAMES[kind]
    address = f"{kind}@hostile.example"
    # Stored as an import would store it (members add refuses names over 191 characters).
    member_id = await db.fetchval("INSERT INTO members (email, name) VALUES ($1, $2) RETURNING id", address, name)
    from activities.outbox import enqueue

    async with db.acquire() as conn, conn.transaction():
        key = await enqueue(conn, "MemberCreatedEvent", {"member_id": member_id},
                            idempotency_key=f"member-created-{member_id}")
    await settled(db, key)
    _, html = body_as_received(mailgun, address)
    tree = LexborHTMLParser(html)
    assert tree.css("a, script, img") == []
    assert tree.body.text() == f"Hello {name}, welcome {name.split()[0]}!"


async def test_an_unusable_address_is_left_out_counted_and_the_rest_go_out(db, mailgun, dev_env, newsletter_settings,
                                                                          caplog):
    caplog.set_level(logging.INFO)
    settings = newsletter_settings(batch_size=10)
    seeded = await seed_email(db, members=40)
    # Stored as an import would store them: members add refuses every one of these.
    bad = {**UNUSABLE_ADDRESSES, "quoted-local-part": STRANGE_ADDRESSES["quoted-local-part"]}
    bad.pop("nul")  # PostgreSQL text cannot hold NUL: such a row cannot be stored at all
    strange = {k: v for k, v in STRANGE_ADDRESSES.items() if k != "quoted-local-part"}
    await db.execute(
        """WITH added AS (INSERT INTO members (email, name, created_at)
                          SELECT a, 'Odd ' || a, now() - interval '1 hour' FROM unnest($1::text[]) a RETURNING id)
           INSERT INTO members_newsletters (member_id, newsletter_id) SELECT id, $2 FROM added""",
        [*bad.values(), *strange.values()], seeded.newsletter_id)
    async with running_worker(dev_env.client, settings):
        outcome, _ = await send_and_follow(dev_env.client, settings, seeded.email_id)
    assert outcome.status == "submitted", outcome.message
    got = delivered(mailgun, seeded.email_id)
    assert len(got) == 40 + len(strange) and set(strange.values()) <= set(got)
    assert not set(bad.values()) & set(got)
    assert await db.fetchval("SELECT skipped_recipients FROM emails WHERE id = $1", seeded.email_id) == len(bad)
    reasons = dict(await db.fetch(
        "SELECT m.email, s.reason FROM email_skipped_recipients s JOIN members m ON m.id = s.member_id "
        "WHERE s.email_id = $1", seeded.email_id))
    assert reasons[bad["comma"]] == "holds a comma" and reasons[bad["crlf"]].startswith("holds a line break")
    assert set(reasons) == set(bad.values())
    # Logged by member id, without the address.
    [line] = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert f"{len(bad)} members left out" in line
    assert not any(part in line for address in bad.values() for part in (address, address.split("@")[0]))

    env = cli_env(settings, dev_env)
    code, out, err = await cli("newsletter", "status", seeded.email_id, "--json", env=env)
    assert code == 0, err
    status = json.loads(out)
    assert status["skipped_recipients"] == len(bad) and status["recipients"] == 40 + len(strange)
    code, out, err = await cli("newsletter", "status", seeded.email_id, env=env)
    assert code == 0 and f"left out: {len(bad)} members" in out, out + err
    code, out, err = await cli("members", "list", "--left-out-of", seeded.email_id, "--reason", "unusable-address",
                               "--json", env=env)
    assert code == 0, err
    assert {row["email"] for row in json.loads(out)["items"]} == set(bad.values())


async def test_a_resumed_chunked_creation_leaves_out_the_same_members_once(db, mailgun, newsletter_settings):
    settings = newsletter_settings(batch_size=3)  # 30 members a chunk
    seeded = await seed_email(db, members=100)
    bad_ids = await db.fetch(  # every fifth member, in every chunk: a comma in the stored address
        """UPDATE members SET email = replace(email, '@', ',x@') WHERE id IN (
               SELECT member_id FROM (SELECT member_id, row_number() OVER (ORDER BY member_id) AS n
                                      FROM members_newsletters WHERE newsletter_id = $1) o WHERE n % 5 = 0)
           RETURNING id""", seeded.newsletter_id)
    assert len(bad_ids) == 20
    activities, env = activities_for(settings, db), ActivityEnvironment()
    first = await env.run(activities.create_batches, CreateBatchesInput(email_id=seeded.email_id, retry_failed=True,
                                                                         chunked=True))
    assert first.creating
    await create_in_chunks(env, activities, seeded.email_id)  # resumed, as a retried activity would
    written = [row["member_id"] for row in await db.fetch(
        "SELECT member_id FROM email_recipients WHERE email_id = $1", seeded.email_id)]
    assert len(written) == len(set(written)) == 100 - len(bad_ids)
    assert not {row["id"] for row in bad_ids} & set(written)
    assert await db.fetchval("SELECT skipped_recipients FROM emails WHERE id = $1", seeded.email_id) == len(bad_ids)


@pytest.mark.parametrize("address", ["bob@example.com", "a.b-c+d@mg.test.example", "x_y@sub.domain.example.org",
                                     "o'connor@example.com", "reader1@demo.pressroom.test"])
def test_the_plain_shape_taken_without_a_closer_look_is_valid(address):
    import re

    assert re.match(PLAIN_ADDRESS, address) and recipient_problem(address) is None


async def test_a_welcome_email_with_a_bad_header_or_replacement_waits_with_the_reason(db, mailgun, relay):
    await db.execute("INSERT INTO automated_emails (name, slug, subject, html, sender_name, sender_email) VALUES "
                     "('Welcome', 'member-welcome-email-free', 'Welcome\r\nBcc: all@hostile.example', '<p>Hi</p>', "
                     "'Weekly \"News\", Inc.', 'news@example.com')")
    added = await add_member("header@hostile.example", welcome=True, settings=relay)

    async def waiting() -> bool:
        return await db.fetchval("SELECT last_error_code FROM outbox WHERE idempotency_key = $1",
                                 added.welcome_key) == "WELCOME_TEMPLATE"
    await wait_until(waiting, 90)
    entry = await db.fetchrow("SELECT status, last_error_msg FROM outbox WHERE idempotency_key = $1",
                              added.welcome_key)
    assert entry["status"] == "pending"
    assert "the subject holds a line break or control character" in entry["last_error_msg"]
    assert [m for m in mailgun.messages if "header@hostile.example" in m.recipients] == []


async def test_a_welcome_sender_name_with_quotes_and_commas_stays_one_address(db, mailgun, relay):
    from email.headerregistry import HeaderRegistry

    await db.execute("INSERT INTO automated_emails (name, slug, subject, html, sender_name, sender_email) VALUES "
                     "('Welcome', 'member-welcome-email-free', 'Welcome', '<p>Hi</p>', 'Weekly \"News\", Inc.', "
                     "'news@example.com')")
    added = await add_member("sender@hostile.example", welcome=True, settings=relay)
    await settled(db, added.welcome_key)
    [message] = [m for m in mailgun.messages if "sender@hostile.example" in m.recipients]
    [sender] = HeaderRegistry()("from", message.from_address).addresses
    assert (sender.display_name, sender.addr_spec) == ('Weekly "News", Inc.', "news@example.com")
