"""A migration from the reference platform: its export read as its importer reads it (complimentary
members in its default tier, Stripe customers not made free without a word, no member created in
the future, its label slugs), a Mailchimp export, a dry run, bounded rows, one member per mailbox,
and `members export` in its format, read back by its own CSV library and by `members import`."""

from __future__ import annotations

import csv
import json
import os
from datetime import UTC, datetime

import pytest

from operations import member_import
from operations.member_import import MAILCHIMP, REFERENCE, import_members
from operations.members import add_member, member_profile
from pressroom.errors import BadInput
from pressroom.inputs import email_address, free_text
from pressroom.store.labels import slugify
from tests.operations.test_waiting import cli
from tests.reference_js import node

HEADER = ["id", "email", "name", "note", "subscribed_to_emails", "complimentary_plan", "stripe_customer_id",
          "created_at", "deleted_at", "labels", "tiers"]


def write_rows(path, rows, header=HEADER) -> str:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


def row(email: str, **cells: str) -> list[str]:
    values = {"email": email, **cells}
    return [values.get(column, "") for column in HEADER]


async def site(db) -> None:
    """A site as the reference's: one signup newsletter, a free tier and two paid ones (Gold the default)."""
    await db.execute("INSERT INTO newsletters (name, slug) VALUES ('Weekly', 'weekly')")
    await db.execute("INSERT INTO products (name, slug, type, created_at) VALUES ('Free', 'free', 'free', now() - "
                     "interval '3 days'), ('Gold', 'gold', 'paid', now() - interval '2 days'), "
                     "('Silver Club', 'silver-club', 'paid', now() - interval '1 day')")


async def tiers_of(db, email: str) -> list[str]:
    return list(await db.fetchval(
        "SELECT coalesce(array_agg(p.slug ORDER BY p.slug), '{}') FROM members_products mp "
        "JOIN products p ON p.id = mp.product_id JOIN members m ON m.id = mp.member_id WHERE m.email = $1", email))


async def test_the_reference_export_comes_in_as_its_importer_brings_it(settings, db, tmp_path):
    await site(db)
    # A label the site made before, under the slug Pressroom used to make: found by its name.
    await db.execute("INSERT INTO labels (name, slug) VALUES ('Old Friends', 'old-friends'), "
                     "('Editor''s Picks', 'editor-s-picks')")
    future = "2099-01-01T00:00:00.000Z"
    file = write_rows(tmp_path / "export.csv", [
        row("comped@example.com", complimentary_plan="true", labels="Editor's Picks,Søren's ß_list"),
        row("comped-silver@example.com", complimentary_plan="true", tiers="Silver Club"),
        row("paying@example.com", stripe_customer_id="cus_1", tiers="Gold", created_at=future),
        row("lapsed@example.com", stripe_customer_id="cus_2"),
        row("unknown-tier@example.com", stripe_customer_id="cus_3", tiers="Platinum"),
        row("jean@example.com", name="Jean\u00a0de la Fontaine", labels="old friends"),
        row("dev@example.com", name="\U0001f469\u200d\U0001f4bb Ada"),
        row("idn@exämple.com"),
        row("IDN@xn--exmple-cua.com"),
        row("labels@example.com", labels=",".join(f"l{n}" for n in range(101))),
        row("bidi@example.com", name="Eve\u202e"),
    ])
    before = datetime.now(UTC)
    report = await import_members(file, settings=settings)
    after = datetime.now(UTC)

    assert report.format == REFERENCE
    assert (report.added, report.comped_default_tier, report.paid_stripe, report.stripe_without_tier,
            report.created_in_future) == (7, 1, 1, [5], 1)
    assert report.refused == [
        {"line": 6, "reason": "the site has no tier 'Platinum'"},
        {"line": 10, "reason": "the same email as line 9"},
        {"line": 11, "reason": "names 101 labels; a member has at most 100"},
        {"line": 12, "reason": "the name contains a control or invisible character (U+202E, character 4)"}]
    members = {r["email"]: dict(r) for r in await db.fetch("SELECT email, name, status, created_at FROM members")}
    # Complimentary: comped in the default tier (or the one named); a tier filter and a tier post reach them.
    assert members["comped@example.com"]["status"] == "comped"
    assert await tiers_of(db, "comped@example.com") == ["gold"]
    assert await tiers_of(db, "comped-silver@example.com") == ["silver-club"]
    # A Stripe customer with a tier: paid in it; without: free, and the report names the line.
    assert members["paying@example.com"]["status"] == "paid" and await tiers_of(db, "paying@example.com") == ["gold"]
    assert members["lapsed@example.com"]["status"] == "free"
    # Created in the future: the import's time.
    assert before <= members["paying@example.com"]["created_at"] <= after
    # Names real people have.
    assert members["jean@example.com"]["name"] == "Jean\u00a0de la Fontaine"
    assert members["dev@example.com"]["name"] == "\U0001f469\u200d\U0001f4bb Ada"
    # One mailbox, one member, its domain in Unicode whichever form the file used.
    assert "idn@exämple.com" in members and not any("xn--" in email for email in members)
    # The reference's slugs, and labels the site had found by name.
    labels = {r["slug"]: r["name"] for r in await db.fetch("SELECT slug, name FROM labels")}
    assert labels == {"old-friends": "Old Friends", "editor-s-picks": "Editor's Picks",
                      "sorens-ss_list": "Søren's ß_list"}
    assert (await member_profile("comped@example.com", settings=settings)).labels == ["editor-s-picks",
                                                                                         "sorens-ss_list"]
    assert (await member_profile("jean@example.com", settings=settings)).labels == ["old-friends"]


async def test_a_label_filter_written_on_the_reference_names_the_imported_label(settings, db, tmp_path):
    from pressroom.store.audience import filter_sql

    file = write_rows(tmp_path / "export.csv", [row("ada@example.com", labels="Editor's Picks"),
                                                row("bob@example.com", labels="Other")])
    await import_members(file, settings=settings)
    predicate, values = filter_sql("label:'editors-picks'", as_of=datetime.now(UTC), post_id=None, param=1)
    chosen = await db.fetch(f"SELECT m.email FROM members m WHERE {predicate}", values)
    assert [r["email"] for r in chosen] == ["ada@example.com"]


async def test_a_member_holds_at_most_100_labels_however_they_come(settings, db, tmp_path):
    first = write_rows(tmp_path / "first.csv", [row("ada@example.com", labels=",".join(f"a{n}" for n in range(60)))])
    second = write_rows(tmp_path / "second.csv", [row("ada@example.com", labels=",".join(f"b{n}" for n in range(60))),
                                                  row("bob@example.com", labels="b1")])
    await import_members(first, settings=settings)
    report = await import_members(second, settings=settings)
    assert report.refused == [{"line": 2, "reason": "would give the member more than 100 labels"}]
    assert report.added == 1
    assert len((await member_profile("ada@example.com", settings=settings)).labels) == 60
    with pytest.raises(BadInput, match="at most 100"):
        await add_member("carol@example.com", labels=[f"c{n}" for n in range(101)], settings=settings)


async def test_one_mailbox_is_one_member_at_every_entry(settings, db):
    added = await add_member("idn@exämple.com", settings=settings)
    with pytest.raises(BadInput, match="already exists"):
        await add_member("idn@XN--EXMPLE-CUA.COM", settings=settings)
    assert (await member_profile("idn@xn--exmple-cua.com", settings=settings)).member_id == added.member_id
    assert email_address("idn@xn--exmple-cua.com") == email_address("idn@exämple.com") == "idn@exämple.com"


def test_names_keep_their_invisible_joiners_and_spaces_but_not_controls():
    for name in ("Jean\u00a0de la Fontaine", "\U0001f469\u200d\U0001f52c Marie", "Ali\u202fBaba", "Ro\u200cya"):
        assert free_text(name, "name") == name
    for name in ("Eve\u202e", "Zero\u200bwidth", "Line\u2028break", "Bell\x07", "Del\x7f", "Bom\ufeff"):
        with pytest.raises(BadInput, match="control or invisible character"):
            free_text(name, "name")


def test_slugs_are_the_reference_slugs():
    """Against @tryghost/string's slugify itself: names people give labels, and every character of
    the Latin, Greek and Cyrillic blocks (text-unidecode and the npm unidecode share their tables there)."""
    names = ["Editor's Picks", "Søren Kierkegaard", "Straße", "snake_case label", "  VIP  ", "a--b", "-lead-",
             "Ærøskøbing", "Łódź", "Ünïcödé", "Привет мир", "Ἀθῆναι", "日本語", "£100 club", "C++ & C#", "x.y@z",
             "what? now!", "under_score-dash", "Œuvre", "İstanbul", "tab\tinside", "😀 party", "zero\u200bwidth",
             "x–y—z", "'quoted'", "«guillemets»", "½ price", "naïve café", "Zoë's \"quote\"", "100%"]
    names += [chr(c) + "x" for c in [*range(0xA0, 0x250), *range(0x370, 0x3F4), *range(0x400, 0x500)]]
    expected = node("const {slugify} = require('@tryghost/string');"
                    "const names = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
                    "console.log(JSON.stringify(names.map((n) => slugify(n))));", json.dumps(names))
    assert dict(zip(names, [slugify(name) for name in names], strict=True)) == \
        dict(zip(names, json.loads(expected), strict=True))


MAILCHIMP_HEADER = ["Email Address", "First Name", "Last Name", "Address", "Phone Number", "MEMBER_RATING",
                    "OPTIN_TIME", "OPTIN_IP", "CONFIRM_TIME", "CONFIRM_IP", "LATITUDE", "LONGITUDE", "GMTOFF",
                    "DSTOFF", "TIMEZONE", "CC", "REGION", "LAST_CHANGED", "LEID", "EUID", "NOTES", "TAGS"]


def mailchimp_row(email: str, first: str = "", last: str = "", tags: str = "", confirm: str = "") -> list[str]:
    values = {"Email Address": email, "First Name": first, "Last Name": last, "TAGS": tags, "CONFIRM_TIME": confirm,
              "MEMBER_RATING": "2"}
    return [values.get(column, "") for column in MAILCHIMP_HEADER]


async def test_a_mailchimp_export_is_read_in_the_reference_terms(settings, db, tmp_path):
    await db.execute("INSERT INTO newsletters (name, slug) VALUES ('Weekly', 'weekly')")
    file = write_rows(tmp_path / "subscribed_members_export.csv", [
        mailchimp_row("ada@example.com", "Ada", "Lovelace", '"Founding Readers","Tech, Science"',
                      "2021-03-04 05:06:07"),
        mailchimp_row("bob@example.com", "Bob"),
        mailchimp_row("not-an-address", "Nobody")], MAILCHIMP_HEADER)
    unsubscribed = write_rows(tmp_path / "unsubscribed_members_export.csv", [
        [*mailchimp_row("carol@example.com", "Carol"), "2022-01-01 00:00:00", "", "", "", ""]],
        [*MAILCHIMP_HEADER, "UNSUB_TIME", "UNSUB_CAMPAIGN_TITLE", "UNSUB_CAMPAIGN_ID", "UNSUB_REASON",
         "UNSUB_REASON_OTHER"])
    report = await import_members(file, settings=settings)
    assert (report.format, report.added, [r["line"] for r in report.refused]) == (MAILCHIMP, 2, [4])
    assert "member_rating" in report.ignored_columns and "tags" not in report.ignored_columns
    ada = (await member_profile("ada@example.com", settings=settings)).model_dump()
    assert (ada["name"], ada["labels"], ada["created_at"].isoformat()) == \
        ("Ada Lovelace", ["founding-readers", "tech-science"], "2021-03-04T05:06:07+00:00")
    assert [s["slug"] for s in ada["subscriptions"] if s["subscribed"]] == ["weekly"]
    report = await import_members(unsubscribed, settings=settings)
    carol = (await member_profile("carol@example.com", settings=settings)).model_dump()
    assert report.added == 1 and not any(s["subscribed"] for s in carol["subscriptions"])

    env = {**os.environ, "DATABASE_URL": settings.database_url}
    code, out, err = await cli("members", "import", file, "--dry-run", env=env)
    assert code == 0, err
    assert out.splitlines()[0] == (f"would import {file} (a Mailchimp export): 3 rows: 0 added, 0 updated, "
                                   "2 unchanged, 1 refused")
    assert "dry run: nothing was written" in out


async def test_a_dry_run_reports_what_an_import_would_do_and_writes_nothing(settings, db, tmp_path):
    await site(db)
    file = write_rows(tmp_path / "export.csv", [row("ada@example.com", complimentary_plan="true", labels="vip"),
                                                row("bob@example.com", created_at="2099-01-01T00:00:00Z"),
                                                row("bad")])
    tables = ("members", "labels", "members_labels", "members_products", "members_newsletters", "outbox")

    async def counts():
        return [await db.fetchval(f"SELECT count(*) FROM {table}") for table in tables]

    empty = await counts()
    dry = await import_members(file, dry_run=True, welcome=True, settings=settings)
    assert await counts() == empty
    real = await import_members(file, welcome=True, settings=settings)
    assert dry.dry_run and not real.dry_run
    assert {**vars(dry), "dry_run": False} == vars(real)
    assert (real.added, real.labels_made, real.comped_default_tier, real.created_in_future, real.welcome_queued) == \
        (2, 1, 1, 1, 2)


async def test_the_file_is_read_as_it_is_written_a_chunk_at_a_time(settings, db, tmp_path, monkeypatch):
    """Rows are written while the file is still being read (and a duplicate across chunks is still
    refused): memory is one chunk's, whatever the file's size (bench/members_import.py measures it)."""
    monkeypatch.setattr(member_import, "CHUNK", 3)
    file = write_rows(tmp_path / "export.csv", [row(f"m{n}@example.com") for n in range(10)] +
                      [row("M1@example.com")])
    events = []
    report = await import_members(file, settings=settings, progress=lambda phase, done, total: events.append(phase))
    assert events.index("write") < events.index("read")  # a chunk went in before reading ended
    assert report.added == 10 and report.refused == [{"line": 12, "reason": "the same email as line 3"}]


async def seed_site(db) -> None:
    """Members of every kind: labels, tiers, comped, paid, unsubscribed, a note, a formula-looking name."""
    await site(db)
    await db.execute("INSERT INTO newsletters (name, slug, subscribe_on_signup) VALUES ('Offers', 'offers', false)")
    people = [("ada@example.com", "Ada Lovelace", "met at the\nlaunch, \"quoted\"", "comped", ["VIP", "Press Corps"],
               ["gold"], True),
              ("bob@example.com", "=HYPERLINK(\"http://evil\")", None, "paid", ["VIP"], ["silver-club"], True),
              ("carol@example.com", None, "-1 note", "free", [], [], False),
              ("dan@exämple.com", "Jean\u00a0Dan", None, "free", ["Søren's ß_list"], [], True),
              ("eve@example.com", "@eve", None, "paid", [], ["gold", "silver-club"], True)]
    for n, (email, name, note, status, labels, tiers, subscribed) in enumerate(people):
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
        if subscribed:
            await db.execute("INSERT INTO members_newsletters (member_id, newsletter_id) SELECT $1, id "
                             "FROM newsletters WHERE subscribe_on_signup", member_id)


async def site_state(db) -> dict:
    rows = await db.fetch("""
        SELECT m.email, m.name, m.note, m.status, m.created_at,
               (SELECT array_agg(l.slug || '=' || l.name ORDER BY l.slug) FROM members_labels ml
                JOIN labels l ON l.id = ml.label_id WHERE ml.member_id = m.id) AS labels,
               (SELECT array_agg(p.slug ORDER BY p.slug) FROM members_products mp JOIN products p
                ON p.id = mp.product_id WHERE mp.member_id = m.id) AS tiers,
               (SELECT array_agg(n.slug ORDER BY n.slug) FROM members_newsletters mn JOIN newsletters n
                ON n.id = mn.newsletter_id WHERE mn.member_id = m.id) AS newsletters
        FROM members m ORDER BY m.email""")
    return {r["email"]: {k: v for k, v in dict(r).items() if k != "email"} for r in rows}


async def test_an_export_imported_into_an_empty_site_gives_the_same_members(settings, db, tmp_path):
    await seed_site(db)
    before = await site_state(db)
    env = {**os.environ, "DATABASE_URL": settings.database_url}
    exported = tmp_path / "members.csv"
    code, out, err = await cli("members", "export", str(exported), env=env)
    assert code == 0, err
    assert out.strip() == f"exported 5 members to {exported}"
    text = exported.read_text(encoding="utf-8")
    assert text.splitlines()[0] == ("id,email,name,note,subscribed_to_emails,complimentary_plan,stripe_customer_id,"
                                    "created_at,deleted_at,labels,tiers,gift_id")
    assert ",'=HYPERLINK(" in text.replace('"', "") and ",'@eve," in text and ",'-1 note," in text  # formulas guarded

    # The reference's own CSV library reads it: each row, its labels, its flags.
    parsed = json.loads(node(
        "const parse = require('@tryghost/members-csv').parse;"
        "const mapping = {email: 'email', name: 'name', note: 'note', subscribed_to_emails: 'subscribed',"
        " created_at: 'created_at', complimentary_plan: 'complimentary_plan', labels: 'labels', tiers: 'tiers'};"
        "parse(process.argv[1], mapping).then((rows) => console.log(JSON.stringify(rows)));", "", str(exported)))
    by_email = {r["email"]: r for r in parsed}
    assert set(by_email) == set(before)
    assert by_email["ada@example.com"]["labels"] == [{"name": "Press Corps"}, {"name": "VIP"}] or \
        by_email["ada@example.com"]["labels"] == [{"name": "VIP"}, {"name": "Press Corps"}]
    assert by_email["ada@example.com"]["note"] == "met at the\nlaunch, \"quoted\""
    assert (by_email["ada@example.com"]["complimentary_plan"], by_email["carol@example.com"]["subscribed"]) == \
        (True, False)
    assert by_email["eve@example.com"]["tiers"] == "Gold,Silver Club"

    # Into an empty site (its newsletters and tiers, no member, no label): the same members.
    await db.execute("DELETE FROM members; DELETE FROM labels")
    report = await import_members(exported, settings=settings)
    assert (report.added, report.refused) == (5, [])
    assert await site_state(db) == before

    # And an export the reference's library writes (its unparse) comes in too.
    await db.execute("DELETE FROM members; DELETE FROM labels")
    written = node(
        "const unparse = require('@tryghost/members-csv').unparse;"
        "console.log(unparse(JSON.parse(require('fs').readFileSync(0, 'utf8'))));",
        json.dumps([{"id": "1", "email": "zoe@example.com", "name": "Zoë", "note": "=1+1", "subscribed": True,
                     "comped": True, "created_at": "2020-02-02T00:00:00.000Z", "labels": [{"name": "Editor's Picks"}],
                     "tiers": [{"name": "Gold"}]},
                    {"id": "2", "email": "yan@example.com", "name": "Yan", "subscribed": False,
                     "created_at": "2020-02-03T00:00:00.000Z", "labels": []}]))
    (tmp_path / "theirs.csv").write_text(written, encoding="utf-8")
    report = await import_members(tmp_path / "theirs.csv", settings=settings)
    assert (report.added, report.refused) == (2, [])
    zoe = (await member_profile("zoe@example.com", settings=settings)).model_dump()
    assert (zoe["name"], zoe["note"], zoe["status"], zoe["labels"], [t["slug"] for t in zoe["tiers"]]) == \
        ("Zoë", "=1+1", "comped", ["editors-picks"], ["gold"])
    yan = (await member_profile("yan@example.com", settings=settings)).model_dump()
    assert (yan["status"], any(s["subscribed"] for s in yan["subscriptions"])) == ("free", False)


async def test_an_export_takes_a_filter_and_refuses_one_naming_nothing(settings, db, tmp_path):
    from operations.member_export import export_members

    await seed_site(db)
    done = await export_members(tmp_path / "vip.csv", recipient_filter="labels:[vip+press-corps]", settings=settings)
    assert done.members == 1
    assert [r["email"] for r in csv.DictReader((tmp_path / "vip.csv").open(encoding="utf-8"))] == ["ada@example.com"]
    done = await export_members(tmp_path / "paid.csv", recipient_filter="status:paid+tiers:gold", settings=settings)
    assert done.members == 1
    with pytest.raises(BadInput, match="names no label nobody"):
        await export_members(tmp_path / "x.csv", recipient_filter="label:nobody", settings=settings)
    assert not (tmp_path / "x.csv").exists() and not (tmp_path / "x.csv.partial").exists()


async def test_a_name_with_line_breaks_is_imported_made_safe_and_counted(settings, db, tmp_path):
    """The reference keeps a name with a line break (a spreadsheet's cell may hold one); refused, the
    member was lost. Imported with spaces instead (a name goes into a To: header), and counted."""
    written = node(
        "const unparse = require('@tryghost/members-csv').unparse;"
        "console.log(unparse(JSON.parse(require('fs').readFileSync(0, 'utf8'))));",
        json.dumps([{"email": "ada@example.com", "name": "Ada\nLovelace", "subscribed": True},
                    {"email": "bob@example.com", "name": "Bob \r\n Smith\tJr", "subscribed": True},
                    {"email": "zoe@example.com", "name": "Zoë Ångström", "subscribed": True}]))
    path = tmp_path / "theirs.csv"
    path.write_text(written, encoding="utf-8")
    env = {**os.environ, "DATABASE_URL": settings.database_url}
    code, out, err = await cli("members", "import", str(path), env=env)
    assert code == 0, err
    assert "3 added" in out and "0 refused" in out
    assert "2 names with line breaks or tabs imported with spaces instead" in out
    names = {r["email"]: r["name"] for r in await db.fetch("SELECT email, name FROM members")}
    assert names == {"ada@example.com": "Ada Lovelace", "bob@example.com": "Bob Smith Jr",
                     "zoe@example.com": "Zoë Ångström"}
    code, out, err = await cli("members", "import", str(path), "--json", env=env)
    assert code == 0, err
    report = json.loads(out)
    assert (report["unchanged"], report["names_changed"], report["refused"]) == (3, 2, [])
