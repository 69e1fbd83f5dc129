"""A migration that loses nothing (issue 56), found as a site moving to Pressroom finds it: with the
reference platform's official Admin API client (migration_scenario.js beside this file) and, for
the import, the reference's CSV library. Labels keep their names, a tier's prices are refused by
name, comped members and tiers follow one rule through the API and the import, a member edited as
it was read is taken, members are found by address and subscription, an unknown resource is not
found, and a post published from a draft says it was a draft."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from operations.member_import import import_members
from operations.members import add_member, member_profile, update_member
from operations.site_webhooks import create_webhook
from tests.admin_api.test_js_client import client_folder  # noqa: F401 (fixture: the client, installed once here)
from tests.frontdoor.conftest import close_door, open_door
from tests.newsletter.test_failures import wait_until
from tests.reference_js import node as reference_node
from worker import running_worker

SCENARIO = Path(__file__).with_name("migration_scenario.js")


@pytest.fixture(scope="module")
def folder(client_folder) -> Iterator[Path]:  # noqa: F811
    shutil.copy(SCENARIO, client_folder)
    yield client_folder


async def _run(folder: Path, mode: str, base: str, key: str) -> dict:
    process = await asyncio.create_subprocess_exec("node", SCENARIO.name, mode, base, key, cwd=folder,
                                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 180)
    assert process.returncode == 0, err.decode()[-3000:]
    return json.loads(out)


def named(labels: list[dict]) -> list[tuple[str, str]]:
    return [(label["name"], label["slug"]) for label in labels]


async def test_labels_keep_their_names_through_the_api_the_command_line_and_the_import(
        folder, admin_door, admin_key, api_settings, db, tmp_path):
    result = await _run(folder, "labels", admin_door.base, admin_key)
    assert named(result["owl"]["labels"]) == [("Night Owls", "night-owls"), ("VIP", "vip")]
    # A name the site has not got is free: made with its name, and found by it afterwards.
    assert (result["press"]["name"], result["press"]["slug"]) == ("Press Corps", "press-corps")
    assert {label["id"] for label in result["reporter"]["labels"]} == \
        {result["press"]["id"], next(label["id"] for label in result["owl"]["labels"] if label["slug"] == "vip")}
    assert result["taken"]["status"] == 422 and result["taken"]["type"] == "ValidationError"
    assert "Press Corps" in result["taken"]["message"]
    assert named(result["edited"]["labels"]) == [("Early Birds", "early-birds"), ("Press Corps", "press-corps"),
                                                 ("VIP", "vip")]
    assert named(result["all"]) == [("Early Birds", "early-birds"), ("Night Owls", "night-owls"),
                                    ("Press Corps", "press-corps"), ("VIP", "vip")]

    # The command line's operations and the import: the same labels, by name, none doubled.
    added = await add_member("cli@migrating.example", labels=["Night Owls", "Book Club"], settings=api_settings)
    await update_member(added.member_id, labels=["press corps", "Late Readers"], no_labels=["VIP"],
                        settings=api_settings)
    (tmp_path / "members.csv").write_text(
        "email,labels\nimported@migrating.example,\"vip,Book Club,Quiet Hours\"\n", encoding="utf-8")
    report = await import_members(tmp_path / "members.csv", settings=api_settings)
    assert (report.added, report.labels_made) == (1, 1)
    labels = {r["slug"]: r["name"] for r in await db.fetch("SELECT slug, name FROM labels")}
    assert labels == {"vip": "VIP", "night-owls": "Night Owls", "press-corps": "Press Corps",
                      "early-birds": "Early Birds", "book-club": "Book Club", "late-readers": "Late Readers",
                      "quiet-hours": "Quiet Hours"}
    assert (await member_profile("cli@migrating.example", settings=api_settings)).labels == \
        ["book-club", "late-readers", "night-owls", "press-corps"]


async def test_a_tier_with_prices_is_refused_by_name(folder, admin_door, admin_key, db):
    result = await _run(folder, "tiers", admin_door.base, admin_key)
    priced, currency = result["priced"], result["currency"]
    assert (priced["status"], priced["type"], priced["property"]) == (422, "ValidationError", "monthly_price")
    assert "tiers.monthly_price is not supported" in priced["message"]
    assert (currency["status"], currency["property"]) == (422, "currency")
    assert result["before"] == 0  # nothing written by a refusal
    assert (result["gold"]["slug"], result["gold"]["type"]) == ("gold", "paid")


async def test_comped_and_tiers_follow_one_rule_through_the_api_and_the_import(
        folder, admin_door, admin_key, api_settings, db, tmp_path):
    result = await _run(folder, "comped", admin_door.base, admin_key)
    through_api = [(m["status"], m["comped"], [t["slug"] for t in m["tiers"]]) for m in result["members"]]
    assert through_api == [("comped", True, ["gold"]), ("paid", False, ["gold"]), ("comped", True, ["gold"]),
                           ("free", False, [])]

    # The same members as the reference's CSV library writes them, imported: the same statuses and tiers.
    written = reference_node(
        "const unparse = require('@tryghost/members-csv').unparse;"
        "console.log(unparse(JSON.parse(require('fs').readFileSync(0, 'utf8'))));",
        json.dumps([{"email": "csv-comped-tier@migrating.example", "comped": True, "tiers": [{"name": "Gold"}]},
                    {"email": "csv-tier-only@migrating.example", "comped": False, "tiers": [{"name": "Gold"}]},
                    {"email": "csv-comped-only@migrating.example", "comped": True},
                    {"email": "csv-plain@migrating.example", "comped": False}]))
    (tmp_path / "theirs.csv").write_text(written, encoding="utf-8")
    report = await import_members(tmp_path / "theirs.csv", settings=api_settings)
    assert (report.added, report.refused, report.comped_default_tier) == (4, [], 1)
    through_import = []
    for name in ("comped-tier", "tier-only", "comped-only", "plain"):
        member = await member_profile(f"csv-{name}@migrating.example", settings=api_settings)
        through_import.append((member.status, member.status == "comped", [t.slug for t in member.tiers]))
    assert through_import == through_api


async def test_a_member_edited_as_it_was_read_is_taken_and_an_unknown_field_refused(
        folder, admin_door, admin_key, db):
    result = await _run(folder, "edit", admin_door.base, admin_key)
    read, edited, again = result["read"], result["edited"], result["again"]
    assert "updated_at" in read and "uuid" in read and "email_count" in read
    assert (edited["name"], edited["note"], edited["status"]) == ("After", "kept", "comped")
    assert [t["slug"] for t in edited["tiers"]] == ["gold"] and named(edited["labels"]) == [("VIP", "vip")]
    assert [n["name"] for n in edited["newsletters"]] == ["Weekly"]
    assert (again["name"], again["note"]) == ("After", "changed")
    unknown = result["unknown"]
    assert unknown["type"] == "ValidationError" and "shoe_size" in unknown["message"]
    assert (result["gift"]["status"], result["gift"]["tiers"]) == ("comped", [])
    assert (result["uncomped"]["status"], result["uncomped"]["comped"]) == ("free", False)


async def test_members_are_found_by_address_and_subscription_and_an_unknown_resource_is_not_found(
        folder, admin_door, admin_key, db):
    result = await _run(folder, "find", admin_door.base, admin_key)
    assert result["byEmail"] == ["ada@find.example"] and result["anyCase"] == ["ada@find.example"]
    assert result["either"] == ["ada@find.example", "bob@find.example"]
    assert (result["subscribed"], result["unsubscribed"]) == (["ada@find.example"], ["bob@find.example"])
    assert result["bobSubscribed"] == [] and result["withStatus"] == ["bob@find.example"] and result["nobody"] == []
    assert result["badSubscribed"]["type"] == "ValidationError"
    for unknown in (result["unknown"], result["unknownPost"]):
        assert (unknown["status"], unknown["type"]) == (404, "NotFoundError")
    assert (result["notHere"]["status"], result["notHere"]["type"]) == (501, "NotImplementedError")


async def test_a_post_published_from_a_draft_says_it_was_a_draft(folder, dev_env, api_settings, admin_key, db):
    settings = api_settings.model_copy(update={"temporal_address": dev_env.client.service_client.config.target_host,
                                               "site_webhooks_allow_loopback": True})
    integration = await db.fetchval("SELECT id FROM integrations LIMIT 1")
    for event in ("post.published", "post.scheduled"):
        await create_webhook(event, f"http://127.0.0.1:9/{event}", integration, settings=settings)
    door = await open_door(settings)
    try:
        async with running_worker(dev_env.client, settings):
            result = await _run(folder, "published", door.base, admin_key)

            async def both_published() -> bool:
                return await db.fetchval("SELECT count(*) FROM outbox WHERE payload->>'event' = 'post.published'") == 2
            await wait_until(both_published, timeout=60)
    finally:
        await close_door(door)
    events = await db.fetch("SELECT payload->>'event' AS event, payload->>'post_id' AS post_id, "
                            "payload->'body'->'post'->'previous'->>'status' AS was FROM outbox "
                            "WHERE webhook_id IS NOT NULL ORDER BY id")
    assert sorted((e["event"], e["post_id"], e["was"]) for e in events) == sorted([
        ("post.published", result["fromDraft"]["id"], "draft"), ("post.published", result["atOnce"]["id"], "draft")])
