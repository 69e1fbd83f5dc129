"""An import never undoes a member's own choice: one who left (their link, `members unsubscribe`)
or whose address is suppressed stays off every newsletter whatever the file says; and a site's
export imported back changes nothing at all (`updated: 0`, every table as it was)."""

from __future__ import annotations

import json
import os

from operations.member_import import import_members
from pressroom.store.labels import slugify
from pressroom.store.members import leave_by_link
from tests.members.test_migration import site
from tests.operations.test_waiting import cli
from tests.reference_js import node


def reference_csv(members: list[dict]) -> str:
    """A members export as the reference's own CSV library writes it (@tryghost/members-csv's unparse)."""
    return node("const unparse = require('@tryghost/members-csv').unparse;"
                "console.log(unparse(JSON.parse(require('fs').readFileSync(0, 'utf8'))));", json.dumps(members))


async def newsletters_of(db, email: str) -> list[str]:
    return list(await db.fetchval(
        "SELECT coalesce(array_agg(n.slug ORDER BY n.slug), '{}') FROM members_newsletters mn "
        "JOIN newsletters n ON n.id = mn.newsletter_id JOIN members m ON m.id = mn.member_id WHERE m.email = $1",
        email))


async def test_an_import_does_not_subscribe_again_a_member_who_left_or_is_suppressed(settings, db, tmp_path):
    await site(db)
    env = {**os.environ, "DATABASE_URL": settings.database_url}
    for address in ("linked@example.com", "operated@example.com", "bounced@example.com", "never@example.com"):
        code, _, err = await cli("members", "add", address, env=env)
        assert code == 0, err
    # One leaves through the link in an email, one is unsubscribed with the CLI, one bounced.
    uuid = await db.fetchval("SELECT uuid::text FROM members WHERE email = 'linked@example.com'")
    assert (await leave_by_link(db, uuid, None, True, None))["removed"] == 1
    code, _, err = await cli("members", "unsubscribe", "operated@example.com", env=env)
    assert code == 0, err
    await db.execute("INSERT INTO suppressions (email, reason) VALUES ('bounced@example.com', 'bounce')")
    await db.execute("DELETE FROM members_newsletters mn USING members m WHERE m.id = mn.member_id "
                     "AND m.email IN ('bounced@example.com', 'never@example.com')")
    file = tmp_path / "again.csv"
    file.write_text(reference_csv([{"email": address, "subscribed": True, "created_at": "2020-02-02T00:00:00.000Z"}
                                   for address in ("linked@example.com", "operated@example.com",
                                                   "bounced@example.com", "never@example.com")]), encoding="utf-8")

    report = await import_members(file, settings=settings)
    for address in ("linked@example.com", "operated@example.com", "bounced@example.com"):
        assert await newsletters_of(db, address) == [], address
    # A member who never left one and is not suppressed: the site's file says they subscribed.
    assert await newsletters_of(db, "never@example.com") == ["weekly"]
    assert (report.updated, report.unchanged) == (1, 3)
    assert (await import_members(file, settings=settings)).updated == 0


async def varied_site(db) -> None:
    """Members on different newsletters (two that new members get, one they do not), some who left,
    one suppressed, with labels and tiers, comped with and without a tier."""
    await site(db)
    await db.execute("INSERT INTO newsletters (name, slug, subscribe_on_signup) VALUES ('Daily', 'daily', true), "
                     "('Offers', 'offers', false)")
    people = [  # email, name, note, status, labels, tiers, newsletters
        ("ada@example.com", "Ada", "met at the\nlaunch", "comped", ["VIP", "Press Corps"], ["gold"], ["weekly"]),
        ("bob@example.com", "=Bob", None, "paid", ["VIP"], ["silver-club"], ["daily"]),
        ("cid@example.com", None, None, "free", [], [], ["weekly", "daily"]),
        ("dee@example.com", "Dee", "-note", "free", ["Night Owls"], [], ["offers"]),
        ("eve@example.com", "Eve", None, "comped", [], [], ["weekly", "offers"]),
        ("fay@example.com", None, None, "free", [], [], []),  # left by her link, below
        ("gus@example.com", "Gus", None, "free", ["VIP"], [], ["daily"]),  # suppressed, below
        ("hal@example.com", None, None, "paid", [], [], ["weekly", "daily", "offers"]),
        ("ivy@example.com", None, None, "free", [], [], []),  # unsubscribed by the operator, below
    ]
    for n, (email, name, note, status, labels, tiers, newsletters) in enumerate(people):
        member_id = await db.fetchval(
            "INSERT INTO members (email, name, note, status, created_at) VALUES ($1, $2, $3, $4, "
            "'2024-01-01T00:00:00Z'::timestamptz + $5 * interval '1 day') RETURNING id", email, name, note, status, n)
        for label in labels:
            await db.execute("INSERT INTO labels (name, slug) VALUES ($1, $2) ON CONFLICT DO NOTHING", label,
                             slugify(label))
            await db.execute("INSERT INTO members_labels (member_id, label_id) SELECT $1, id FROM labels "
                             "WHERE name = $2", member_id, label)
        await db.execute("INSERT INTO members_products (member_id, product_id) SELECT $1, id FROM products "
                         "WHERE slug = ANY($2::text[])", member_id, tiers)
        await db.execute("INSERT INTO members_newsletters (member_id, newsletter_id) SELECT $1, id FROM newsletters "
                         "WHERE slug = ANY($2::text[])", member_id, newsletters + (["weekly"] if email in (
                             "fay@example.com", "ivy@example.com") else []))
    uuid = await db.fetchval("SELECT uuid::text FROM members WHERE email = 'fay@example.com'")
    await leave_by_link(db, uuid, None, True, None)
    await db.execute("INSERT INTO suppressions (email, reason) VALUES ('gus@example.com', 'spam')")
    await db.execute("UPDATE members SET email_disabled = true WHERE email = 'gus@example.com'")


# Every row an import may touch, as it is: members (every column), their newsletters, labels and
# tiers, the site's labels, suppressions and who left what.
STATE = {
    "members": "SELECT to_jsonb(m) FROM members m ORDER BY id",
    "members_newsletters": "SELECT to_jsonb(x) FROM members_newsletters x ORDER BY member_id, newsletter_id",
    "members_labels": "SELECT to_jsonb(x) FROM members_labels x ORDER BY member_id, label_id",
    "members_products": "SELECT to_jsonb(x) FROM members_products x ORDER BY member_id, product_id",
    "labels": "SELECT to_jsonb(x) FROM labels x ORDER BY id",
    "suppressions": "SELECT to_jsonb(x) FROM suppressions x ORDER BY id",
    "members_subscribe_events": "SELECT to_jsonb(x) FROM members_subscribe_events x ORDER BY id",
    "outbox": "SELECT to_jsonb(x) FROM outbox x ORDER BY id",
}


async def state(db) -> dict:
    return {table: [row[0] for row in await db.fetch(query)] for table, query in STATE.items()}


async def test_an_export_imported_back_changes_nothing(settings, db, tmp_path):
    await varied_site(db)
    env = {**os.environ, "DATABASE_URL": settings.database_url}
    code, _, err = await cli("members", "unsubscribe", "ivy@example.com", env=env)
    assert code == 0, err
    before = await state(db)
    exported = tmp_path / "members.csv"
    code, out, err = await cli("members", "export", str(exported), env=env)
    assert code == 0, err
    # The reference's own CSV library reads the file as the importer will.
    parsed = json.loads(node(
        "const parse = require('@tryghost/members-csv').parse;"
        "parse(process.argv[1], {email: 'email', subscribed_to_emails: 'subscribed'})"
        ".then((rows) => console.log(JSON.stringify(rows)));", "", str(exported)))
    assert {r["email"]: r["subscribed"] for r in parsed}["bob@example.com"] is True

    code, out, err = await cli("members", "import", str(exported), "--json", env=env)
    assert code == 0, err
    report = json.loads(out)
    assert (report["added"], report["updated"], report["unchanged"], report["refused"]) == (0, 0, 9, [])
    assert (report["labels_given"], report["tiers_given"], report["labels_made"]) == (0, 0, 0)
    assert await state(db) == before
