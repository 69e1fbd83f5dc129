"""Chunked batch creation against real PostgreSQL: the same batches as the one-statement creation
(segments, domain warming, batch numbering), each chunk committed whole, and a creation stopped
mid-chunk continuing after the last chunk written, with every member exactly once."""

from __future__ import annotations

import json

import pytest
from temporalio.testing import ActivityEnvironment

from activities.newsletter.audience import AUDIENCE_BY_SEGMENT, audience
from activities.newsletter.batches import CHUNK_BATCHES, BatchCreationActivities
from activities.newsletter.models import CreateBatchesInput
from pressroom.dependencies import Dependencies
from pressroom.inputs import PLAIN_ADDRESS, PLAIN_DOMAIN_LENGTH, SPECIAL_USE_DOMAINS, recipient_problem

from .conftest import seed_email

SEGMENTED = '<p data-gh-segment="status:free">Upgrade?</p><p>Hello %recipient.name%</p>'
BATCH_SIZE = 7  # 70 members a chunk: a few hundred members make chunks in every group


def activities_for(settings, db) -> BatchCreationActivities:
    return BatchCreationActivities(Dependencies(settings=settings, pool=db, provider=None, temporal=None))


async def second_email(db, email_id: str) -> str:
    """Another email of the same post's newsletter: the same audience, batched the other way."""
    post_id = await db.fetchval(
        "INSERT INTO posts (title, slug, html, newsletter_id, status, published_at) SELECT title || ' again', "
        "slug || '-again', html, newsletter_id, status, published_at FROM posts "
        "WHERE id = (SELECT post_id FROM emails WHERE id = $1) RETURNING id", email_id)
    return await db.fetchval(
        "INSERT INTO emails (post_id, newsletter_id, subject, html, plaintext, recipient_filter) "
        "SELECT $2, newsletter_id, subject, html, plaintext, recipient_filter FROM emails WHERE id = $1 RETURNING id",
        email_id, post_id)


async def assignment(db, email_id: str) -> dict[str, tuple[str, str | None, bool]]:
    """Each recipient's batch (its id without the email's), segment and domain."""
    rows = await db.fetch(
        "SELECT r.member_id, substr(b.id, length($1) + 1) AS batch, b.member_segment, b.fallback_sending_domain "
        "FROM email_recipients r JOIN email_batches b ON b.id = r.batch_id WHERE r.email_id = $1", email_id)
    return {row["member_id"]: (row["batch"], row["member_segment"], row["fallback_sending_domain"]) for row in rows}


async def create_in_chunks(env: ActivityEnvironment, activities: BatchCreationActivities, email_id: str) -> int:
    """Call create_batches as the workflow does until nothing is left; returns how many calls."""
    calls = 0
    while True:
        counts = await env.run(activities.create_batches,
                               CreateBatchesInput(email_id=email_id, retry_failed=calls == 0, chunked=True))
        calls += 1
        if not counts.creating:
            return calls


@pytest.mark.parametrize("segmented, warming", [(False, False), (True, False), (False, True), (True, True)])
async def test_chunks_write_the_same_batches_as_one_statement(db, mailgun, newsletter_settings, segmented, warming):
    mailgun.add_domain("fallback.test.example")
    settings = newsletter_settings(batch_size=BATCH_SIZE, **(
        {"fallback_domain": "fallback.test.example", "fallback_address": "noreply@fallback.test.example"}
        if warming else {}))
    seeded = await seed_email(db, members=1000, paid_every=3, html=SEGMENTED if segmented else "<p>Hello</p>")
    # Open rates with ties and gaps: warming ranks by them, then by member id.
    await db.execute("UPDATE members SET email_open_rate = CASE WHEN random() < 0.2 THEN NULL "
                     "ELSE floor(random() * 5)::int * 20 END")
    chunked = await second_email(db, seeded.email_id)
    env, activities = ActivityEnvironment(), activities_for(settings, db)

    whole = await env.run(activities.create_batches, CreateBatchesInput(email_id=seeded.email_id, retry_failed=True))
    calls = await create_in_chunks(env, activities, chunked)

    assert await assignment(db, chunked) == await assignment(db, seeded.email_id)
    assert len(await assignment(db, chunked)) == 1000
    assert calls >= 1000 // (CHUNK_BATCHES * BATCH_SIZE)
    counts = await env.run(activities.create_batches, CreateBatchesInput(email_id=chunked, retry_failed=True,
                                                                         chunked=True))
    assert counts == whole  # the totals, once creation is done, are what was written
    assert await db.fetchval("SELECT email_count FROM emails WHERE id = $1", chunked) == 1000
    if warming:
        assert await db.fetchval("SELECT csd_email_count FROM emails WHERE id = $1", chunked) == \
            await db.fetchval("SELECT csd_email_count FROM emails WHERE id = $1", seeded.email_id) == 200


async def test_a_chunk_that_fails_leaves_nothing_and_the_next_call_continues(db, mailgun, newsletter_settings):
    settings = newsletter_settings(batch_size=BATCH_SIZE)
    seeded = await seed_email(db, members=500, paid_every=2, html=SEGMENTED)
    reference = await second_email(db, seeded.email_id)
    env, activities = ActivityEnvironment(), activities_for(settings, db)
    await env.run(activities.create_batches, CreateBatchesInput(email_id=reference, retry_failed=True))
    # A member of the third chunk cannot be written for this email (a stand-in for a crash mid-chunk).
    doomed = (await db.fetch("SELECT member_id FROM email_recipients WHERE email_id = $1 ORDER BY batch_id",
                             reference))[2 * CHUNK_BATCHES * BATCH_SIZE + 5]["member_id"]
    await db.execute(f"""
        CREATE FUNCTION refuse_doomed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.email_id = '{seeded.email_id}' AND NEW.member_id = '{doomed}' THEN
                RAISE EXCEPTION 'the worker died';
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER refuse_doomed BEFORE INSERT ON email_recipients FOR EACH ROW EXECUTE FUNCTION refuse_doomed();
    """)
    try:
        for call in range(2):
            await env.run(activities.create_batches,
                          CreateBatchesInput(email_id=seeded.email_id, retry_failed=call == 0, chunked=True))
        with pytest.raises(Exception, match="the worker died"):
            await env.run(activities.create_batches,
                          CreateBatchesInput(email_id=seeded.email_id, retry_failed=False, chunked=True))
        # Two chunks, whole; of the third, nothing: no batch, no recipient, the cursor where it was.
        assert await db.fetchval("SELECT count(*) FROM email_recipients WHERE email_id = $1",
                                 seeded.email_id) == 2 * CHUNK_BATCHES * BATCH_SIZE
        assert await db.fetchval("SELECT count(*) FROM email_batches WHERE email_id = $1",
                                 seeded.email_id) == 2 * CHUNK_BATCHES
        assert await db.fetchval("SELECT written_in_group FROM email_batch_creation WHERE email_id = $1",
                                 seeded.email_id) == 2 * CHUNK_BATCHES * BATCH_SIZE
    finally:
        await db.execute("DROP TRIGGER refuse_doomed ON email_recipients; DROP FUNCTION refuse_doomed()")

    await create_in_chunks(env, activities, seeded.email_id)

    assert await assignment(db, seeded.email_id) == await assignment(db, reference)
    assert await db.fetchval("SELECT count(*) FROM (SELECT member_id FROM email_recipients WHERE email_id = $1 "
                             "GROUP BY member_id HAVING count(*) > 1) twice", seeded.email_id) == 0


async def test_a_send_of_batches_made_at_once_reuses_them(db, mailgun, newsletter_settings):
    """Batches written by a run of the release before chunks are reused as they are, failed ones reset."""
    settings = newsletter_settings(batch_size=BATCH_SIZE)
    seeded = await seed_email(db, members=100)
    env, activities = ActivityEnvironment(), activities_for(settings, db)
    whole = await env.run(activities.create_batches, CreateBatchesInput(email_id=seeded.email_id, retry_failed=True))
    before = await assignment(db, seeded.email_id)
    await db.execute("UPDATE email_batches SET status = 'failed' WHERE id = $1 || '-all-00003'", seeded.email_id)

    counts = await env.run(activities.create_batches,
                           CreateBatchesInput(email_id=seeded.email_id, retry_failed=True, chunked=True))

    assert not counts.creating and counts.batches_total == whole.batches_total == 15
    assert await assignment(db, seeded.email_id) == before
    assert await db.fetchval("SELECT status FROM email_batches WHERE id = $1 || '-all-00003'",
                             seeded.email_id) == "pending"
    assert await db.fetchval("SELECT count(*) FROM email_batch_creation") == 0


@pytest.mark.parametrize("members, warming", [(300, False), (300, True), (150, True)])
async def test_the_planned_totals_are_the_ones_written_with_members_left_out(db, mailgun, newsletter_settings,
                                                                             members, warming):
    """The totals planned on the first call (from the pass that finds unusable addresses, or, when
    warming sends some members through the fallback domain, from its own count) are those written."""
    mailgun.add_domain("fallback.test.example")
    settings = newsletter_settings(batch_size=BATCH_SIZE, **(
        {"fallback_domain": "fallback.test.example", "fallback_address": "noreply@fallback.test.example"}
        if warming else {}))
    seeded = await seed_email(db, members=members, paid_every=3, html=SEGMENTED)
    await db.execute("UPDATE members SET email_open_rate = floor(random() * 5)::int * 20")
    left_out = await db.fetch(  # every seventh member, free and paid alike: a comma in the stored address
        """UPDATE members SET email = replace(email, '@', ',x@') WHERE id IN (
               SELECT member_id FROM members_newsletters WHERE newsletter_id = $1)
             AND substring(email FROM '^m([0-9]+)-')::int % 7 = 0 RETURNING id""", seeded.newsletter_id)
    env, activities = ActivityEnvironment(), activities_for(settings, db)

    planned = await env.run(activities.create_batches,
                            CreateBatchesInput(email_id=seeded.email_id, retry_failed=True, chunked=True))
    await create_in_chunks(env, activities, seeded.email_id)
    written = await env.run(activities.create_batches,
                            CreateBatchesInput(email_id=seeded.email_id, retry_failed=True, chunked=True))

    assert planned.creating and not written.creating
    assert (planned.batches_total, planned.recipients_total) == (written.batches_total, written.recipients_total)
    assert written.recipients_total == members - len(left_out) == len(await assignment(db, seeded.email_id))
    assert await db.fetchval("SELECT skipped_recipients FROM emails WHERE id = $1", seeded.email_id) == len(left_out)
    if warming:  # the first 200 (day one's limit) through the custom domain, the rest through the fallback one
        assert await db.fetchval("SELECT csd_email_count FROM emails WHERE id = $1", seeded.email_id) == \
            min(200, members - len(left_out))


async def test_who_was_left_out_is_judged_when_the_audience_was_taken(db, mailgun, newsletter_settings):
    """A chunked creation counts its left-out members at its last chunk, with the tiers as they were
    when its audience was taken (email_batch_creation.audience_at), as its chunks chose recipients:
    a member whose tier ended in between was in the audience, left out for their address only."""
    seeded = await seed_email(db, members=100, recipient_filter="tier:gold")
    await db.execute("INSERT INTO products (name, slug) VALUES ('Gold', 'gold')")
    await db.execute("INSERT INTO members_products (member_id, product_id) SELECT mn.member_id, p.id "
                     "FROM members_newsletters mn, products p WHERE mn.newsletter_id = $1 AND p.slug = 'gold'",
                     seeded.newsletter_id)
    unusable = await db.fetchval("UPDATE members SET email = replace(email, '@', ',x@') WHERE email LIKE 'm1-%' "
                                 "RETURNING id")
    env, activities = ActivityEnvironment(), activities_for(newsletter_settings(batch_size=BATCH_SIZE), db)

    planned = await env.run(activities.create_batches,
                            CreateBatchesInput(email_id=seeded.email_id, retry_failed=True, chunked=True))
    # The audience taken an hour ago, and the member's tier ended half an hour ago: in the audience then.
    taken = await db.fetchval("UPDATE email_batch_creation SET audience_at = audience_at - interval '1 hour' "
                              "WHERE email_id = $1 RETURNING audience_at", seeded.email_id)
    await db.execute("UPDATE members_products SET expiry_at = $2::timestamptz + interval '30 minutes' "
                     "WHERE member_id = $1", unusable, taken)
    await create_in_chunks(env, activities, seeded.email_id)

    assert planned.creating
    left_out = await db.fetchval("SELECT left_out FROM emails WHERE id = $1", seeded.email_id)
    assert json.loads(left_out) == {"unusable-address": 1}


async def test_the_audience_pass_sends_every_address_outside_the_plain_shape_to_a_closer_look(db):
    """AUDIENCE_BY_SEGMENT's `unplain`: special-use top-level domains in any case, a name with no dot or
    ending in one, and text after the domain's last dot that is not letters; never a plain address."""
    seeded = await seed_email(db, members=3)
    odd = ["a@news.onion", "b@host.LocalHost", "c@x.Arpa", "d@site.invalid", "e@printer.local", "f@nodot",
           "g@trailing.example.", "h@digits.example.123", "i@under_score.example", "j@x.onion.example.",
           "k@a.b.c.onion"]
    plain = ["l@onion.example", "m@local.example.org", "n@arpa.co", "o@x.test", "p@news.localhost.example"]
    ids = dict(await db.fetch(
        """WITH added AS (INSERT INTO members (email, name, created_at)
                          SELECT a, '', now() - interval '1 hour' FROM unnest($1::text[]) a RETURNING id, email),
           subscribed AS (INSERT INTO members_newsletters (member_id, newsletter_id) SELECT id, $2 FROM added)
           SELECT email, id FROM added""", [*odd, *plain], seeded.newsletter_id))
    email = await db.fetchrow("SELECT newsletter_id, post_id, recipient_filter, now() AS created_at FROM emails "
                              "WHERE id = $1", seeded.email_id)
    chosen = audience(email, as_of=email["created_at"], tiers=False)
    [row] = await db.fetch(chosen.sql(AUDIENCE_BY_SEGMENT), *chosen.params, PLAIN_ADDRESS,
                           list(SPECIAL_USE_DOMAINS), PLAIN_DOMAIN_LENGTH)
    assert row["n"] == 3 + len(odd) + len(plain)
    assert sorted(row["unplain"]) == sorted(ids[address] for address in odd)
    # email-validator agrees on the plain ones, as the closer look would.
    assert all(recipient_problem(address) is None for address in plain)
