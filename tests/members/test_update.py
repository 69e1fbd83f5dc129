"""`members update`: name, status and newsletters, by id or address, every input checked before
anything is written; through the operation and the real command line (--json, one-line errors)."""

from __future__ import annotations

import json
import os

import pytest

from operations.members import add_member, update_member
from pressroom.errors import BadInput, NotFound
from tests.operations.test_waiting import cli


async def newsletters(db, *slugs: str) -> dict[str, str]:
    return {slug: await db.fetchval("INSERT INTO newsletters (name, slug, subscribe_on_signup) VALUES ($1, $1, false) "
                                    "RETURNING id", slug) for slug in slugs}


async def member_state(db, member_id: str) -> tuple:
    row = await db.fetchrow("SELECT name, status FROM members WHERE id = $1", member_id)
    slugs = [r["slug"] for r in await db.fetch(
        "SELECT n.slug FROM members_newsletters mn JOIN newsletters n ON n.id = mn.newsletter_id "
        "WHERE mn.member_id = $1 ORDER BY n.slug", member_id)]
    return row["name"], row["status"], slugs


def env_of(settings) -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": settings.database_url}


async def test_update_changes_what_is_given_and_is_safe_to_repeat(settings, db):
    ids = await newsletters(db, "weekly", "daily", "offers")
    added = await add_member("ada@example.com", "Ada", settings=settings)
    await db.execute("INSERT INTO members_newsletters (member_id, newsletter_id) VALUES ($1, $2)",
                     added.member_id, ids["offers"])

    done = await update_member("ADA@example.com", name="Ada L.", status="paid", newsletters=["weekly", ids["daily"]],
                               no_newsletters=["offers"], settings=settings)
    assert done.changed == ["name", "status", "newsletters"]
    assert (done.subscribed, done.unsubscribed) == (["daily", "weekly"], ["offers"])
    assert await member_state(db, added.member_id) == ("Ada L.", "paid", ["daily", "weekly"])

    again = await update_member(added.member_id, name="Ada L.", status="paid", newsletters=["weekly"],
                                no_newsletters=["offers"], settings=settings)
    assert (again.changed, again.subscribed, again.unsubscribed) == ([], [], [])

    labelled = await update_member(added.member_id, labels=["vip", "press"], settings=settings)
    assert (labelled.changed, labelled.labels) == (["labels"], ["press", "vip"])
    swapped = await update_member(added.member_id, labels=["beta"], no_labels=["vip", "never-had"], settings=settings)
    assert (swapped.changed, swapped.labels) == (["labels"], ["beta", "press"])
    assert (await update_member(added.member_id, labels=["beta"], settings=settings)).changed == []

    cleared = await update_member(added.member_id, name="", settings=settings)
    assert cleared.changed == ["name"]
    assert await member_state(db, added.member_id) == (None, "paid", ["daily", "weekly"])


@pytest.mark.parametrize("kwargs, error", [
    ({"status": "gold"}, "--status 'gold' is not one of free, paid, comped"),
    ({"newsletters": ["weekly", "nope"]}, "--newsletter nope: no newsletter has that id or slug"),
    ({"newsletters": ["weekly"], "no_newsletters": ["weekly"]}, "given to both --newsletter and --no-newsletter"),
    ({"name": "Ada\u202e", "status": "paid"}, "the name contains a control or invisible character"),
    ({"name": "x" * 192}, "the name is 192 characters long; at most 191"),
    ({}, "nothing to update"),
    ({"labels": ["Night\u202eOwls"]}, "the label contains a control or invisible character"),
    ({"labels": ["vip"], "no_labels": ["vip"]}, "label vip is given to both --label and --no-label"),
])
async def test_a_refused_update_writes_nothing(settings, db, kwargs, error):
    await newsletters(db, "weekly")
    added = await add_member("ada@example.com", "Ada", settings=settings)
    before = await member_state(db, added.member_id)
    with pytest.raises((BadInput, NotFound)) as raised:
        await update_member(added.member_id, **kwargs, settings=settings)
    assert error in str(raised.value) and "\n" not in str(raised.value)
    assert await member_state(db, added.member_id) == before


async def test_update_from_the_command_line(settings, db):
    await newsletters(db, "weekly")
    added = await add_member("ada@example.com", settings=settings)
    env = env_of(settings)
    code, out, err = await cli("members", "update", "ada@example.com", "--status", "comped", "--newsletter", "weekly",
                               "--json", env=env)
    assert code == 0, err
    assert json.loads(out) == {"member_id": added.member_id, "changed": ["status", "newsletters"],
                               "subscribed": ["weekly"], "unsubscribed": [], "labels": []}
    code, out, err = await cli("members", "update", added.member_id, "--no-newsletter", "weekly", env=env)
    assert code == 0 and out.strip() == f"member {added.member_id} updated: newsletters; unsubscribed from weekly"
    code, out, err = await cli("members", "update", "bob@example.com", "--name", "Bob", env=env)
    assert code == 1 and err.strip() == "error: no member has that address"
    assert "bob@example.com" not in out + err


async def test_an_update_runs_only_what_was_asked(settings, db, monkeypatch):
    """An option not given costs no statement: a new name touches neither newsletters nor labels."""
    import contextlib

    from pressroom import database

    statements, opened = [], database.connection

    @contextlib.asynccontextmanager
    async def logged(url):
        async with opened(url) as conn:
            conn.add_query_logger(lambda query: statements.append(query.query))
            yield conn

    await newsletters(db, "weekly")
    added = await add_member("ada@example.com", labels=["vip"], settings=settings)
    monkeypatch.setattr(database, "connection", logged)
    done = await update_member(added.member_id, name="Ada", settings=settings)
    assert (done.changed, done.labels) == (["name"], ["vip"])
    ran = "\n".join(statements)
    assert "UPDATE members SET name" in ran
    for untouched in ("members_newsletters", "FROM newsletters", "INSERT INTO labels", "INSERT INTO members_labels",
                      "DELETE FROM members_labels"):
        assert untouched not in ran, untouched


async def test_members_show_shows_the_note(settings, db):
    added = await add_member("ada@example.com", settings=settings)
    await db.execute("UPDATE members SET note = $2 WHERE id = $1", added.member_id, "met at the\nconference\x1b[2J")
    env = env_of(settings)
    code, out, err = await cli("members", "show", added.member_id, "--emails", "0", env=env)
    assert code == 0, err
    assert "note: met at the\n      conference [2J\n" in out and "\x1b" not in out
    assert "no newsletter emails yet" not in out  # none asked for
    code, out, err = await cli("members", "show", added.member_id, "--json", env=env)
    assert code == 0, err
    assert json.loads(out)["note"] == "met at the\nconference\x1b[2J"
