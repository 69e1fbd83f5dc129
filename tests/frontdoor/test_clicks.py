"""Clicks counted by Pressroom's own redirects: a real email (nested links, links in segments and in
the paywall's free part, a link twice, a mailto:) sent through the Mailgun simulator, its copies'
links followed through the real front door as readers, forwarders, attackers and scanners would,
then the stored clicks, the report and a member's story read back (PostgreSQL, a Temporal server,
the simulator and the front door all real)."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from html import unescape

import httpx
import pytest

from devstack.link_followers import BROWSER
from devstack.servers import free_port
from frontdoor.server import FrontDoor
from operations.clicks import email_clicks
from operations.members import member_profile
from operations.reports import newsletter_report
from pressroom import database
from pressroom.settings import Settings
from tests.analytics.conftest import seed_newsletter
from tests.conftest import make_settings
from tests.newsletter.test_send import run_send
from tests.operations.test_finding import json_of
from tests.operations.test_waiting import cli, cli_env
from worker import running_worker

POST = ('<p>Read <a href="https://example.com/story">the story</a> and '
        '<a href="https://example.com/outer">outer <span><a href="https://example.com/nested">nested</a></span></a>.</p>'
        '<div data-gh-segment="status:free"><p><a href="https://example.com/free-offer">Free offer</a></p></div>'
        '<div data-gh-segment="status:-free"><p><a href="https://example.com/paid-bonus">Paid bonus</a></p></div>'
        '<p>Again: <a href="https://example.com/story">the story</a>; write to '
        '<a href="mailto:editor@example.com">the editor</a>; '
        '<a href="%%{unsubscribe_url}%%">leave</a>; <a href="https://example.com/p?who=%%{uuid}%%">yours</a></p>'
        '<!--members-only--><p>Paid part: <a href="https://example.com/paid-only">deep dive</a></p>')
_LINK = re.compile(r'href="([^"]+)"')


@dataclass
class Sent:
    email_id: str
    post_id: str
    members: dict[str, dict]  # kind → id, email, uuid
    settings: Settings
    base: str  # the front door, where the links point


@pytest.fixture
async def door_and_settings(postgres_url, mailgun, db) -> AsyncIterator[tuple[str, Settings]]:
    """The front door on a free port, and settings whose site is that front door."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    settings = make_settings(postgres_url, mailgun, site_url=base, email_track_clicks=True,
                             outbound_link_tagging=True, webhook_signing_key=mailgun.webhook_signing_key)
    pool = await database.connect(settings.database_url, max_size=10)
    door = FrontDoor(pool, settings)
    await door.start("127.0.0.1", port)
    try:
        yield base, settings
    finally:
        await door.stop()
        await pool.close()


async def send_post(db, client, settings: Settings, base: str, kinds=("free", "paid", "other")) -> Sent:
    tag = uuid.uuid4().hex[:8]
    async with db.acquire() as conn, conn.transaction():
        newsletter_id = await conn.fetchval(
            "INSERT INTO newsletters (name, slug, sender_email) VALUES ('The Weekly', $1, 'weekly@example.com') "
            "RETURNING id", f"weekly-{tag}")
        members = {}
        for kind in kinds:
            members[kind] = dict(await conn.fetchrow(
                "INSERT INTO members (email, name, status, created_at) VALUES ($1, $2, $3, now() - interval '1 hour') "
                "RETURNING id, email, uuid::text AS uuid", f"{kind}-{tag}@example.com", kind.title(),
                "paid" if kind == "paid" else "free"))
            await conn.execute("INSERT INTO members_newsletters (member_id, newsletter_id) VALUES ($1, $2)",
                               members[kind]["id"], newsletter_id)
        post_id = await conn.fetchval(
            "INSERT INTO posts (title, slug, html, newsletter_id, visibility, status, published_at) "
            "VALUES ('Issue', $1, $2, $3, 'paid', 'published', now()) RETURNING id",
            f"issue-{tag}", POST, newsletter_id)
        email_id = await conn.fetchval(
            "INSERT INTO emails (post_id, newsletter_id, subject, html) VALUES ($1, $2, 'Issue', $3) RETURNING id",
            post_id, newsletter_id, POST)
    outcome = await run_send(client, settings, email_id)
    assert outcome.status == "submitted"
    return Sent(email_id, post_id, members, settings, base)


def copy_of(mailgun, sent: Sent, kind: str) -> tuple[str, str]:
    [message] = [m for m in mailgun.messages_for(sent.email_id) if sent.members[kind]["email"] in m.recipients]
    _, html, text = message.received_by(sent.members[kind]["email"])
    return html, text


def links_in(html: str) -> list[str]:
    return [unescape(href) for href in _LINK.findall(html)]


def tracked(base: str, links: list[str]) -> list[str]:
    return [link for link in links if link.startswith(f"{base}/r/")]


async def settled(db, seconds: float = 60) -> None:
    """Until the front door has settled every reader's click (SETTLE_AFTER_SECONDS after it came)."""
    deadline = time.monotonic() + seconds
    while await db.fetchval("SELECT count(*) FROM members_click_events_unsettled"):
        assert time.monotonic() < deadline, "clicks not settled"
        await asyncio.sleep(0.2)


async def clicks(db, post_id: str) -> list[tuple]:
    return [tuple(r) for r in await db.fetch(
        'SELECT c.member_id, r."to", c.scanner FROM members_click_events c JOIN redirects r ON r.id = c.redirect_id '
        'WHERE r.post_id = $1 ORDER BY c.created_at, c.id', post_id)]


async def test_links_are_tracked_followed_counted_and_reported(db, mailgun, time_skipping_env, door_and_settings):
    base, settings = door_and_settings
    async with running_worker(time_skipping_env.client, settings):
        sent = await send_post(db, time_skipping_env.client, settings, base)
    free_html, free_text = copy_of(mailgun, sent, "free")
    paid_html, paid_text = copy_of(mailgun, sent, "paid")
    ref = "ref=the-weekly-newsletter"

    # Rendering: every http(s) link of the body goes through a redirect carrying the reader's uuid;
    # the mailto:, the member's own links (unsubscribe, a link with their uuid) are left as they are.
    free_links, paid_links = links_in(free_html), links_in(paid_html)
    assert "mailto:editor@example.com" in free_links and "mailto:editor@example.com" in paid_links
    assert not [link for link in free_links + paid_links if link.startswith("https://example.com/")
                and "who=" not in link]
    assert any(link.startswith(f"{base}/unsubscribe/?uuid={sent.members['free']['uuid']}") for link in free_links)
    assert f"https://example.com/p?who={sent.members['free']['uuid']}" in free_links
    free_tracked, paid_tracked = tracked(base, free_links), tracked(base, paid_links)
    assert all(link.endswith(f"?m={sent.members['free']['uuid']}") for link in free_tracked)
    assert all(link.endswith(f"?m={sent.members['paid']['uuid']}") for link in paid_tracked)
    # The template's "view in browser" and title, story (twice, one redirect), outer, nested, the segment's
    # offer, the paywall's link to the post (the same redirect as the template's two)
    assert len(free_tracked) == 8 and len(set(free_tracked)) == 5
    # The template's two, story (twice), outer, nested, the paid segment's bonus, the paid part
    assert len(paid_tracked) == 8 and len(set(paid_tracked)) == 6
    # The plain-text part carries the same tracked links.
    assert set(re.findall(rf"{re.escape(base)}/r/[0-9a-f]+\?m=[0-9a-f-]+", free_text)) == set(free_tracked)
    assert set(re.findall(rf"{re.escape(base)}/r/[0-9a-f]+\?m=[0-9a-f-]+", paid_text)) == set(paid_tracked)
    redirects = {r["from"]: r["to"] for r in await db.fetch(
        'SELECT "from", "to" FROM redirects WHERE post_id = $1', sent.post_id)}
    assert len(redirects) == 7  # one per distinct target of the email, both segments together
    assert redirects[free_tracked[2].removeprefix(base).split("?")[0]] == f"https://example.com/story?{ref}"
    assert sorted(t for t in redirects.values() if not t.startswith(base)) == sorted(
        f"https://example.com/{path}?{ref}" for path in ("story", "outer", "nested", "free-offer", "paid-bonus",
                                                         "paid-only"))
    # The provider's own click tracking is off.
    [message] = [m for m in mailgun.messages_for(sent.email_id) if sent.members["free"]["email"] in m.recipients]
    assert message.options["tracking-clicks"] == "no"

    async with httpx.AsyncClient(headers={"User-Agent": BROWSER}) as http:
        # A reader follows the story twice, another reader the paid bonus once.
        story = free_tracked[2]  # after the template's two
        for _ in range(2):
            answer = await http.get(story)
            assert answer.status_code == 302 and answer.headers["location"] == f"https://example.com/story?{ref}"
        bonus = next(link for link in paid_tracked if redirects[link.removeprefix(base).split("?")[0]].startswith(
            "https://example.com/paid-bonus"))
        assert (await http.get(bonus)).headers["location"] == f"https://example.com/paid-bonus?{ref}"

        # A forwarded copy: no member, a malformed one, an unknown one; each still redirects.
        bare = story.split("?")[0]
        for link in (bare, f"{bare}?m=not-a-uuid", f"{bare}?m={uuid.uuid4()}"):
            answer = await http.get(link)
            assert answer.status_code == 302 and answer.headers["location"] == f"https://example.com/story?{ref}"

        # No URL is ever taken from the request.
        answer = await http.get(f"{story}&to=https://evil.example/&url=https://evil.example/")
        assert answer.headers["location"] == f"https://example.com/story?{ref}"
        for path in ("/r/ffffffffffffffffffffffff", "/r/https:%2F%2Fevil.example", "/r/..%2F..%2Fetc",
                     "/r/" + "a" * 65, "/r//evil.example"):
            answer = await http.get(base + path)
            assert answer.status_code == 404 and "evil" not in answer.headers.get("location", ""), path
        unknown = await http.get(f"{base}/r/ffffffffffffffffffffffff?m={sent.members['free']['uuid']}")
        assert unknown.status_code == 404 and "This link is not valid" in unknown.text
        assert unknown.headers["content-type"].startswith("text/html")
        # HEAD answers the redirect and records nothing.
        head = await http.head(story)
        assert head.status_code == 302

    free, paid = sent.members["free"]["id"], sent.members["paid"]["id"]
    stored = await clicks(db, sent.post_id)
    story_target, bonus_target = f"https://example.com/story?{ref}", f"https://example.com/paid-bonus?{ref}"
    assert stored == [(free, story_target, None)] * 2 + [(paid, bonus_target, None)] + [
        (None, story_target, None)] * 3 + [(free, story_target, None)]  # the last: the refused open redirect

    # A reader's click is an open when the open was not seen, and the member was seen.
    await settled(db)
    opened = {r["member_id"]: r["opened_at"] for r in await db.fetch(
        "SELECT member_id, opened_at FROM email_recipients WHERE email_id = $1", sent.email_id)}
    assert opened[free] is not None and opened[paid] is not None and opened[sent.members["other"]["id"]] is None
    assert await db.fetchval("SELECT count(*) FROM email_analytics_dirty_emails WHERE email_id = $1", sent.email_id)
    seen = {r["id"]: r["last_seen_at"] for r in await db.fetch("SELECT id, last_seen_at FROM members")}
    assert seen[free] is not None and seen[paid] is not None and seen[sent.members["other"]["id"]] is None

    report = (await newsletter_report(sent.email_id, settings=settings)).model_dump()
    c = report["clicks"]
    assert (c["clicked"], c["clicks"], c["without_member"], c["set_apart"]) == (2, 7, 3, 0)
    assert [(link["target"], link["clickers"], link["clicks"]) for link in c["top_links"]] == [
        (story_target, 1, 3), (bonus_target, 1, 1)]  # the 3 without a member are counted apart only

    profile = (await member_profile(free, settings=settings)).model_dump()
    assert [(x["target"], x["email_id"], x["scanner"]) for x in profile["clicks"]] == [
        (story_target, sent.email_id, None)] * 3
    assert profile["last_seen_at"] is not None


async def test_a_scanners_burst_is_set_apart(db, mailgun, time_skipping_env, door_and_settings):
    base, settings = door_and_settings
    async with running_worker(time_skipping_env.client, settings):
        sent = await send_post(db, time_skipping_env.client, settings, base)
    free_html, _ = copy_of(mailgun, sent, "free")
    other_html, _ = copy_of(mailgun, sent, "other")
    async with httpx.AsyncClient() as http:
        # A gateway that passes for a browser fetches every link of the copy at once…
        for link in dict.fromkeys(tracked(base, links_in(other_html))):
            assert (await http.get(link, headers={"User-Agent": BROWSER})).status_code == 302
        # …and one that says who it is fetches one.
        link = tracked(base, links_in(free_html))[0]
        assert (await http.get(link, headers={"User-Agent": "Mozilla/5.0 (compatible; Barracuda Sentinel)"})
                ).status_code == 302

    # A burst is marked as its clicks settle, before any of them could count as a reader's.
    await settled(db)
    stored = await clicks(db, sent.post_id)
    other, free = sent.members["other"]["id"], sent.members["free"]["id"]
    assert {(m, s) for m, _, s in stored} == {(other, "burst"), (free, "user-agent")}
    assert len(stored) == 6
    # Not readers: no open, not seen.
    assert await db.fetchval("SELECT count(opened_at) FROM email_recipients WHERE email_id = $1", sent.email_id) == 0
    assert await db.fetchval("SELECT count(last_seen_at) FROM members WHERE id = ANY($1)", [other, free]) == 0

    report = (await newsletter_report(sent.email_id, settings=settings)).model_dump()
    assert report["clicks"]["clicked"] == 0 and report["clicks"]["clicks"] == 0
    assert report["clicks"]["set_apart"] == 6 and report["clicks"]["set_apart_by"] == {"burst": 5, "user-agent": 1}
    assert report["clicks"]["top_links"] == []


async def test_the_simulators_readers_and_scanners_show_in_the_report_and_cli(db, mailgun, dev_env,
                                                                             door_and_settings):
    base, settings = door_and_settings
    mailgun.set_rates(failed_permanent=0, failed_temporary=0)  # every copy delivered, so every one read
    mailgun.links.following.update({"readers": 1.0, "scanners": 1.0, "reader_delay_seconds": 6})
    kinds = tuple(f"m{n}" for n in range(8))
    async with running_worker(dev_env.client, settings):
        sent = await send_post(db, dev_env.client, settings, base, kinds=kinds)
    await mailgun.links.settle()
    counts = mailgun.links.counts
    assert counts["reader"] == 8 and counts["scanner"] == 8 and counts["unreachable"] == 0
    assert counts["answered_302"] == sum(v for k, v in counts.items() if k.startswith("answered_"))
    readers = counts["answered_302"] - 8 * 5  # each scanner fetched the copy's five distinct links

    await settled(db)  # each member's clicks judged: a reader's, or a scanner's burst
    env = cli_env(settings, dev_env)
    report = await json_of("newsletter", "report", sent.email_id, env=env)
    c = report["clicks"]
    assert (c["clicked"], c["clicks"], c["set_apart"]) == (8, readers, 40) and c["top_links"]
    assert sum(c["set_apart_by"].values()) == 40 and set(c["set_apart_by"]) <= {"burst", "user-agent"}
    code, out, err = await cli("newsletter", "report", sent.email_id, env=env)
    assert code == 0 and "clicked: 8 members" in out and "set apart as mail scanners'" in out, err
    code, out, err = await cli("members", "show", sent.members["m0"]["id"], env=env)
    assert code == 0 and "last clicks" in out and "https://example.com/" in out, err


async def test_requests_naming_no_member_never_rank_a_link(db):
    """Thirty GETs with a browser's User-Agent and no member (anyone can send them) are counted
    apart, and the report's top links stay ranked by members' clicks."""
    await seed_newsletter(db, members=3, emails=1)
    await db.execute("""INSERT INTO redirects (id, "from", "to", post_id) VALUES
        ('ra', '/r/read', 'https://example.com/read', 'p0'), ('rb', '/r/pumped', 'https://example.com/pumped', 'p0')""")
    await db.execute("INSERT INTO members_click_events (id, member_id, redirect_id, created_at) "
                     "SELECT 'c' || n, 'm' || (n % 2), 'ra', now() FROM generate_series(1, 2) n")
    await db.execute("INSERT INTO members_click_events (id, member_id, redirect_id, created_at) "
                     "SELECT 'x' || n, NULL, 'rb', now() FROM generate_series(1, 30) n")
    async with db.acquire() as conn:
        figures = await email_clicks(conn, "p0", delivered=3)
    assert figures.without_member == 30 and figures.clicked == 2
    assert [(link.target, link.clickers, link.clicks) for link in figures.top_links] == [
        ("https://example.com/read", 2, 2)]
