"""The site's events delivered to integrations' webhooks through the outbox, against real receivers
over HTTP: signed as the reference signs, each (event, webhook) received once after deduplication
by its idempotency key, refusals classified, nothing where it should not go."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from datetime import UTC, datetime, timedelta

import pytest

from activities.outbox import site_events
from activities.outbox.models import outbox_workflow_id
from operations.authoring import PostChange, add_post, edit_post
from operations.members import add_member, delete_member, update_member
from operations.outbox import ensure_relay, outbox_status, requeue_outbox_entry
from operations.posts import schedule_post, unschedule_post
from operations.site_webhooks import create_webhook, delete_webhook, list_webhooks, webhook_attempts
from pressroom import database
from pressroom.errors import BadInput, NotFound
from pressroom.target_urls import address_refusal
from tests.conftest import make_settings
from tests.foundation.test_cli import assert_one_line_error, pressroom
from tests.newsletter.test_failures import spawn_worker, wait_until
from tests.outbox.site_receiver import Behaviour, Receiver
from tests.outbox.test_outbox import WELCOME, settled
from worker import running_worker
from workflows.outbox import RELAY_WORKFLOW_ID

SECRET = "a-webhook-secret"


@pytest.fixture
def hook_settings(postgres_url, mailgun, db):
    def build(**overrides):
        return make_settings(postgres_url, mailgun, outbox_backoff_seconds=[1], outbox_poll_interval_seconds=0.2,
                             **{"site_webhooks_allow_loopback": True, **overrides})
    return build


@pytest.fixture
async def receiver():
    target = await Receiver().start()
    yield target
    await target.stop()


@pytest.fixture
async def integration(db) -> str:
    return await db.fetchval("INSERT INTO integrations (name, slug) VALUES ('Zapier', 'zapier') RETURNING id")


async def running(dev_env, settings):
    """A worker and the relay on the test's task queue."""
    worker = running_worker(dev_env.client, settings)
    await worker.__aenter__()
    await ensure_relay(dev_env.client, settings)
    return worker


async def stopped(dev_env, settings, worker) -> None:
    await dev_env.client.get_workflow_handle(f"{RELAY_WORKFLOW_ID}-{settings.task_queue}").terminate()
    await worker.__aexit__(None, None, None)


@pytest.fixture
async def hooks(dev_env, hook_settings):
    settings = hook_settings()
    worker = await running(dev_env, settings)
    yield settings
    await stopped(dev_env, settings, worker)


async def entries_done(db, count: int | None = None) -> None:
    """Every webhook entry handled (and at least `count` of them written)."""
    async def done() -> bool:
        row = await db.fetchrow("SELECT count(*) AS n, count(*) FILTER (WHERE status IN ('pending', 'sending', "
                                "'failed')) AS open FROM outbox WHERE webhook_id IS NOT NULL")
        return row["open"] == 0 and (count is None or row["n"] >= count)
    await wait_until(done, 120)


async def subscribe(integration: str, settings, url: str, *events: str, secret: str | None = SECRET) -> list[str]:
    return [(await create_webhook(event, url, integration, secret=secret, settings=settings)).id for event in events]


# --- each event type, its payload and its signature ------------------------------------------------

async def test_member_events_arrive_signed_in_the_reference_shape_and_leave_nothing_behind(
        db, receiver, integration, hooks):
    for event in ("member.added", "member.edited", "member.deleted"):
        await subscribe(integration, hooks, receiver.url(f"/{event}"), event)
    added = await add_member("hooked@example.com", "First Name", labels=["vip"], welcome=True, settings=hooks)
    await update_member(added.member_id, name="Second Name", settings=hooks)
    await delete_member(added.member_id, settings=hooks)
    await entries_done(db, 3)

    requests = [request for event in ("member.added", "member.edited", "member.deleted")
                for request in receiver.at(f"/{event}")]
    assert len(requests) == 3 == len(receiver.received)
    assert all(request.signed_with(SECRET) for request in requests)
    assert not any(request.signed_with("another-secret") for request in requests)
    assert {r.headers["Content-Type"] for r in requests} == {"application/json"}
    added_body, edited_body, deleted_body = (r.json() for r in requests)

    current = added_body["member"]["current"]
    assert added_body["member"]["previous"] == {} and list(added_body) == ["member"]
    assert current["id"] == added.member_id and current["email"] == "hooked@example.com"
    assert current["name"] == "First Name" and current["status"] == "free" and current["comped"] is False
    assert [label["slug"] for label in current["labels"]] == ["vip"]
    assert current["created_at"].endswith("Z") and "uuid" in current and current["tiers"] == []

    assert edited_body["member"]["current"]["name"] == "Second Name"
    assert edited_body["member"]["previous"]["name"] == "First Name"
    assert "email" not in edited_body["member"]["previous"]  # only what changed

    assert deleted_body["member"]["current"] == {}
    assert deleted_body["member"]["previous"]["email"] == "hooked@example.com"

    # The members-delete promise: once delivered, nothing of them stays in the outbox.
    assert await db.fetchval("SELECT count(*) FROM outbox WHERE payload::text ILIKE '%hooked@example.com%' "
                             "OR payload::text ILIKE '%Name%'") == 0
    assert await db.fetchval("SELECT count(*) FROM outbox WHERE webhook_id IS NOT NULL AND status = 'succeeded' "
                             "AND payload->>'member_id' = $1", added.member_id) == 3
    webhooks = await list_webhooks("zapier", settings=hooks)
    assert {w.last_triggered_status for w in webhooks} == {"200"} and all(w.has_secret for w in webhooks)


async def test_post_events_arrive_signed_with_current_and_previous(db, receiver, integration, hooks, dev_env):
    for event in ("post.scheduled", "post.rescheduled", "post.unscheduled", "post.published"):
        await subscribe(integration, hooks, receiver.url(f"/{event}"), event)
    post_id = await db.fetchval("INSERT INTO posts (title, slug, html, plaintext) VALUES "
                                "('Hello', 'hello', '<p>Hi</p>', 'Hi') RETURNING id")
    later = datetime.now(UTC) + timedelta(days=1)
    await schedule_post(post_id, later.isoformat(), client=dev_env.client, settings=hooks)
    await schedule_post(post_id, (later + timedelta(hours=1)).isoformat(), client=dev_env.client, settings=hooks)
    await unschedule_post(post_id, client=dev_env.client, settings=hooks)
    await schedule_post(post_id, datetime.now(UTC).isoformat(), client=dev_env.client, settings=hooks)

    async def published() -> bool:
        return await db.fetchval("SELECT status FROM posts WHERE id = $1", post_id) == "published"
    await wait_until(published)
    await entries_done(db, 5)
    assert all(request.signed_with(SECRET) for request in receiver.received)
    shapes = {event: [(r.json()["post"]["current"]["status"], r.json()["post"]["previous"].get("status"))
                      for r in receiver.at(f"/{event}")]
              for event in ("post.scheduled", "post.rescheduled", "post.unscheduled", "post.published")}
    assert shapes == {"post.scheduled": [("scheduled", "draft"), ("scheduled", "draft")],
                      "post.rescheduled": [("scheduled", None)], "post.unscheduled": [("draft", "scheduled")],
                      "post.published": [("published", "scheduled")]}
    rescheduled = receiver.at("/post.rescheduled")[0].json()["post"]
    assert rescheduled["previous"]["published_at"] != rescheduled["current"]["published_at"]
    current = receiver.at("/post.published")[0].json()["post"]["current"]
    assert current["id"] == post_id and current["html"] == "<p>Hi</p>" and current["plaintext"] == "Hi"
    assert current["url"].endswith("/hello/") and current["published_at"].endswith("Z")


async def test_a_published_post_edited_then_unpublished_sends_both_events(db, receiver, integration, hooks, dev_env):
    for event in ("post.published.edited", "post.unpublished"):
        await subscribe(integration, hooks, receiver.url(f"/{event}"), event)
    post = await add_post(PostChange(title="Hello", html="<p>Hi</p>", status="published"), client=dev_env.client,
                          settings=hooks)

    async def published() -> bool:
        return await db.fetchval("SELECT status FROM posts WHERE id = $1", post.id) == "published"
    await wait_until(published)
    assert await db.fetchval("SELECT count(*) FROM outbox WHERE webhook_id IS NOT NULL") == 0, "publishing is no edit"
    await edit_post(post.id, PostChange(title="Hello again"), client=dev_env.client, settings=hooks)
    await edit_post(post.id, PostChange(status="draft"), client=dev_env.client, settings=hooks)
    await entries_done(db, 2)

    [edited] = [r.json()["post"] for r in receiver.at("/post.published.edited")]
    assert (edited["current"]["title"], edited["previous"]) == ("Hello again", {
        "title": "Hello", "updated_at": edited["previous"]["updated_at"]})
    [unpublished] = [r.json()["post"] for r in receiver.at("/post.unpublished")]
    assert (unpublished["current"]["status"], unpublished["previous"]["status"]) == ("draft", "published")
    assert all(request.signed_with(SECRET) for request in receiver.received)
    assert await db.fetchval("SELECT status FROM posts WHERE id = $1", post.id) == "draft"


async def test_no_webhook_no_entry_and_an_unsigned_webhook_sends_no_signature(db, receiver, integration, hooks):
    await add_member("quiet@example.com", welcome=True, settings=hooks)
    assert await db.fetchval("SELECT count(*) FROM outbox WHERE webhook_id IS NOT NULL") == 0
    await subscribe(integration, hooks, receiver.url("/plain"), "member.added", secret=None)
    await add_member("heard@example.com", welcome=True, settings=hooks)
    await entries_done(db, 1)
    [request] = receiver.at("/plain")
    assert "X-Ghost-Signature" not in request.headers and request.json()["member"]["current"]["email"] == \
        "heard@example.com"


# --- answers classified ------------------------------------------------------------------------------

async def test_410_removes_the_webhook_and_skips_its_other_events(db, receiver, integration, hooks):
    [webhook_id] = await subscribe(integration, hooks, receiver.url("/gone"), "member.added")
    receiver.behaviours["/gone"] = Behaviour(status=410)
    await add_member("gone@example.com", welcome=True, settings=hooks)
    await entries_done(db, 1)
    assert await db.fetchval("SELECT count(*) FROM webhooks WHERE id = $1", webhook_id) == 0
    assert await db.fetchval("SELECT status FROM outbox WHERE webhook_id = $1", webhook_id) == "skipped"
    [attempt] = await webhook_attempts(webhook=webhook_id, settings=hooks)
    assert attempt.outcome == "gone" and attempt.status_code == 410
    # Nobody subscribes any more: nothing is written.
    await add_member("after@example.com", welcome=True, settings=hooks)
    assert await db.fetchval("SELECT count(*) FROM outbox WHERE webhook_id IS NOT NULL") == 1


async def test_a_4xx_is_refused_for_good_recorded_listed_and_requeued(db, receiver, integration, hooks, dev_env):
    [webhook_id] = await subscribe(integration, hooks, receiver.url("/picky"), "member.added")
    receiver.behaviours["/picky"] = Behaviour(status=422, answer=b"missing field\x00 x")
    await add_member("picky@example.com", welcome=True, settings=hooks)

    async def aborted() -> bool:
        return await db.fetchval("SELECT status FROM outbox WHERE webhook_id = $1", webhook_id) == "aborted"
    await wait_until(aborted)
    entry = await db.fetchrow("SELECT id, last_error_code, last_error_msg FROM outbox WHERE webhook_id = $1",
                              webhook_id)
    assert entry["last_error_code"] == "WEBHOOK_REFUSED"
    assert entry["last_error_msg"].startswith("the target answered HTTP 422 (a refusal; answer 16 bytes, sha256 ")
    assert len(receiver.at("/picky")) == 1  # not retried
    [failed] = await webhook_attempts(failed=True, settings=hooks)
    assert (failed.outcome, failed.status_code, failed.error) == ("refused", 422, "Request failed: HTTP 422")
    assert failed.answer == "missing field  x"  # kept with the attempt, not in the failure
    hook = (await list_webhooks(settings=hooks))[0]
    assert (hook.last_triggered_status, hook.last_triggered_error) == ("422", "Request failed: HTTP 422")

    receiver.behaviours["/picky"].status = 200
    await requeue_outbox_entry(entry["id"], client=dev_env.client, settings=hooks)
    await settled(db, await db.fetchval("SELECT idempotency_key FROM outbox WHERE id = $1", entry["id"]))
    assert len(receiver.unique("/picky")) == 1 and len(receiver.at("/picky")) == 2


async def test_a_target_down_gets_its_events_in_order_when_it_comes_back(db, receiver, integration, hooks):
    await subscribe(integration, hooks, receiver.url("/down"), "member.added")
    await subscribe(integration, hooks, receiver.url("/up"), "member.added")
    receiver.behaviours["/down"] = Behaviour(status=503)
    for n in range(5):
        await add_member(f"in.order.{n}@example.com", welcome=True, settings=hooks)

    async def up_done_while_down_is_retried() -> bool:  # the other target is not held back
        return len(receiver.at("/down")) >= 3 and len(receiver.unique("/up")) == 5
    await wait_until(up_done_while_down_is_retried)
    assert len(receiver.unique("/down")) == 1  # only the first waits its turn; the others wait behind it
    receiver.behaviours["/down"].status = 200
    await entries_done(db, 10)
    emails = [r.json()["member"]["current"]["email"] for r in receiver.unique("/down")]
    assert emails == [f"in.order.{n}@example.com" for n in range(5)]
    retried = [a for a in await webhook_attempts(failed=True, settings=hooks) if a.outcome == "retried"]
    assert retried and {a.status_code for a in retried} == {503}


async def test_an_answer_lost_after_a_200_is_received_once_after_deduplication(db, receiver, integration, hooks):
    await subscribe(integration, hooks, receiver.url("/lossy"), "member.added", "member.edited")
    receiver.behaviours["/lossy"] = Behaviour(lose_first=True)
    added = await add_member("lossy@example.com", welcome=True, settings=hooks)
    await update_member(added.member_id, name="Renamed", settings=hooks)
    await entries_done(db, 2)
    keys = [r.key for r in receiver.at("/lossy")]
    assert len(set(keys)) == 2 and all(keys.count(key) == 2 for key in set(keys))  # each taken, lost, sent again
    assert await db.fetchval("SELECT count(*) FROM outbox WHERE webhook_id IS NOT NULL AND status = 'succeeded'") == 2


@pytest.mark.crash
async def test_a_worker_killed_during_delivery_leaves_each_event_received_once(
        db, receiver, integration, dev_env, hook_settings):
    settings = hook_settings()
    await subscribe(integration, settings, receiver.url("/held"), "member.added")
    held = asyncio.Event()
    receiver.behaviours["/held"] = Behaviour(hang=held)
    worker = spawn_worker(settings, dev_env, PRESSROOM_WEBHOOKS_ALLOW_LOOPBACK="true",
                          PRESSROOM_OUTBOX_BACKOFF_SECONDS="1")
    try:
        await ensure_relay(dev_env.client, settings)
        added = [await add_member(f"killed.{n}@example.com", welcome=True, settings=settings) for n in range(3)]

        async def in_flight() -> bool:
            return len(receiver.at("/held")) == 1
        await wait_until(in_flight, worker=worker)
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        held.set()  # the request the dead worker made is answered to nobody
        worker = spawn_worker(settings, dev_env, PRESSROOM_WEBHOOKS_ALLOW_LOOPBACK="true",
                              PRESSROOM_OUTBOX_BACKOFF_SECONDS="1")
        await entries_done(db, 3)
    finally:
        worker.terminate()
        worker.wait()
        await dev_env.client.get_workflow_handle(f"{RELAY_WORKFLOW_ID}-{settings.task_queue}").terminate()
    unique = receiver.unique("/held")
    assert sorted(r.json()["member"]["current"]["id"] for r in unique) == sorted(a.member_id for a in added)
    keys = [r.key for r in receiver.at("/held")]
    assert all(keys.count(key) <= 2 for key in keys) and len(keys) <= 4  # only the killed one went twice


# --- only where it should go ----------------------------------------------------------------------------

@pytest.mark.parametrize("url, why", [
    ("http://example.com/hook", "target_url must be https://"),
    ("https://10.1.2.3/hook", "target_url is a private, link-local or reserved address"),
    ("https://169.254.169.254/latest/meta-data", "target_url is a private, link-local or reserved address"),
    ("https://[::ffff:127.0.0.1]/hook", "target_url is a loopback address"),
    # Numeric hosts read as the client's resolver reads them, and IPv6 forms that carry an IPv4 address.
    ("https://2130706433/hook", "target_url is a loopback address"),
    ("https://0177.0.0.1/hook", "target_url is a loopback address"),
    ("https://127.1/hook", "target_url is a loopback address"),
    ("https://0x7f.1./hook", "target_url is a loopback address"),
    ("https://0xa9.0xfe.0xa9.0xfe/latest", "target_url is a private, link-local or reserved address"),
    ("https://1.2.3.4.5/hook", "target_url's host is neither a name nor an address"),
    ("https://[2002:7f00:1::]/hook", "target_url is a loopback address"),
    ("https://[2002:a9fe:a9fe::]/hook", "target_url is a private, link-local or reserved address"),
    ("https://[64:ff9b::a9fe:a9fe]/hook", "target_url is a private, link-local or reserved address"),
    ("https://[fec0::1]/hook", "target_url is a private, link-local or reserved address"),
    ("https://192.0.0.8/hook", "target_url is a private, link-local or reserved address"),
    ("https://192.88.99.1/hook", "target_url is a private, link-local or reserved address"),
    ("ftp://example.com/hook", "target_url must be an https:// URL"),
    ("https://user:pw@example.com/hook", "target_url must name a host, without a user or password"),
])
async def test_a_target_that_should_not_be_reached_is_refused_at_creation(db, integration, postgres_url, mailgun,
                                                                          url, why):
    settings = make_settings(postgres_url, mailgun)
    with pytest.raises(BadInput, match="^" + why):
        await create_webhook("member.added", url, integration, settings=settings)
    assert await db.fetchval("SELECT count(*) FROM webhooks") == 0


def test_addresses_a_webhook_may_reach(postgres_url, mailgun):
    strict = make_settings(postgres_url, mailgun)
    private = make_settings(postgres_url, mailgun, site_webhooks_allow_private=True)
    for address in ("10.0.0.1", "192.168.1.1", "172.16.0.1", "100.64.0.1", "169.254.169.254", "fd00::1",
                    "fe80::1", "0.0.0.0", "::ffff:10.0.0.1", "127.0.0.1", "::1", "224.0.0.1"):
        assert address_refusal(address, strict) is not None, address
    assert address_refusal("93.184.216.34", strict) is None and address_refusal("2606:4700::1", strict) is None
    assert address_refusal("10.0.0.1", private) is None and address_refusal("127.0.0.1", private) is not None


async def test_a_name_that_resolves_to_loopback_is_refused_when_the_connection_is_made(
        db, receiver, integration, dev_env, hook_settings):
    """Accepted at creation (a name), refused at delivery: the address it resolves to then is checked."""
    settings = hook_settings(site_webhooks_allow_loopback=False)
    webhook = await create_webhook("member.added", f"https://localhost:{receiver.port}/inside", integration,
                                   settings=settings)
    worker = await running(dev_env, settings)
    try:
        await add_member("inside@example.com", welcome=True, settings=settings)

        async def aborted() -> bool:
            return await db.fetchval("SELECT status FROM outbox WHERE webhook_id = $1", webhook.id) == "aborted"
        await wait_until(aborted)
    finally:
        await stopped(dev_env, settings, worker)
    assert receiver.received == []
    entry = await db.fetchrow("SELECT last_error_code, last_error_msg FROM outbox WHERE webhook_id = $1", webhook.id)
    assert entry["last_error_code"] == "WEBHOOK_REFUSED_ADDRESS"
    assert entry["last_error_msg"] == "the target resolves to a loopback address, which a webhook may not reach"


# --- written with the change, or not at all -------------------------------------------------------------

async def test_a_rolled_back_change_emits_nothing(db, receiver, integration, hooks):
    await subscribe(integration, hooks, receiver.url("/rollback"), "member.added", "member.edited")
    with pytest.raises(BadInput, match="no tier gold"):
        await add_member("refused@example.com", tiers=["gold"], welcome=True, settings=hooks)
    member_id = await db.fetchval("INSERT INTO members (email) VALUES ('kept@example.com') RETURNING id")
    with pytest.raises(RuntimeError):
        async with database.connection(hooks.require_database()) as conn, conn.transaction():
            await conn.execute("UPDATE members SET name = 'Never' WHERE id = $1", member_id)
            assert await site_events.emit(conn, "member.edited", member_id, {member_id: {"name": None}}) == 1
            raise RuntimeError("the change fails after its event was written")
    assert await db.fetchval("SELECT count(*) FROM outbox") == 0
    await add_member("written@example.com", welcome=True, settings=hooks)
    await entries_done(db, 1)
    assert [r.json()["member"]["current"]["email"] for r in receiver.at("/rollback")] == ["written@example.com"]


async def test_a_webhook_removed_skips_its_undelivered_events(db, receiver, integration, hooks, dev_env):
    [webhook_id] = await subscribe(integration, hooks, receiver.url("/slow"), "member.added")
    receiver.behaviours["/slow"] = Behaviour(hang=asyncio.Event())
    for n in range(3):
        await add_member(f"removed.{n}@example.com", welcome=True, settings=hooks)

    async def one_in_flight() -> bool:
        return len(receiver.at("/slow")) == 1
    await wait_until(one_in_flight)
    assert await delete_webhook(webhook_id, settings=hooks) == 2  # the two behind the one in flight
    receiver.behaviours["/slow"].hang.set()
    await entries_done(db, 3)
    assert await db.fetchval("SELECT count(*) FROM outbox WHERE webhook_id = $1 AND payload ? 'body'", webhook_id) == 0
    with pytest.raises(NotFound):
        await delete_webhook(webhook_id, settings=hooks)
    skipped = await db.fetchval("SELECT id FROM outbox WHERE webhook_id = $1 AND status = 'skipped' LIMIT 1",
                                webhook_id)
    with pytest.raises(BadInput, match="its webhook was removed or its body cleared"):
        await requeue_outbox_entry(skipped, client=dev_env.client, settings=hooks)


# --- one slow target holds back nobody ----------------------------------------------------------------------

async def test_a_slow_target_does_not_delay_the_welcome_email(db, mailgun, receiver, integration, hooks):
    await db.execute(WELCOME)
    await subscribe(integration, hooks, receiver.url("/stuck"), "member.added")
    stuck = asyncio.Event()
    receiver.behaviours["/stuck"] = Behaviour(hang=stuck)
    added = [await add_member(f"welcomed.{n}@example.com", welcome=True, settings=hooks) for n in range(10)]
    for member in added:
        await settled(db, member.welcome_key)
    # Every welcome went out while the target still holds its first event (tried again after each
    # timeout, on a slow machine) and the rest wait behind it.
    assert len(receiver.unique("/stuck")) == 1
    assert sum(any(f"welcomed.{n}@example.com" in m.recipients for m in mailgun.messages) for n in range(10)) == 10
    stuck.set()
    await entries_done(db, 10)
    assert len(receiver.unique("/stuck")) == 10


# --- the operator ----------------------------------------------------------------------------------------------

async def test_outbox_status_counts_site_events_by_type_and_by_webhook(db, receiver, integration, hooks):
    [webhook_id] = await subscribe(integration, hooks, receiver.url("/counted"), "member.added")
    await add_member("counted@example.com", welcome=True, settings=hooks)
    await entries_done(db, 1)
    status = await outbox_status(settings=hooks)
    assert status.by_event == {"member.added": {"succeeded": 1}}
    assert status.by_webhook == {webhook_id: {"succeeded": 1}}


async def test_the_command_line_adds_lists_and_removes_webhooks(db, integration, postgres_url):
    env = {"DATABASE_URL": postgres_url, "PRESSROOM_WEBHOOK_SECRET": "from-the-environment"}
    added = await asyncio.to_thread(pressroom, "integrations", "webhooks", "add", "member.added",
                                    "https://hooks.example.com/in", "--integration", "zapier", "--json", env=env)
    assert added.returncode == 0, added.stderr
    webhook = json.loads(added.stdout)
    assert webhook["has_secret"] is True and "secret" not in webhook and "from-the-environment" not in added.stdout
    assert await db.fetchval("SELECT secret FROM webhooks WHERE id = $1", webhook["id"]) == "from-the-environment"
    listed = await asyncio.to_thread(pressroom, "integrations", "webhooks", "list", env=env)
    assert webhook["id"] in listed.stdout and "member.added" in listed.stdout
    assert "from-the-environment" not in listed.stdout
    refused = await asyncio.to_thread(pressroom, "integrations", "webhooks", "add", "tag.added",
                                      "https://hooks.example.com/in", "--integration", "zapier", env=env)
    assert_one_line_error(refused, "event 'tag.added' is not one of the site's events: post.published, ")
    attempts = await asyncio.to_thread(pressroom, "integrations", "webhooks", "attempts", "--failed", env=env)
    assert attempts.returncode == 0 and "no attempts" in attempts.stdout
    removed = await asyncio.to_thread(pressroom, "integrations", "webhooks", "remove", webhook["id"], env=env)
    assert removed.returncode == 0 and "removed" in removed.stdout
    assert await db.fetchval("SELECT count(*) FROM webhooks") == 0


async def test_a_deleted_members_refused_event_keeps_nothing_of_them(db, receiver, integration, hooks):
    [webhook_id] = await subscribe(integration, hooks, receiver.url("/refuses"), "member.added")
    receiver.behaviours["/refuses"] = Behaviour(status=400)
    added = await add_member("refused.then.deleted@example.com", "Refused Reader", welcome=True, settings=hooks)

    async def aborted() -> bool:
        return await db.fetchval("SELECT status FROM outbox WHERE webhook_id = $1", webhook_id) == "aborted"
    await wait_until(aborted)
    assert await db.fetchval("SELECT count(*) FROM outbox WHERE payload::text LIKE '%refused.then.deleted%'") == 1
    await delete_member(added.member_id, settings=hooks)
    assert await db.fetchval("SELECT count(*) FROM outbox WHERE payload::text ILIKE '%refused%reader%' "
                             "OR payload::text LIKE '%refused.then.deleted%'") == 0
    assert await db.fetchval("SELECT status FROM outbox WHERE webhook_id = $1", webhook_id) == "skipped"


@pytest.mark.parametrize("status", [500, 400])
async def test_a_targets_answer_reaches_neither_the_history_nor_the_log_and_goes_with_the_member(
        db, receiver, integration, hook_settings, dev_env, caplog, status):
    """The target answers with the member's name and address in its body: the failure (Temporal's
    history, the outbox row, the worker's log) says the status and a digest; the answer is kept with
    the attempt, and `members delete` clears it."""
    caplog.set_level(logging.DEBUG)
    settings = hook_settings(site_webhooks_max_attempts=2)
    worker = await running(dev_env, settings)
    try:
        [webhook_id] = await subscribe(integration, settings, receiver.url("/echoes"), "member.added")
        receiver.behaviours["/echoes"] = Behaviour(
            status=status, answer=b'{"error": "Zebedee Quarrington <zebedee.q@example.com> is not welcome"}')
        added = await add_member("zebedee.q@example.com", "Zebedee Quarrington", settings=settings)

        async def aborted() -> bool:
            return await db.fetchval("SELECT status FROM outbox WHERE webhook_id = $1", webhook_id) == "aborted"
        await wait_until(aborted, 120)
        entry = await db.fetchrow("SELECT idempotency_key, last_error_msg FROM outbox WHERE webhook_id = $1",
                                  webhook_id)
        history = await dev_env.client.get_workflow_handle(outbox_workflow_id(entry["idempotency_key"])) \
            .fetch_history()
    finally:
        await stopped(dev_env, settings, worker)
    written = json.dumps(history.to_json_dict()) + caplog.text + entry["last_error_msg"]
    assert f"HTTP {status}" in entry["last_error_msg"] and "sha256" in entry["last_error_msg"]
    for secret in ("Zebedee", "Quarrington", "zebedee.q"):
        assert secret not in written
    answers = [a.answer for a in await webhook_attempts(webhook=webhook_id, settings=settings)]
    assert answers and all("Zebedee Quarrington" in (answer or "") for answer in answers)
    await delete_member(added.member_id, settings=settings)
    assert await db.fetchval("SELECT count(*) FROM webhook_attempts WHERE answer IS NOT NULL") == 0
