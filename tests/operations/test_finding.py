"""An operator finds every id and understands an email without SQL: the lists, `members show`,
`outbox show` by what operators have, and `newsletter report`, through the real CLI."""

from __future__ import annotations

import asyncio
import json

from operations.members import add_member
from tests.newsletter.conftest import seed_email
from tests.operations.test_waiting import cli, cli_env
from worker import running_worker

LIST_COMMANDS = (("newsletter", "list"), ("posts", "list"), ("members", "list"), ("outbox", "list"))


async def json_of(*args: str, env) -> dict:
    code, out, err = await cli(*args, "--json", env=env)
    assert code == 0, err
    return json.loads(out)


async def test_an_empty_site_lists_nothing_and_says_so(dev_env, settings, db):
    env = cli_env(settings, dev_env)
    # Independent commands, each its own process, all at once.
    answers = await asyncio.gather(*(json_of(*command, env=env) for command in LIST_COMMANDS))
    assert answers == [{"items": [], "next_after": None}] * len(LIST_COMMANDS)
    *lists, member, report, entry = await asyncio.gather(
        *(cli(*command, env=env) for command in LIST_COMMANDS), cli("members", "show", "nobody@example.com", env=env),
        cli("newsletter", "report", "no-such-email", env=env), cli("outbox", "show", "no-such-entry", env=env))
    for code, out, err in lists:
        assert code == 0, err
        assert " match" in out and "Traceback" not in out + err
    code, _, err = member
    assert code == 1 and err.startswith("error: no member has that address")
    code, _, err = report
    assert code == 1 and "email no-such-email does not exist" in err
    code, _, err = entry
    assert code == 1 and "outbox entry no-such-entry does not exist" in err


async def test_lists_page_newest_first_with_filters(dev_env, settings, db):
    env = cli_env(settings, dev_env)
    seeded = await seed_email(db, members=7, paid_every=3)
    # Distinct creation times, so "newest first" has one right answer.
    await db.execute("UPDATE members SET created_at = now() - (substring(email from 'm(\\d+)-')::int * interval '1 s')")
    newest_first = [r["id"] for r in await db.fetch("SELECT id FROM members ORDER BY created_at DESC")]

    seen, after = [], None
    while True:
        page = await json_of("members", "list", "--limit", "3", *(("--after", after) if after else ()), env=env)
        assert len(page["items"]) <= 3
        seen += [row["member_id"] for row in page["items"]]
        after = page["next_after"]
        if after is None:
            break
        assert after == page["items"][-1]["member_id"]
    assert seen == newest_first

    # The filters, the human page and the refusals: independent commands, each its own process, all at once.
    (paid, subscribers, future, emails, submitted, posts, (code, out, err), gold, yesterday,
     unknown_post) = await asyncio.gather(
        json_of("members", "list", "--status", "paid", env=env),
        json_of("members", "list", "--newsletter", seeded.newsletter_id, "--since", "2h", env=env),
        json_of("members", "list", "--since", "2099-01-01T00:00:00+00:00", env=env),
        json_of("newsletter", "list", "--status", "pending", env=env),
        json_of("newsletter", "list", "--status", "submitted", env=env),
        json_of("posts", "list", env=env),
        cli("members", "list", "--limit", "3", env=env),
        cli("members", "list", "--status", "gold", env=env),
        cli("members", "list", "--since", "yesterday", env=env),
        cli("posts", "list", "--after", "no-such-post", env=env))
    assert {row["status"] for row in paid["items"]} == {"paid"} and len(paid["items"]) == 2
    assert len(subscribers["items"]) == 7
    assert future["items"] == []

    assert code == 0, err
    assert newest_first[0] in out and f"more: pressroom members list --after {newest_first[2]}" in out

    assert [(row["email_id"], row["post_id"]) for row in emails["items"]] == [(seeded.email_id, seeded.post_id)]
    assert submitted["items"] == []
    assert [(row["post_id"], row["email_id"], row["status"]) for row in posts["items"]] == [
        (seeded.post_id, seeded.email_id, "published")]

    code, _, err = gold
    assert code == 1 and "--status 'gold' is not one of free, paid, comped" in err
    code, _, err = yesterday
    assert code == 1 and "--since 'yesterday' is not a time: give 30m, 24h, 7d (ago) or an ISO 8601 time" in err
    code, _, err = unknown_post
    assert code == 1 and "--after no-such-post: no post has that id" in err


async def test_outbox_entries_are_found_by_what_operators_have(dev_env, settings, db):
    env = cli_env(settings, dev_env)
    await db.execute("INSERT INTO automated_emails (name, slug, subject, html) VALUES "
                     "('Welcome', 'member-welcome-email-free', 'Welcome!', '<p>Hi</p>')")
    added = await add_member("finder@example.com", welcome=True, settings=settings)
    listed = await json_of("outbox", "list", "--status", "pending", env=env)
    [row] = listed["items"]
    assert row["member_id"] == added.member_id and row["idempotency_key"] == added.welcome_key
    assert (await json_of("outbox", "list", "--member", "someone-else", env=env))["items"] == []
    names = (row["outbox_id"], added.member_id, added.welcome_key, f"outbox-{added.welcome_key}", "Finder@Example.com")
    *entries, (missing_code, _, missing_err), (code, out, err), profile = await asyncio.gather(  # all at once
        *(json_of("outbox", "show", name, env=env) for name in names), cli("outbox", "show", "nobody@example.com",
                                                                           env=env),
        cli("outbox", "show", added.member_id, env=env), json_of("members", "show", "Finder@Example.com", env=env))
    for entry in entries:
        assert entry["outbox_id"] == row["outbox_id"] and entry["member_id"] == added.member_id
    assert missing_code == 1 and "no member has that address" in missing_err and "nobody@" not in missing_err
    assert code == 0 and row["outbox_id"] in out and "UTC" in out, err

    assert profile["member_id"] == added.member_id and profile["suppression"] is None
    assert [o["outbox_id"] for o in profile["outbox"]] == [row["outbox_id"]]


async def test_report_and_member_say_what_happened_and_who_was_left_out(dev_env, settings, db, mailgun):
    env = cli_env(settings, dev_env)
    seeded = await seed_email(db, members=10, paid_every=2,
                              html='<p>Hi</p><div data-gh-segment="status:free">Upgrade!</div>')
    members = [r["id"] for r in await db.fetch("SELECT id FROM members ORDER BY email")]
    bounced, disabled, gone, *_ = members
    await db.execute("INSERT INTO suppressions (email, reason) SELECT email, 'bounce' FROM members WHERE id = $1",
                     bounced)
    await db.execute("UPDATE members SET email_disabled = true WHERE id = $1", disabled)
    await db.execute("DELETE FROM members_newsletters WHERE member_id = $1", gone)
    async with running_worker(dev_env.client, settings):
        code, out, err = await cli("newsletter", "send", seeded.email_id, "--wait", env=env)
    assert code == 0 and "submitted" in out, err

    # What analytics would have recorded: deliveries, opens, one failure per kind, a complaint.
    recipients = [r["id"] for r in await db.fetch(
        "SELECT id FROM email_recipients WHERE email_id = $1 ORDER BY member_email", seeded.email_id)]
    assert len(recipients) == 7
    await db.execute("UPDATE email_recipients SET delivered_at = now() - interval '30 minutes' "
                     "WHERE id = ANY($1::text[])", recipients[:5])
    await db.execute("UPDATE email_recipients SET opened_at = now() - interval '20 minutes' + (random() * "
                     "interval '10 minutes') WHERE id = ANY($1::text[])", recipients[:3])
    for recipient, severity, code in ((recipients[5], "permanent", 550), (recipients[6], "temporary", 421)):
        await db.execute(
            "INSERT INTO email_recipient_failures (email_id, member_id, email_recipient_id, code, message, severity, "
            "failed_at, event_id) SELECT email_id, member_id, id, $2, $3 || member_email || '> refused', $4, now(), "
            "$1 FROM email_recipients WHERE id = $1", recipient, code, "mailbox <", severity)
    # …and its aggregation of the email's figures, with its own statement.
    from activities.delivery_events.aggregates import _AGGREGATE_EMAILS

    await db.execute("INSERT INTO email_analytics_dirty_emails (email_id) VALUES ($1)", seeded.email_id)
    await db.execute(_AGGREGATE_EMAILS)
    complainer = await db.fetchval("SELECT member_id FROM email_recipients WHERE id = $1", recipients[0])
    await db.execute("INSERT INTO email_spam_complaint_events (member_id, email_id, email_address) "
                     "VALUES ($1, $2, 'x')", complainer, seeded.email_id)

    failed_member = await db.fetchval("SELECT member_id FROM email_recipients WHERE id = $1", recipients[5])
    # What the operator reads, each command its own process, all at once.
    (report, (code, out, err), left_out, only, profile, (failed_code, failed_out, failed_err), bounced_profile,
     gone_profile) = await asyncio.gather(
        json_of("newsletter", "report", seeded.email_id, env=env),
        cli("newsletter", "report", seeded.email_id, env=env),
        json_of("members", "list", "--left-out-of", seeded.email_id, env=env),
        json_of("members", "list", "--left-out-of", seeded.email_id, "--reason", "disabled", env=env),
        json_of("members", "show", complainer, env=env),
        cli("members", "show", failed_member, env=env),
        json_of("members", "show", bounced, env=env),
        json_of("members", "show", gone, env=env))
    assert (report["recipients"], report["sent"], report["delivered"], report["opened"]) == (7, 7, 5, 3)
    assert (report["failed"], report["failed_permanent"], report["failed_temporary"]) == (2, 1, 1)
    assert report["complained"] == 1 and report["unsubscribed"] == 0
    assert report["rates"]["delivered"] == round(100 * 5 / 7, 1)
    assert report["left_out"] == {"suppressed-bounce": 1, "suppressed-complaint": 0, "disabled": 1,
                                  "not-subscribed": 1, "not-in-filter": 0, "unusable-address": 0, "other": 0}
    assert {s["segment"]: s["recipients"] for s in report["segments"]} == {"free": 4, "paid": 3}
    assert sum(b["opens"] for b in report["opens_over_time"]["buckets"]) == 3
    assert [f["message"] for f in report["top_failures"]] == ["mailbox <<address>> refused"] * 2
    assert "@" not in json.dumps(report["top_failures"])

    assert code == 0, err
    print(out)
    assert "suppressed after a bounce" in out and "opens over time" in out and "█" in out
    assert f"pressroom members list --left-out-of {seeded.email_id} --reason disabled" in out

    assert {(row["member_id"], row["reason"]) for row in left_out["items"]} == {
        (bounced, "suppressed-bounce"), (disabled, "disabled"), (gone, "not-subscribed")}
    assert [row["member_id"] for row in only["items"]] == [disabled]

    [email] = profile["emails"]
    assert email["email_id"] == seeded.email_id and email["outcome"] == "complained"
    assert failed_code == 0 and "failed (permanent): 550" in failed_out, failed_err
    assert bounced_profile["suppression"]["reason"] == "bounce" and bounced_profile["emails"] == []
    assert not any(s["subscribed"] for s in gone_profile["subscriptions"])

    # An open applied and not yet recounted: the figures above the chart read the same rows as the chart.
    await db.execute("UPDATE email_recipients SET delivered_at = now(), opened_at = now() WHERE id = $1",
                     recipients[6])
    await db.execute("INSERT INTO email_analytics_dirty_emails (email_id) VALUES ($1)", seeded.email_id)
    pending = await json_of("newsletter", "report", seeded.email_id, env=env)
    assert (pending["delivered"], pending["opened"]) == (6, 4)
    assert sum(b["opens"] for b in pending["opens_over_time"]["buckets"]) == pending["opened"]
