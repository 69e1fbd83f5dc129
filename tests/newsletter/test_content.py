"""What each kind of member receives: a paywalled, segmented, personalised post sent for real
(PostgreSQL, a Temporal server, the Mailgun simulator over HTTP), then `preview` and `test` as an
operator runs them from the command line."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.client import WorkflowFailureError

from tests.foundation.test_cli import assert_one_line_error, pressroom

from .test_send import run_send

POST = ('<h1>Issue 7</h1><p>Hello %%{first_name "there"}%%, this week for everyone.</p>'
        '<DIV Data-Gh-Segment="status:free"><div><p>Free readers: upgrade for the full story.</p></div></DIV>'
        '<div class="x" data-gh-segment="status:-free"><div><b>Thanks for paying</b></div><p>Paid bonus</p></div>'
        '<p><a href="https://site.test/r?u=%%{uuid}%%">Your link</a></p>'
        '<!--members-only--><h2>The paid part</h2><p>Paid analysis for {name, "our reader"}.</p>')
SUBJECT = 'Issue 7 for %%{first_name "you"}%%'
PAID_WORDS = ("Thanks for paying", "Paid bonus", "The paid part", "Paid analysis")


async def seed(db, *, html: str = POST, subject: str = SUBJECT, visibility: str = "paid") -> dict:
    """A newsletter, a paid post and its email, and one member of each kind."""
    tag = uuid.uuid4().hex[:8]
    async with db.acquire() as conn, conn.transaction():
        newsletter_id = await conn.fetchval(
            "INSERT INTO newsletters (name, slug, sender_email) VALUES ('Weekly', $1, 'weekly@example.com') "
            "RETURNING id", f"weekly-{tag}")
        members = {}
        for kind, name, status in (("free", "Ann Free", "free"), ("free_unnamed", None, "free"),
                                   ("free_tricky", "Bob <b> & Co", "free"), ("paid", "Paula Paid", "paid"),
                                   ("comped", "Carl Comped", "comped")):
            members[kind] = await conn.fetchrow(
                "INSERT INTO members (email, name, status, created_at) VALUES ($1, $2, $3, now() - interval '1 hour') "
                "RETURNING id, email, uuid, name", f"{kind}-{tag}@example.com", name, status)
            await conn.execute("INSERT INTO members_newsletters (member_id, newsletter_id) VALUES ($1, $2)",
                               members[kind]["id"], newsletter_id)
        post_id = await conn.fetchval(
            "INSERT INTO posts (title, slug, html, newsletter_id, visibility, status, published_at) "
            "VALUES ('Issue 7', $1, $2, $3, $4, 'published', now()) RETURNING id", f"issue-{tag}", html, newsletter_id,
            visibility)
        email_id = await conn.fetchval(
            "INSERT INTO emails (post_id, newsletter_id, subject, html, plaintext) VALUES ($1, $2, $3, $4, "
            "'stale unsegmented text: Paid analysis') RETURNING id", post_id, newsletter_id, subject, html)
    return {"email_id": email_id, "post_slug": f"issue-{tag}", "members": members}


def received(mailgun, email_id: str, address: str) -> tuple[str, str, str]:
    [message] = [m for m in mailgun.messages_for(email_id) if address in m.recipients]
    return message.received_by(address)


async def test_each_kind_of_member_gets_their_own_email(db, mailgun, ts_worker):
    client, settings = ts_worker
    site = await seed(db)
    outcome = await run_send(client, settings, site["email_id"])
    assert outcome.status == "submitted" and outcome.counts.recipients_total == 5

    segments = {r["member_segment"]: r["n"] for r in await db.fetch(
        "SELECT b.member_segment, count(*) AS n FROM email_recipients r JOIN email_batches b ON b.id = r.batch_id "
        "WHERE r.email_id = $1 GROUP BY 1", site["email_id"])}
    assert segments == {"status:free": 3, "status:-free": 2}

    members = site["members"]
    for kind in ("free", "free_unnamed", "free_tricky"):
        subject, html, text = received(mailgun, site["email_id"], members[kind]["email"])
        for part in (html, text):
            assert not [w for w in PAID_WORDS if w in part], (kind, part)
            assert "this week for everyone" in part and "upgrade for the full story" in part
            assert f"{settings.site_url}/{site['post_slug']}/" in part  # the call to action
            assert "%recipient." not in part and "{{recipient." not in part and "%%{" not in part \
                and "{name" not in part
        assert f"u={members[kind]['uuid']}" in html and f"uuid={members[kind]['uuid']}" in html
        assert "stale unsegmented text" not in text  # the text part comes from this segment's HTML
        assert "\n## " not in text and "# Issue 7" in text
        if kind == "free":
            assert subject == "Issue 7 for Ann" and "Hello Ann, " in html and "Hello Ann, " in text
        elif kind == "free_unnamed":
            assert subject == "Issue 7 for you" and "Hello there, " in html and "Hello there, " in text
        else:
            assert subject == "Issue 7 for Bob" and "Hello Bob, " in html
    for kind, first in (("paid", "Paula"), ("comped", "Carl")):
        subject, html, text = received(mailgun, site["email_id"], members[kind]["email"])
        assert subject == f"Issue 7 for {first}"
        for part in (html, text):
            assert all(w in part for w in PAID_WORDS), (kind, part)
            assert "upgrade for the full story" not in part and "Upgrade to keep reading" not in part
            assert f"Paid analysis for {members[kind]['name']}." in part and f"Hello {first}, " in part
        assert "## The paid part" in text and f"Your link (https://site.test/r?u={members[kind]['uuid']})" in text


async def test_names_are_text_in_html_and_as_typed_in_plain_text(db, mailgun, ts_worker):
    client, settings = ts_worker
    html = '<p>Dear %%{name "reader"}%%</p>'
    site = await seed(db, html=html, subject="Hi {name}", visibility="public")
    await run_send(client, settings, site["email_id"])
    subject, body, text = received(mailgun, site["email_id"], site["members"]["free_tricky"]["email"])
    assert subject == "Hi Bob <b> & Co"
    assert "<p>Dear Bob &lt;b&gt; &amp; Co</p>" in body and "<b>" not in body
    assert text.startswith("Dear Bob <b> & Co\n")


@pytest.mark.parametrize("html, subject, words", [
    ("<p>%%{shoe_size}%%</p>", "s", "malformed replacement '%%{shoe_size}%%'"),
    ("<p>ok</p>", 'Hi {first_name, there}', "malformed replacement '{first_name, there}'"),
    ("", "s", "its post has no HTML to send"),
])
async def test_bad_content_refuses_the_send_before_anything_is_written(db, mailgun, ts_worker, html, subject, words):
    client, settings = ts_worker
    site = await seed(db, html=html, subject=subject)
    if not html:
        await db.execute("UPDATE posts SET html = '' WHERE id = (SELECT post_id FROM emails WHERE id = $1)",
                         site["email_id"])
    with pytest.raises(WorkflowFailureError) as failed:
        await run_send(client, settings, site["email_id"])
    assert words in str(failed.value.cause)
    assert await db.fetchval("SELECT count(*) FROM email_batches") == 0
    email = await db.fetchrow("SELECT status, error FROM emails WHERE id = $1", site["email_id"])
    assert email["status"] == "failed" and words in email["error"]  # the reason stays on the email
    assert mailgun.stats()["messages"] == 0


# --- the command line ------------------------------------------------------------------------------

def cli_env(settings) -> dict[str, str]:
    return {"DATABASE_URL": settings.database_url, "MAILGUN_BASE_URL": settings.mailgun_base_url,
            "MAILGUN_API_KEY": settings.mailgun_api_key.get_secret_value(), "MAILGUN_DOMAIN": settings.mailgun_domain,
            "PRESSROOM_SITE_URL": settings.site_url,
            "PRESSROOM_MEMBERS_LINK_SECRET": settings.members_link_secret.get_secret_value()}


async def run_cli(settings, *args: str):
    # In a thread: the simulator answers on this test's event loop while the command runs.
    return await asyncio.to_thread(pressroom, *args, env=cli_env(settings))


async def test_preview_prints_what_a_member_or_a_segment_gets(db, settings):
    site = await seed(db)
    email_id, members = site["email_id"], site["members"]

    free = await run_cli(settings, "newsletter", "preview", email_id, "--member", members["free"]["id"])
    assert free.returncode == 0, free.stderr
    assert free.stdout.startswith("Subject: Issue 7 for Ann\n")
    assert "Hello Ann, " in free.stdout and "<h1>Issue 7</h1>" in free.stdout
    assert not [w for w in PAID_WORDS if w in free.stdout] and "Upgrade to keep reading" in free.stdout

    paid_text = await run_cli(settings, "newsletter", "preview", email_id, "--member", members["paid"]["id"], "--text")
    assert paid_text.returncode == 0, paid_text.stderr
    assert all(w in paid_text.stdout for w in PAID_WORDS) and "<p>" not in paid_text.stdout
    assert "Paid analysis for Paula Paid." in paid_text.stdout and "## The paid part" in paid_text.stdout

    segment = await run_cli(settings, "newsletter", "preview", email_id, "--segment", "free", "--text")
    assert segment.returncode == 0, segment.stderr
    assert "Subject: Issue 7 for you" in segment.stdout and "Hello there, " in segment.stdout
    assert not [w for w in PAID_WORDS if w in segment.stdout]
    assert await db.fetchval("SELECT count(*) FROM email_batches") == 0


async def test_test_send_is_one_untracked_copy_that_changes_nothing(db, mailgun, settings):
    site = await seed(db)
    email_id = site["email_id"]
    result = await run_cli(settings, "newsletter", "test", email_id, "--to", "editor@example.com")
    assert result.returncode == 0, result.stderr
    [message] = mailgun.messages
    assert list(message.recipients) == ["editor@example.com"]
    assert message.options["tracking-opens"] == "no" and message.options["tracking-clicks"] == "no"
    assert "email-id" not in message.variables  # analytics never counts it
    subject, html, text = message.received_by("editor@example.com")
    assert subject == "[TEST] Issue 7 for you"
    assert all(w in html for w in PAID_WORDS) and "Hello there, " in text and "%recipient." not in html + text
    email = await db.fetchrow("SELECT status, email_count, submitted_at FROM emails WHERE id = $1", email_id)
    assert dict(email) == {"status": "pending", "email_count": 0, "submitted_at": None}
    assert await db.fetchval("SELECT count(*) FROM email_batches") == 0
    assert await db.fetchval("SELECT count(*) FROM email_recipients") == 0

    # To a member's own address: their name and, unless told otherwise, their segment.
    member = site["members"]["free"]
    await run_cli(settings, "newsletter", "test", email_id, "--to", member["email"])
    subject, html, _ = mailgun.messages[-1].received_by(member["email"])
    assert subject == "[TEST] Issue 7 for Ann" and "Paid analysis" not in html
    await run_cli(settings, "newsletter", "test", email_id, "--to", member["email"], "--segment", "paid")
    assert "Paid analysis" in mailgun.messages[-1].received_by(member["email"])[1]


@pytest.mark.parametrize("command, words", [
    (["preview", "{email}", "--member", "no-such-member"], "member no-such-member does not exist"),
    (["preview", "{email}", "--segment", "vip"], "segment 'vip' is not one of free, paid"),
    (["preview", "{email}", "--member", "{member}", "--segment", "free"], "give --member or --segment, not both"),
    (["preview", "no-such-email"], "email no-such-email does not exist"),
    (["test", "{email}", "--to", "not-an-address"], "'not-an-address' is not an e-mail address"),
    (["test", "{email}", "--to", "a@example.com", "--segment", "gold"], "segment 'gold' is not one of free, paid"),
    (["test", "{bad_email}", "--to", "a@example.com"], "malformed replacement '%%{shoe_size}%%'"),
    (["preview", "{empty_email}"], "its post has no HTML to send"),
])
async def test_bad_input_is_one_line_and_nothing_is_sent(db, mailgun, settings, command, words):
    site = await seed(db)
    bad = await seed(db, html="<p>%%{shoe_size}%%</p>")
    empty = await seed(db)
    await db.execute("UPDATE emails SET html = NULL WHERE id = $1", empty["email_id"])
    await db.execute("UPDATE posts SET html = '' WHERE id = (SELECT post_id FROM emails WHERE id = $1)",
                     empty["email_id"])
    args = [part.format(email=site["email_id"], member=site["members"]["free"]["id"], bad_email=bad["email_id"],
                        empty_email=empty["email_id"]) for part in command]
    result = await run_cli(settings, "newsletter", *args)
    assert_one_line_error(result, words)
    assert mailgun.stats()["messages"] == 0
