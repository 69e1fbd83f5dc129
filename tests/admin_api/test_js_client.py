"""The issue's "done when": the reference platform's own JavaScript client (@tryghost/admin-api from
npm, installed into a temporary folder) drives the Admin API of a real front door, with a real
worker on Temporal's dev server, PostgreSQL and the Mailgun simulator; each reader gets each email
once, as the client, the CLI and the simulator all say."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.authoring.lexical_documents import every_card
from tests.foundation.test_cli import pressroom
from tests.frontdoor.conftest import close_door, open_door
from tests.newsletter.test_failures import wait_until
from tests.newsletter.test_send import delivered
from tests.outbox.test_outbox import settled
from tests.outbox.test_welcome_emails import WELCOMES, sent_to
from worker import running_worker

CLIENT = "@tryghost/admin-api@1.14.13"
SCENARIO = Path(__file__).with_name("client_scenario.js")


@pytest.fixture(scope="module")
def client_folder() -> Iterator[Path]:
    """The client installed with npm into a folder of its own, removed afterwards."""
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip("node and npm are needed to run the reference's JavaScript client")
    with tempfile.TemporaryDirectory(prefix="pressroom-admin-api-") as folder:
        done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent", CLIENT], cwd=folder,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"npm install {CLIENT} failed: {done.stderr[-2000:]}"
        shutil.copy(SCENARIO, folder)
        yield Path(folder)


async def node(folder: Path, *args: str) -> dict:
    process = await asyncio.create_subprocess_exec("node", SCENARIO.name, *args, cwd=folder,
                                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 180)
    assert process.returncode == 0, err.decode()[-3000:]
    return json.loads(out)


@pytest.mark.slow  # npm installs the client, then a post is scheduled, published and sent
async def test_the_reference_client_authors_publishes_and_sends(client_folder, dev_env, api_settings, admin_key, db,
                                                                mailgun):
    settings = api_settings.model_copy(update={"temporal_address": dev_env.client.service_client.config.target_host,
                                               "publish_lead_seconds": 1.0})
    door = await open_door(settings)
    try:
        async with running_worker(dev_env.client, settings):
            result = await node(client_folder, "scenario", door.base, admin_key)
            await check_scenario(result, settings, db, mailgun, client_folder, door.base, admin_key)
    finally:
        await close_door(door)


async def check_scenario(result: dict, settings, db, mailgun, folder: Path, base: str, key: str) -> None:
    assert result["site"]["url"]
    assert result["tier"]["slug"] == "gold"
    vip1, vip2, _plain, comped = result["members"]
    assert [label["slug"] for label in vip1["labels"]] == ["vip"] and vip2["note"] == "met at the fair"
    assert comped["comped"] is True and comped["status"] == "comped"
    assert result["vips"] == 2 and result["vipsMeta"]["pagination"]["total"] == 2
    assert result["searched"] == ["plain@client-example.com"]
    assert "<script" not in result["draft"]["html"] and "onclick" not in result["draft"]["html"]
    assert result["collision"]["type"] == "UpdateCollisionError"
    assert result["gone"]["type"] == "NotFoundError"
    assert result["invalid"]["type"] == "ValidationError"
    assert result["bySlug"] == result["published"]["id"]
    assert result["edited"]["title"] == "For everyone, edited" and result["edited"]["status"] == "scheduled"
    assert [label["slug"] for label in result["renamed"]["labels"]] == ["regular"]
    designed = result["designed"]
    assert (designed["title_alignment"], designed["background_color"], designed["show_byline"],
            designed["footer_content"], designed["show_header_icon"]) == ("left", "#ffeedd", False, "<p>Bye</p>", True)
    assert result["badDesign"]["type"] == "ValidationError"
    # A member added through the API has their MemberCreatedEvent, as `members add` does; no welcome asked.
    for member in result["members"]:
        assert await db.fetchval("SELECT payload->>'welcome' FROM outbox WHERE idempotency_key = $1",
                                 f"member-created-{member['id']}") == "false"

    vip_post, everyone_post = result["published"], result["scheduled"]
    emails = {}
    for post in (vip_post, everyone_post):
        async def submitted(post_id=post["id"]) -> bool:
            return await db.fetchval("SELECT status = 'submitted' FROM emails WHERE post_id = $1", post_id) is True
        await wait_until(submitted, timeout=120)
        emails[post["id"]] = await db.fetchval("SELECT id FROM emails WHERE post_id = $1", post["id"])

    addresses = {m["email"] for m in result["members"]}
    vips = {vip1["email"], vip2["email"]}
    assert delivered(mailgun, emails[vip_post["id"]]) == dict.fromkeys(vips, 1)
    assert delivered(mailgun, emails[everyone_post["id"]]) == dict.fromkeys(addresses, 1)
    for address in addresses:  # each reader, each email, once: and nothing else from these posts
        got = [m for m in mailgun.messages if address in m.recipients and m.email_id in emails.values()]
        assert len(got) == (2 if address in vips else 1)

    # Through the client: both posts published, each with its email submitted.
    checked = await node(folder, "check", base, key, vip_post["id"], everyone_post["id"])
    assert [(p["status"], p["email"]["status"]) for p in checked["posts"]] == [("published", "submitted")] * 2
    assert {vip_post["id"], everyone_post["id"]} <= set(checked["browsed"])
    # Through the CLI: the email's report counts the readers it was sent to.
    env = {**os.environ, "DATABASE_URL": settings.database_url, "TEMPORAL_ADDRESS": settings.temporal_address,
           "PRESSROOM_TASK_QUEUE": settings.task_queue}
    for post_id, readers in ((vip_post["id"], 2), (everyone_post["id"], 4)):
        shown = pressroom("newsletter", "status", emails[post_id], "--json", env=env)
        assert shown.returncode == 0, shown.stderr
        status = json.loads(shown.stdout)
        assert status["status"] == "submitted" and status["recipients"] == readers, status


async def test_the_reference_client_adds_a_post_written_as_lexical(client_folder, admin_door, admin_key, db):
    document = every_card()
    result = await node(client_folder, "lexical", admin_door.base, admin_key, document)
    assert result["read"]["lexical"] == document and "Read more" in result["read"]["html"]
    assert await db.fetchval("SELECT lexical FROM posts WHERE id = $1", result["added"]["id"]) == document
    assert result["unknown"]["type"] == "ValidationError" and "transistor" in result["unknown"]["message"]


async def test_the_reference_client_gets_a_welcome_email_only_when_it_asks(client_folder, admin_door, admin_key,
                                                                          relay, db, mailgun):
    """`members.add(data)` sends nothing, as the reference; `{send_email: true, email_type: 'signup'}` (the
    client's query parameters) the welcome email. Each member's event is written all the same."""
    await db.execute(WELCOMES)
    result = await node(client_folder, "welcome", admin_door.base, admin_key)
    assert result["signin"]["type"] == "ValidationError" and "email_type signin" in result["signin"]["message"]
    assert await db.fetchval("SELECT count(*) FROM members WHERE email = 'signin@client-example.com'") == 0
    for name, asked in (("quiet", False), ("refused", False), ("asked", True)):
        key = f"member-created-{result[name]['id']}"
        assert json.loads(await db.fetchval("SELECT payload FROM outbox WHERE idempotency_key = $1", key)) == \
            {"member_id": result[name]["id"], "welcome": asked}
        await settled(db, key)
    assert [m.subject for m in sent_to(mailgun, "asked@client-example.com")] == ["Welcome, free reader"]
    assert sent_to(mailgun, "quiet@client-example.com") == sent_to(mailgun, "quiet.too@client-example.com") == []
    assert await db.fetchval("SELECT count(*) FROM automated_email_recipients") == 1
