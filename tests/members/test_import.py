"""`members import FILE.csv` in the reference platform's export format: every row checked on its
own, refused rows reported by line and why (never the address), a re-import changes nothing, and no
welcome email unless asked for."""

from __future__ import annotations

import csv
import json
import os

import pytest

from operations.member_import import import_members
from operations.members import add_member, delete_member
from pressroom.errors import BadInput
from pressroom.settings import load_settings
from tests.operations.test_waiting import cli

HEADER = ["id", "email", "name", "note", "subscribed_to_emails", "complimentary_plan", "stripe_customer_id",
          "created_at", "deleted_at", "labels", "tiers"]
GOOD = [
    ["6401", "ada@example.com", "Ada Lovelace", "met at the\nconference", "true", "false", "",
     "2023-01-05T10:00:00.000Z", "", "vip,Press Corps", ""],
    ["6402", "Bob@Example.com", "", "", "false", "true", "", "2023-02-05T10:00:00.000Z", "", "", "Gold"],
    ["6403", "carol@example.com", "Carol", "", "", "", "cus_1", "", "", "vip", ""],
]
BAD = [  # (row, the reason's words)
    (["6404", "not-an-address", "Dan", "", "true", "false", "", "", "", "", ""], "the email is not a valid address"),
    (["6405", "", "Eve", "", "true", "false", "", "", "", "", ""], "no email"),
    (["6406", "frank@example.com", "Frank\u202e", "", "true", "false", "", "", "", "", ""],
     "the name contains a control or invisible character"),
    (["6407", "ADA@example.com", "Ada again", "", "true", "false", "", "", "", "", ""], "the same email as line 2"),
    (["6408", "gina@example.com", "Gina", "", "maybe", "false", "", "", "", "", ""],
     "subscribed_to_emails is neither true nor false"),
    (["6409", "hal@example.com", "Hal", "", "true", "false", "", "yesterday", "", "", ""],
     "created_at 'yesterday' is not an ISO 8601 time"),
    (["6410", "ivy@example.com", "Ivy"], "has 3 cells; the header names 11 columns"),
]


def write_csv(path, rows) -> str:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        writer.writerows(rows)
    return str(path)


async def state(db) -> dict:
    rows = await db.fetch(
        "SELECT m.email, m.name, m.note, m.status, m.created_at, array_remove(array_agg(n.slug ORDER BY n.slug), NULL) "
        "AS newsletters FROM members m LEFT JOIN members_newsletters mn ON mn.member_id = m.id "
        "LEFT JOIN newsletters n ON n.id = mn.newsletter_id GROUP BY m.id ORDER BY m.email")
    return {row["email"]: dict(row) for row in rows}


async def test_import_checks_every_row_reports_the_refused_and_is_idempotent(settings, db, tmp_path):
    await db.execute("INSERT INTO newsletters (name, slug) VALUES ('Weekly', 'weekly')")
    await db.execute("INSERT INTO newsletters (name, slug, subscribe_on_signup) VALUES ('Offers', 'offers', false)")
    await db.execute("INSERT INTO products (name, slug) VALUES ('Gold', 'gold')")
    file = write_csv(tmp_path / "members.csv", GOOD + [row for row, _ in BAD])

    report = await import_members(file, settings=settings)
    assert (report.rows, report.added, report.updated, report.unchanged) == (10, 3, 0, 0)
    # The note's line break makes line 2 two lines.
    assert [(r["line"], r["reason"][:len(why)]) for r, (_, why) in zip(report.refused, BAD, strict=True)] == \
        [(line, why) for line, (_, why) in zip(range(6, 13), BAD, strict=True)]
    shown = json.dumps(report.refused)
    assert "example.com" not in shown and "not-an-address" not in shown and "Frank" not in shown
    assert report.ignored_columns == ["id", "deleted_at"]
    assert (report.labels_made, report.labels_given) == (2, 3)
    assert {r["slug"]: r["name"] for r in await db.fetch("SELECT slug, name FROM labels")} == \
        {"vip": "vip", "press-corps": "Press Corps"}
    assert report.welcome_queued == 0 and await db.fetchval("SELECT count(*) FROM outbox") == 0

    members = await state(db)
    assert list(members) == ["Bob@example.com", "ada@example.com", "carol@example.com"]
    ada, bob, carol = members["ada@example.com"], members["Bob@example.com"], members["carol@example.com"]
    assert (ada["name"], ada["note"], ada["status"], ada["newsletters"]) == \
        ("Ada Lovelace", "met at the\nconference", "free", ["weekly"])
    assert ada["created_at"].isoformat() == "2023-01-05T10:00:00+00:00"
    assert (bob["name"], bob["status"], bob["newsletters"]) == (None, "comped", [])
    assert await db.fetchval("SELECT array_agg(p.slug) FROM members_products mp JOIN products p "
                             "ON p.id = mp.product_id JOIN members m ON m.id = mp.member_id "
                             "WHERE m.email = 'Bob@example.com'") == ["gold"]
    # A Stripe customer without a tier: free, as the reference's Stripe would say without a
    # subscription, and said in the report (line 5: the note before spans two).
    assert (carol["status"], carol["newsletters"]) == ("free", ["weekly"])
    assert (report.paid_stripe, report.stripe_without_tier, report.tiers_given) == (0, [5], 1)

    again = await import_members(file, settings=settings)
    assert (again.added, again.updated, again.unchanged, len(again.refused)) == (0, 0, 3, 7)
    assert (again.labels_made, again.labels_given) == (0, 0)
    assert await state(db) == members

    # A changed export: a new name, an unsubscribe, an address in another case matches its member.
    file = write_csv(tmp_path / "changed.csv", [
        ["", "ADA@EXAMPLE.COM", "Ada King", "", "false", "", "", "", "", "", ""],
        ["", "dora@example.com", "Dora", "", "", "", "", "", "", "", ""]])
    changed = await import_members(file, settings=settings)
    assert (changed.added, changed.updated, changed.unchanged) == (1, 1, 0)
    members = await state(db)
    assert (members["ada@example.com"]["name"], members["ada@example.com"]["note"],
            members["ada@example.com"]["newsletters"]) == ("Ada King", "met at the\nconference", [])
    assert members["dora@example.com"]["newsletters"] == ["weekly"]


async def test_a_file_that_is_not_a_member_list_writes_nothing(settings, db, tmp_path):
    cases = {"empty.csv": b"", "no-email.csv": b"name,note\nAda,x\n", "twice.csv": b"email,email\na@b.co,c@d.co\n"}
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(BadInput):
            await import_members(tmp_path / name, settings=settings)
    with pytest.raises(BadInput, match="cannot be read"):
        await import_members(tmp_path / "missing.csv", settings=settings)
    (tmp_path / "latin1.csv").write_bytes("email,name\nzoe@example.com,Zo\xeb\nyan@example.com,Yan\n".encode("latin-1"))
    report = await import_members(tmp_path / "latin1.csv", settings=settings)
    assert report.refused == [{"line": 2, "reason": "holds bytes that are not UTF-8"}] and report.added == 1
    assert await db.fetchval("SELECT count(*) FROM members") == 1


async def test_welcome_only_when_asked_and_a_deleted_address_stays_suppressed(postgres_url, mailgun, db, tmp_path):
    settings = load_settings(database_url=postgres_url, address_hash_key="the-site-key-0123456789abcdef")
    gone = await add_member("gone@example.com", settings=settings)
    await db.execute("INSERT INTO suppressions (email, reason) VALUES ('gone@example.com', 'bounce')")
    await delete_member(gone.member_id, settings=settings)
    await db.execute("DELETE FROM outbox")
    file = write_csv(tmp_path / "m.csv", [["", "gone@example.com", "", "", "", "", "", "", "", "", ""],
                                          ["", "new@example.com", "", "", "", "", "", "", "", "", ""]])
    report = await import_members(file, welcome=True, settings=settings)
    # The suppressed address comes back suppressed, and is not welcomed: only new@ is.
    assert (report.added, report.welcome_queued, report.suppressions_restored) == (2, 1, 1)
    assert await db.fetchval("SELECT reason FROM suppressions WHERE email = 'gone@example.com'") == "bounce"
    assert await db.fetchval("SELECT m.email FROM outbox o JOIN members m ON m.id = o.payload->>'member_id'") \
        == "new@example.com"
    entries = await db.fetch("SELECT o.idempotency_key, o.payload_digest, o.payload->>'member_id' AS member_id "
                             "FROM outbox o ORDER BY 1")
    from activities.outbox import payload_digest
    assert all(e["idempotency_key"] == f"member-created-{e['member_id']}"
               and e["payload_digest"] == payload_digest({"member_id": e["member_id"], "welcome": True})
               for e in entries)
    again = await import_members(file, welcome=True, settings=settings)
    assert (again.added, again.welcome_queued) == (0, 0)


async def test_import_from_the_command_line(settings, db, tmp_path):
    file = write_csv(tmp_path / "members.csv", GOOD + [row for row, _ in BAD])
    env = {**os.environ, "DATABASE_URL": settings.database_url}
    await db.execute("INSERT INTO products (name, slug) VALUES ('Gold', 'gold')")
    code, out, err = await cli("members", "import", file, env=env)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == (f"imported {file} (the reference platform's export): 10 rows: 3 added, 0 updated, "
                        "0 unchanged, 7 refused")
    assert lines[1].startswith("  line 6: the email is not a valid address")
    assert "labels: 3 given to members; 2 labels the site did not have made" in lines
    assert "columns not imported: id, deleted_at" in lines
    assert "no welcome emails queued" in out and "example.com" not in out + err
    code, out, err = await cli("members", "import", file, "--json", env=env)
    assert code == 0, err
    again = json.loads(out)
    assert (again["added"], again["unchanged"], again["labels_given"], len(again["refused"])) == (0, 3, 0, 7)
    assert again["refused"][0] == {"line": 6, "reason": "the email is not a valid address: An email address must "
                                                        "have an @-sign"}


def test_the_plain_address_shortcut_agrees_with_email_validator():
    from pydantic import EmailStr, TypeAdapter, ValidationError

    from pressroom.inputs import email_address
    from tests.hostile.corpus import STRANGE_ADDRESSES, UNUSABLE_ADDRESSES

    addresses = [*STRANGE_ADDRESSES.values(), *UNUSABLE_ADDRESSES.values(), "Ada.L+x@Example.COM", "a@b.co",
                 "x@mail.test", "x@host.localhost", "y@a.onion", "z@example.c0m", "-a@example.com", "a.@example.com",
                 "l" * 64 + "@example.com", "l" * 65 + "@example.com", "a@-example.com", "a@example-.com",
                 "a@" + "d" * 60 + ".com", "o'connor@example.org", "a@example.museum"]
    for address in addresses:
        try:
            expected = TypeAdapter(EmailStr).validate_python(address)
        except ValidationError:
            expected = None
        try:
            found = email_address(address, "the email")
        except BadInput:
            found = None
        assert found == expected, address
