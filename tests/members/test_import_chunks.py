"""`members import` a chunk at a time: rows refused in the middle of a later chunk are reported by
their line while their neighbours go in, an import that fails in its second chunk (reading or
writing) writes nothing and the next one adds each member once, `--welcome` queues one email per
member across chunks, and an address added by someone else meanwhile refuses the import whole."""

from __future__ import annotations

import pytest

from operations import member_import
from operations.member_import import import_members
from pressroom.errors import PressroomError
from tests.members.test_migration import row, write_rows

CHUNK = 3


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(member_import, "CHUNK", CHUNK)


async def stored(db) -> dict[str, tuple]:
    """Each member's address → (name, newsletters, labels)."""
    rows = await db.fetch(
        "SELECT m.email, m.name, "
        "(SELECT coalesce(array_agg(n.slug ORDER BY n.slug), '{}') FROM members_newsletters mn "
        " JOIN newsletters n ON n.id = mn.newsletter_id WHERE mn.member_id = m.id) AS newsletters, "
        "(SELECT coalesce(array_agg(l.slug ORDER BY l.slug), '{}') FROM members_labels ml "
        " JOIN labels l ON l.id = ml.label_id WHERE ml.member_id = m.id) AS labels FROM members m")
    return {r["email"]: (r["name"], list(r["newsletters"]), list(r["labels"])) for r in rows}


async def test_a_refused_row_in_the_second_chunk_is_reported_by_its_line_and_its_neighbours_stored(
        settings, db, tmp_path, small_chunks):
    await db.execute("INSERT INTO newsletters (name, slug) VALUES ('Weekly', 'weekly')")
    rows = [row(f"m{n}@example.com", name=f"M {n}", labels="vip" if n % 2 else "") for n in range(8)]
    # Lines 2-4 are the first chunk; the second starts on line 5. Line 6 is a bad address, line 7
    # the first chunk's address again (in another case), line 8 an unknown flag.
    rows[4] = row("not-an-address", name="X")
    rows[5] = row("M0@EXAMPLE.COM", name="again")
    rows[6] = row("m6@example.com", subscribed_to_emails="maybe")
    file = write_rows(tmp_path / "m.csv", rows)

    report = await import_members(file, settings=settings)
    assert [(r["line"], r["reason"][:32]) for r in report.refused] == [
        (6, "the email is not a valid address"), (7, "the same email as line 2"),
        (8, "subscribed_to_emails is neither ")]
    assert (report.rows, report.added, report.updated, report.unchanged) == (8, 5, 0, 0)
    members = await stored(db)
    assert sorted(members) == [f"m{n}@example.com" for n in (0, 1, 2, 3, 7)]
    assert members["m3@example.com"] == ("M 3", ["weekly"], ["vip"])  # the neighbour before the refused rows
    assert members["m7@example.com"] == ("M 7", ["weekly"], ["vip"])  # and the one after them
    assert members["m0@example.com"] == ("M 0", ["weekly"], [])  # not renamed by the refused line 7

    again = await import_members(file, settings=settings)
    assert (again.added, again.updated, again.unchanged, len(again.refused)) == (0, 0, 5, 3)
    assert await stored(db) == members


@pytest.mark.parametrize("where", ["reading", "writing"])
async def test_an_import_that_fails_in_its_second_chunk_writes_nothing_and_the_next_adds_each_once(
        settings, db, tmp_path, small_chunks, monkeypatch, where):
    await db.execute("INSERT INTO newsletters (name, slug) VALUES ('Weekly', 'weekly')")
    file = write_rows(tmp_path / "m.csv", [row(f"m{n}@example.com", labels="vip") for n in range(8)])

    class Crash(Exception):
        pass

    if where == "reading":  # in the thread that reads ahead, on line 6 (the second chunk)
        real_row = member_import._row

        def crashing_row(line, cells, now):
            if line == 6:
                raise Crash
            return real_row(line, cells, now)

        monkeypatch.setattr(member_import, "_row", crashing_row)
    else:  # once the first chunk's members are written, at the second chunk's
        real_add = member_import._add_members
        calls = []

        async def crashing_add(conn, new, signup):
            calls.append(len(new))
            if len(calls) == 2:
                raise Crash
            await real_add(conn, new, signup)

        monkeypatch.setattr(member_import, "_add_members", crashing_add)
    with pytest.raises(Crash):
        await import_members(file, welcome=True, settings=settings)
    for table in ("members", "members_newsletters", "members_labels", "labels", "outbox"):
        assert await db.fetchval(f"SELECT count(*) FROM {table}") == 0, table

    monkeypatch.undo()
    monkeypatch.setattr(member_import, "CHUNK", CHUNK)
    report = await import_members(file, welcome=True, settings=settings)
    assert (report.added, report.welcome_queued, report.refused) == (8, 8, [])
    again = await import_members(file, welcome=True, settings=settings)
    assert (again.added, again.updated, again.unchanged, again.welcome_queued) == (0, 0, 8, 0)
    assert len(await stored(db)) == 8
    assert await db.fetchval("SELECT count(*) FROM members_newsletters") == 8
    assert await db.fetchval("SELECT count(*) FROM members_labels") == 8
    assert await db.fetchval("SELECT count(DISTINCT payload->>'member_id') FROM outbox "
                             "WHERE event_type = 'MemberCreatedEvent'") == 8
    assert await db.fetchval("SELECT count(*) FROM outbox") == 8


async def test_welcome_emails_are_queued_once_each_across_chunks(settings, db, tmp_path, small_chunks):
    file = write_rows(tmp_path / "m.csv", [row(f"m{n}@example.com") for n in range(7)])
    first = await import_members(file, welcome=True, settings=settings)
    assert (first.added, first.welcome_queued) == (7, 7)
    # A second file naming some of them and new ones: only the new ones are welcomed.
    more = write_rows(tmp_path / "more.csv", [row(f"m{n}@example.com") for n in range(5, 10)])
    second = await import_members(more, welcome=True, settings=settings)
    assert (second.added, second.unchanged, second.welcome_queued) == (3, 2, 3)
    ids = await db.fetch("SELECT m.email FROM outbox o JOIN members m ON m.id = o.payload->>'member_id'")
    assert sorted(r["email"] for r in ids) == sorted(f"m{n}@example.com" for n in range(10))


async def test_an_address_added_meanwhile_refuses_the_import_whole_without_naming_it(
        settings, db, tmp_path, small_chunks, monkeypatch):
    file = write_rows(tmp_path / "m.csv", [row(f"m{n}@example.com") for n in range(5)])
    real_add = member_import._add_members

    async def someone_signs_up_first(conn, new, signup):
        # Between the match (no member had the address) and the COPY, another session adds one.
        if not await db.fetchval("SELECT count(*) FROM members"):
            await db.execute("INSERT INTO members (email) VALUES ($1)", new[-1][0].email)
        await real_add(conn, new, signup)

    monkeypatch.setattr(member_import, "_add_members", someone_signs_up_first)
    with pytest.raises(PressroomError) as refused:
        await import_members(file, settings=settings)
    assert "run the import again" in str(refused.value) and "example.com" not in str(refused.value)
    assert [r["email"] for r in await db.fetch("SELECT email FROM members")] == ["m2@example.com"]

    monkeypatch.undo()
    report = await import_members(file, settings=settings)
    assert (report.added, report.unchanged) == (4, 1)


def test_new_member_ids_are_random_version_4_uuids_as_the_database_makes_them():
    import uuid

    ids = member_import._new_ids(1000)
    assert len(set(ids)) == 1000
    assert all(str(uuid.UUID(i)) == i and uuid.UUID(i).version == 4 and uuid.UUID(i).variant == uuid.RFC_4122
               for i in ids)
    assert member_import._new_ids(0) == []


async def test_existing_members_are_matched_across_chunks_and_a_re_import_changes_nothing(
        settings, db, tmp_path, small_chunks):
    """Rows of existing and new members mixed over several chunks: existing ones take what the row
    says, a repeated address is refused by line whichever chunk first named it, a row naming one
    label or tier twice (its name and its slug) gives it once, a label only a refused row names is
    not made; the same file again adds, changes and makes nothing."""
    await db.execute("INSERT INTO newsletters (name, slug) VALUES ('Weekly', 'weekly')")
    await db.execute("INSERT INTO products (name, slug, type) VALUES ('Gold', 'gold', 'paid')")
    await db.execute("INSERT INTO labels (name, slug) VALUES ('Editor''s Picks', 'editor-s-picks')")
    crowded = await db.fetchval("INSERT INTO members (email, name) VALUES ('crowded@example.com', 'C') RETURNING id")
    await db.execute("INSERT INTO labels (name, slug) SELECT 'c' || n, 'c' || n FROM generate_series(1, 100) n")
    await db.execute("INSERT INTO members_labels (member_id, label_id) SELECT $1, id FROM labels "
                     "WHERE slug LIKE 'c%'", crowded)
    await db.execute("INSERT INTO members (email, name) VALUES ('old1@example.com', 'Old One'), "
                     "('old2@example.com', 'Old Two')")
    file = write_rows(tmp_path / "m.csv", [
        row("new1@example.com", labels="Editor's Picks,editor-s-picks"),  # line 2: one label, named twice
        row("OLD1@example.com", name="Old One Renamed", labels="vip"),  # line 3: an existing member
        row("new2@example.com", tiers="Gold,gold"),  # line 4: one tier, named twice
        row("crowded@example.com", labels="only-here"),  # line 5 (chunk 2): 101 labels, refused
        row("old2@example.com", subscribed_to_emails="false"),  # line 6: existing, leaves every newsletter
        row("new1@EXAMPLE.com", name="again"),  # line 7: a new member of chunk 1 again
        row("old1@example.com", name="again"),  # line 8 (chunk 3): an existing member of chunk 1 again
        row("new3@example.com", labels="vip"),  # line 9
    ])

    report = await import_members(file, settings=settings)
    assert report.refused == [{"line": 5, "reason": "would give the member more than 100 labels"},
                              {"line": 7, "reason": "the same email as line 2"},
                              {"line": 8, "reason": "the same email as line 3"}]
    assert (report.added, report.updated, report.unchanged) == (3, 1, 1)
    assert (report.labels_made, report.labels_given, report.tiers_given) == (1, 3, 1)
    members = await stored(db)
    assert members["new1@example.com"] == (None, ["weekly"], ["editor-s-picks"])
    assert members["old1@example.com"] == ("Old One Renamed", [], ["vip"])
    assert members["old2@example.com"] == ("Old Two", [], [])
    assert members["new3@example.com"] == (None, ["weekly"], ["vip"])
    assert await db.fetchval("SELECT count(*) FROM labels WHERE slug = 'only-here'") == 0
    assert await db.fetchval("SELECT count(*) FROM members_products") == 1

    again = await import_members(file, settings=settings)
    assert [r["line"] for r in again.refused] == [5, 7, 8]
    assert (again.added, again.updated, again.unchanged) == (0, 0, 5)
    assert (again.labels_made, again.labels_given, again.tiers_given) == (0, 0, 0)
    assert await stored(db) == members


async def test_an_import_on_a_lent_connection_that_had_a_temporary_table_goes_in_and_leaves_no_setting(
        settings, db, tmp_path, small_chunks):
    """The import asks its own connection for larger temporary buffers, which a session can take only
    before its first temporary table: on a lent connection that had one, it goes in without them."""
    from pressroom import database

    file = write_rows(tmp_path / "m.csv", [row(f"m{n}@example.com") for n in range(5)])
    pool = await database.connect(settings.database_url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            await conn.execute("CREATE TEMP TABLE earlier (a int)")
            await conn.execute("INSERT INTO earlier VALUES (1)")
            default = await conn.fetchval("SHOW temp_buffers")
        with database.pool_lent(pool):
            report = await import_members(file, settings=settings)
        assert (report.added, report.refused) == (5, [])
        async with pool.acquire() as conn:
            assert await conn.fetchval("SHOW temp_buffers") == default
    finally:
        await pool.close()
    fresh = await import_members(write_rows(tmp_path / "n.csv", [row("n@example.com")]), settings=settings)
    assert fresh.added == 1 and await db.fetchval("SELECT count(*) FROM members") == 6
