"""Running the demo again never undoes a member's choice: a reader who left through their link stays
unsubscribed, with their leave recorded, and is not among the next demo email's recipients."""

from __future__ import annotations

from operations.demo_site import DEMO_MEMBER_ADDRESS, seed_site
from pressroom.store.members import leave_by_link


async def test_a_reader_who_left_stays_out_of_every_later_demo(db):
    first = await seed_site(db, members=20, run_tag="one")
    reader = await db.fetchrow("SELECT id, uuid FROM members WHERE email = $1", DEMO_MEMBER_ADDRESS.format(n=3))
    newsletter_uuid = await db.fetchval("SELECT uuid FROM newsletters WHERE id = $1", first.newsletter_id)
    left = await leave_by_link(db, str(reader["uuid"]), str(newsletter_uuid), False, first.email_id)
    assert left["removed"] == 1

    again = await seed_site(db, members=25, run_tag="two")
    assert again.members == 24  # the five new readers joined; the one who left did not come back
    assert await db.fetchval("SELECT count(*) FROM members_newsletters WHERE member_id = $1", reader["id"]) == 0
    events = await db.fetch("SELECT subscribed, source FROM members_subscribe_events WHERE member_id = $1",
                            reader["id"])
    assert [(e["subscribed"], e["source"]) for e in events] == [(False, "link")]

