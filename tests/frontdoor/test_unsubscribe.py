"""Members leave with one click, and only they can: the real front door over HTTP, real PostgreSQL,
links made as the reference platform makes them."""

from __future__ import annotations

import json
import logging
import uuid

import httpx

from activities.delivery_events.apply import apply_batch
from operations.members import member_profile, unsubscribe_member
from operations.reports import newsletter_report
from operations.webhooks import LINK_SOURCE
from pressroom.providers.mailgun.events import parse_event
from pressroom.store.events import EventBatch
from tests.webhooks.conftest import delivered

from .conftest import link, reference_key

ONE_CLICK = {"content": b"List-Unsubscribe=One-Click",
             "headers": {"Content-Type": "application/x-www-form-urlencoded"}}


async def state(db) -> tuple:
    """Every subscription and every leaving recorded: what a request may or may not change."""
    subscriptions = [tuple(r) for r in await db.fetch(
        "SELECT member_id, newsletter_id FROM members_newsletters ORDER BY 1, 2")]
    events = [tuple(r) for r in await db.fetch(
        "SELECT member_id, newsletter_id, subscribed, source, email_id FROM members_subscribe_events ORDER BY 1, 2")]
    return subscriptions, events


async def test_the_page_changes_nothing_and_one_click_leaves_that_newsletter_once(db, site, front_door):
    member = site.members["m1"]
    url = link(front_door.base, member, newsletter=site.newsletter_uuid, email="e0")
    before = await state(db)
    async with httpx.AsyncClient() as http:
        page = await http.get(url)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "Weekly" in page.text and "m•••@e•••.com" in page.text and "all newsletters" in page.text
        assert "member1@example.com" not in page.text
        assert await state(db) == before  # a mail scanner opening the link changes nothing

        left = await http.post(url, **ONE_CLICK)
        assert left.status_code == 200 and "will not receive" in left.text
        subscriptions, events = await state(db)
        assert ("m1", "nl1") not in subscriptions and ("m1", "nl2") in subscriptions
        assert len(subscriptions) == len(before[0]) - 1
        assert events == [("m1", "nl1", False, "link", "e0")]

        again = await http.post(url, **ONE_CLICK)  # a second click, a provider's retry
        assert again.status_code == 200
        assert await state(db) == (subscriptions, events)

    profile = await member_profile("m1", settings=front_door.settings)
    weekly = next(n for n in profile.subscriptions if n.newsletter_id == "nl1")
    assert (weekly.subscribed, weekly.left_by, weekly.left_through_email) == (False, "link", "e0")
    report = await newsletter_report("e0", settings=front_door.settings)
    assert (report.unsubscribed_through_email.link, report.unsubscribed_through_email.provider) == (1, 0)
    assert report.unsubscribed == 1
    assert (await newsletter_report("e1", settings=front_door.settings)).unsubscribed_through_email.link == 0


async def test_the_pages_all_newsletters_button_and_a_link_without_newsletter_leave_every_one(db, site, front_door):
    async with httpx.AsyncClient() as http:
        url = link(front_door.base, site.members["m2"], newsletter=site.newsletter_uuid)
        pressed = await http.post(url, content=b"scope=all",
                                  headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert pressed.status_code == 200
        assert (await http.post(link(front_door.base, site.members["m3"]), **ONE_CLICK)).status_code == 200
    subscriptions, events = await state(db)
    assert not [s for s in subscriptions if s[0] in ("m2", "m3")]
    assert sorted(events) == [("m2", "nl1", False, "link", None), ("m2", "nl2", False, "link", None),
                              ("m3", "nl1", False, "link", None), ("m3", "nl2", False, "link", None)]


async def test_forged_missing_and_unknown_keys_get_one_answer_and_change_nothing(db, site, front_door, caplog):
    member = site.members["m1"]
    stranger = str(uuid.uuid4())
    bad = {
        "key does not match": link(front_door.base, member, key=reference_key(site.members["m2"])),
        "key missing": link(front_door.base, member, key=None),
        "member unknown": link(front_door.base, stranger),  # a well-made key for nobody
        "uuid missing or malformed": link(front_door.base, "not-a-uuid"),
        "newsletter unknown": link(front_door.base, member, newsletter=str(uuid.uuid4())),
    }
    before = await state(db)
    caplog.set_level(logging.WARNING, logger="pressroom.frontdoor")
    answers = set()
    async with httpx.AsyncClient() as http:
        for url in bad.values():
            for response in (await http.get(url), await http.post(url, **ONE_CLICK)):
                answers.add((response.status_code, response.text))
    assert len(answers) == 1 and next(iter(answers))[0] == 404  # nothing tells one refusal from another
    assert await state(db) == before

    await front_door.door.flush_refusals()
    counts = {r["reason"]: r["count"] for r in await db.fetch(
        "SELECT reason, count FROM webhook_refusals WHERE provider = $1", LINK_SOURCE)}
    assert counts == {reason: 2 for reason in bad}
    lines = [r.getMessage() for r in caplog.records if r.name == "pressroom.frontdoor"]
    assert len(lines) == len(bad)  # once per reason: the second of each within seconds is counted, not logged
    assert all(reference_key(member) not in line and member not in line and "example.com" not in line
               for line in lines)


async def test_a_provider_unsubscribe_event_and_the_operator_take_the_same_path(db, site, front_door):
    batch = EventBatch()
    batch.add_one(delivered(1, email_id="e1", kind="unsubscribed"), parse_event)
    await apply_batch(db, batch, "poll")
    done = await unsubscribe_member("member2@example.com", "daily", settings=front_door.settings)
    assert (done.member_id, done.newsletter_id, done.removed) == ("m2", "nl2", 1)
    again = await unsubscribe_member("m2", "nl2", settings=front_door.settings)
    assert again.removed == 0
    _, events = await state(db)
    assert events == [("m1", "nl1", False, "provider", "e1"), ("m2", "nl2", False, "operator", None)]
    report = await newsletter_report("e1", settings=front_door.settings)
    assert (report.unsubscribed_through_email.link, report.unsubscribed_through_email.provider) == (0, 1)


async def test_members_unsubscribe_from_the_command_line(db, site, dev_env, front_door):
    from tests.operations.test_waiting import cli, cli_env

    env = cli_env(front_door.settings, dev_env)
    code, out, err = await cli("members", "unsubscribe", "m4", "--newsletter", "weekly", "--json", env=env)
    assert code == 0, err
    assert json.loads(out) == {"member_id": "m4", "newsletter_id": "nl1", "removed": 1}
    code, out, err = await cli("members", "unsubscribe", "m4", env=env)
    assert code == 0 and "1 subscription removed" in out, err
    code, out, err = await cli("members", "show", "m4", env=env)
    assert code == 0 and "left weekly" in out and "by an operator" in out, err
    code, _, err = await cli("members", "unsubscribe", "m4", "--newsletter", "nope", env=env)
    assert code == 1 and "newsletter nope does not exist" in err


async def test_health(front_door):
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{front_door.base}/healthz")
    # No Temporal beside this door: named with the 200 (tests/deploy/test_health.py).
    assert (response.status_code, response.text.split(";")[0]) == (200, "ok")


async def test_a_database_that_cannot_answer_is_503_not_a_refusal(db, site, front_door):
    await front_door.door.pool.close()
    async with httpx.AsyncClient() as http:
        url = link(front_door.base, site.members["m1"], newsletter=site.newsletter_uuid)
        assert (await http.post(url, **ONE_CLICK)).status_code == 503
        assert (await http.get(url)).status_code == 503
        assert (await http.get(f"{front_door.base}/healthz")).status_code == 503
    assert await db.fetchval("SELECT count(*) FROM members_subscribe_events") == 0
