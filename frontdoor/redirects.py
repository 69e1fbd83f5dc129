"""GET /r/{id}?m={member uuid}: a tracked link of a newsletter, answered 302 to its stored target,
the click recorded (docs/clicks.md).

- Only stored targets: the redirect is looked up by its path (`redirects.from`); nothing of the
  request becomes the Location. Targets never change once made, so each is cached in memory after
  its first read and a hot link needs no database read.
- The click is committed before the 302 goes out, so a click answered is a click kept, even when
  the server is killed right after. The clicks that arrive while a commit is in flight share the
  next one (frontdoor/group_commit.py's pattern): one transaction for up to GROUP_LIMIT clicks.
  When the database takes longer than PRESSROOM_CLICK_COMMIT_WAIT_SECONDS the reader is redirected
  anyway and the click stays queued, tried again until it commits (lost only if the server dies
  first). Each click has its own id, so a group tried again after an uncertain commit stores none
  twice.
- `m` names the member; missing, malformed or unknown, the link still redirects (a forwarded
  email) and the click is kept without a member.
- A mail scanner's prefetch is kept, marked and left out of the readers' figures: a known scanner's
  user agent or network (PRESSROOM_CLICK_SCANNER_NETWORKS) when the request comes; a click within
  BURST_SECONDS of the email's delivery to the member, when it is committed; one member's clicks on
  several links of one email within BURST_SECONDS of each other, when they settle (off the reader's
  path: a click's commit is one statement).
- A reader's click counts as an open when their open was not seen (images blocked) and moves the
  member's last-seen time, once it is old enough that every click of its burst is stored
  (SETTLE_AFTER_SECONDS): its burst marked first, then settled. The waiting clicks are a table, so
  a server killed meanwhile loses none: the next one marks and settles them.
- Recording the click is the only thing a GET changes, as on the reference platform; HEAD answers
  the same redirect and records nothing.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import quote

import asyncpg
from aiohttp import web
from temporalio.common import MetricMeter

from frontdoor.deadlines import client_address
from frontdoor.plain import canonical_uuid, page
from frontdoor.receiver import database_unavailable
from operations.automations import tell_runs_of_click
from pressroom import tracing
from pressroom.email_rendering import REDIRECT_PATH
from pressroom.settings import Settings

if TYPE_CHECKING:
    from aiohttp import web

log = logging.getLogger("pressroom.frontdoor.redirects")

ROUTE = REDIRECT_PATH + "{slug}"
GROUP_LIMIT = 500  # clicks in one commit
COMMITS_IN_FLIGHT = 8  # of the pool's 20 connections; the database groups their WAL flushes
MAX_QUEUED = 100_000  # clicks held while the database does not take them; past that, not recorded
RETRY_SECONDS = (0.1, 0.5, 1.0, 2.0, 5.0)  # between tries of a group the database did not take
CACHED_TARGETS = 100_000
CACHED_AGENTS = 10_000
SIGNAL_SECONDS = 10.0  # a click's automation runs told within this, or left to read it at their wait's end
BURST_SECONDS = 2  # "every link followed within a couple of seconds": no reader clicks that fast
# A reader's click settles (its open, the member seen) once a burst's later clicks would have been
# committed: the burst's span, and room for a slow commit.
SETTLE_AFTER_SECONDS = BURST_SECONDS + 3
SETTLE_EVERY_SECONDS = 1.0
_SLUG = re.compile(r"[A-Za-z0-9_-]{1,64}")
_URI_CHARACTERS = ":/?#[]@!$&'()*+,;=%~-._"  # RFC 3986's reserved and unreserved characters, and escapes
# Link checkers of mail security gateways and the programs that fetch links on their own.
_SCANNER_AGENTS = re.compile(
    r"barracuda|mimecast|proofpoint|urldefense|symantec|messagelabs|trend ?micro|sophos|fireeye|forcepoint|"
    r"ironport|cisco|safelinks|bingpreview|linkcheck|link-check|scanner|python-requests|python-httpx|"
    r"aiohttp|curl/|wget/|go-http-client|okhttp|java/|headlesschrome|phantomjs", re.I)

_TARGET = 'SELECT "to", automated_email_id IS NOT NULL AS automation FROM redirects WHERE "from" = $1'

# The group, with its member and the scanner mark known now (`delivery`: within BURST_SECONDS of the
# email's delivery to that member); a click id already stored (a group tried again) stores nothing.
_STORE = f"""
WITH click AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::uuid[], $4::float8[], $5::text[])
           AS t(id, redirect, member_uuid, at, scanner)
), stored AS (
INSERT INTO members_click_events (id, member_id, redirect_id, created_at, scanner)
SELECT click.id, m.id, r.id, to_timestamp(click.at),
       coalesce(click.scanner, CASE WHEN to_timestamp(click.at) < er.delivered_at + interval '{BURST_SECONDS} s'
                                    THEN 'delivery' END)
FROM click JOIN redirects r ON r."from" = click.redirect
LEFT JOIN members m ON m.uuid = click.member_uuid
LEFT JOIN emails e ON e.post_id = r.post_id
LEFT JOIN email_recipients er ON er.email_id = e.id AND er.member_id = m.id
ON CONFLICT (id) DO NOTHING
RETURNING id, member_id, scanner, created_at)
INSERT INTO members_click_events_unsettled (click_id, created_at)
SELECT id, created_at FROM stored WHERE member_id IS NOT NULL AND scanner IS NULL"""

# A member's clicks on several links of one email within BURST_SECONDS of each other (two links
# of a two-link email, three of a longer one) are a scanner's, those already stored too.
_MARK_BURSTS = f"""
WITH touched AS (
    SELECT DISTINCT c.member_id, r.post_id, min(c.created_at) OVER () AS since
    FROM members_click_events c JOIN redirects r ON r.id = c.redirect_id
    WHERE c.id = ANY($1::text[]) AND c.member_id IS NOT NULL
), candidate AS (
    SELECT c.id, c.member_id, c.created_at, t.post_id,
           greatest(2, least(3, (SELECT count(*) FROM redirects WHERE post_id = t.post_id))) AS links_needed
    FROM touched t JOIN members_click_events c ON c.member_id = t.member_id
    JOIN redirects r ON r.id = c.redirect_id AND r.post_id = t.post_id
    WHERE c.scanner IS NULL AND c.created_at >= t.since - interval '{BURST_SECONDS} s'
)
UPDATE members_click_events c SET scanner = 'burst'
FROM candidate k
WHERE c.id = k.id AND (
    SELECT count(DISTINCT o.redirect_id) FROM members_click_events o JOIN redirects r ON r.id = o.redirect_id
    WHERE o.member_id = k.member_id AND r.post_id = k.post_id
      AND o.created_at BETWEEN k.created_at - interval '{BURST_SECONDS} s'
                           AND k.created_at + interval '{BURST_SECONDS} s') >= k.links_needed"""

# The readers' clicks old enough that every click of a burst they may belong to is stored. Several
# front doors may settle at once: each takes rows the others have not locked.
_DUE = f"""
SELECT coalesce(array_agg(click_id), '{{}}') FROM (
    SELECT click_id FROM members_click_events_unsettled
    WHERE created_at < now() - interval '{SETTLE_AFTER_SECONDS} s'
    ORDER BY created_at LIMIT {GROUP_LIMIT * 10} FOR UPDATE SKIP LOCKED) due"""

# The due clicks, their bursts marked first: a reader's click counts as an open when their open was
# not seen (images blocked), recounted by analytics; the member seen, at most once a day.
_SETTLE = """
WITH due AS (
    DELETE FROM members_click_events_unsettled WHERE click_id = ANY($1::text[]) RETURNING click_id
), reader AS (
    SELECT c.member_id, r.post_id, min(c.created_at) AS first, max(c.created_at) AS last
    FROM due JOIN members_click_events c ON c.id = due.click_id JOIN redirects r ON r.id = c.redirect_id
    WHERE c.scanner IS NULL
    GROUP BY 1, 2
), opened AS (
    UPDATE email_recipients er SET opened_at = reader.first
    FROM reader JOIN emails e ON e.post_id = reader.post_id
    WHERE er.email_id = e.id AND er.member_id = reader.member_id AND er.opened_at IS NULL
    RETURNING er.email_id, er.member_id
), dirty_emails AS (
    INSERT INTO email_analytics_dirty_emails SELECT DISTINCT email_id FROM opened ON CONFLICT DO NOTHING
), dirty_members AS (
    INSERT INTO email_analytics_dirty_members SELECT DISTINCT member_id FROM opened ON CONFLICT DO NOTHING
), seen AS (
    UPDATE members m SET last_seen_at = seen.at
    FROM (SELECT member_id, max(last) AS at FROM reader GROUP BY 1) seen
    WHERE m.id = seen.member_id AND (m.last_seen_at IS NULL OR m.last_seen_at < date_trunc('day', seen.at))
)
SELECT count(*) FROM due"""

# What PostgreSQL refuses of one click rather than of the database: that click is dropped, alone.
_CLICK_AT_FAULT = (asyncpg.DataError, asyncpg.IntegrityConstraintViolationError)


class Click(NamedTuple):
    id: str
    redirect: str  # the redirect's path, `redirects.from`
    member_uuid: str | None
    at: float  # epoch seconds
    scanner: str | None  # user-agent | address, known when the request came


class ClickLog:
    """`await record(click)`: True once the click is committed, False when it is still queued after
    `wait_seconds` (the reader is not kept waiting longer; the click commits later)."""

    def __init__(self, pool: asyncpg.Pool, wait_seconds: float) -> None:
        self.pool, self.wait_seconds = pool, wait_seconds
        self.waiting: list[tuple[Click, asyncio.Future]] = []
        self.committing = 0
        self.tasks: set[asyncio.Task] = set()
        self.committed = self.dropped = self.late = 0

    async def record(self, click: Click) -> bool:
        if len(self.waiting) >= MAX_QUEUED:
            self.dropped += 1  # the reader is still redirected; memory stays bounded in a long outage
            return False
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.waiting.append((click, future))
        if self.committing < COMMITS_IN_FLIGHT:
            self.committing += 1
            task = asyncio.create_task(self._commit_waiting())
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        # One timer a click (no timeout scope, no shield): given up on, the click stays queued.
        late = loop.call_later(self.wait_seconds, _give_up, future)
        committed = await future
        late.cancel()
        if not committed:
            self.late += 1
        return committed

    async def _commit_waiting(self) -> None:
        tries = 0
        try:
            while self.waiting:
                group, self.waiting = self.waiting[:GROUP_LIMIT], self.waiting[GROUP_LIMIT:]
                try:
                    await self._commit([click for click, _ in group])
                    tries = 0
                except Exception as error:
                    if not database_unavailable(error):
                        log.exception("clicks not committed; tried again")
                    else:
                        log.warning("clicks not committed (%s); tried again", type(error).__name__)
                    self.waiting[:0] = group  # first in line again, same ids: never stored twice
                    await asyncio.sleep(RETRY_SECONDS[min(tries, len(RETRY_SECONDS) - 1)])
                    tries += 1
                    continue
                for _, future in group:
                    if not future.done():
                        future.set_result(True)
        finally:
            self.committing -= 1

    async def _commit(self, group: Sequence[Click]) -> None:
        try:
            await self._store(group)
        except _CLICK_AT_FAULT:
            if len(group) == 1:
                self.dropped += 1
                log.error("a click was refused by the database and dropped")
                return
            for click in group:
                await self._commit([click])
            return
        self.committed += len(group)

    async def _store(self, group: Sequence[Click]) -> None:
        """One statement and its commit: the reader waits for nothing else (bursts are marked as
        the clicks settle)."""
        await self.pool.execute(_STORE, [c.id for c in group], [c.redirect for c in group],
                                [c.member_uuid for c in group], [c.at for c in group], [c.scanner for c in group])

    async def settle(self) -> int:
        """The readers' clicks old enough to be sure of, settled; how many."""
        settled = 0
        while (done := await self._settle_due()) > 0:
            settled += done
        return settled

    async def _settle_due(self) -> int:
        """One transaction: the due clicks' bursts marked, then the readers' among them settled."""
        async with self.pool.acquire() as conn, conn.transaction():
            due = await conn.fetchval(_DUE)
            if not due:
                return 0
            await conn.execute(_MARK_BURSTS, due)
            return await conn.fetchval(_SETTLE, due)

    async def settle_forever(self) -> None:
        while True:
            try:
                await self.settle()
            except Exception as error:  # noqa: BLE001 (tried again next time; the rows wait in the table)
                log.warning("clicks not settled (%s); tried again", type(error).__name__)
            await asyncio.sleep(SETTLE_EVERY_SECONDS)

    async def drain(self, seconds: float) -> None:
        """At shutdown: the queued clicks committed, for at most `seconds`."""
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=seconds)


def _give_up(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(False)


class Targets:
    """Redirect path → target, read once: a redirect never changes once made."""

    def __init__(self, pool: asyncpg.Pool, size: int = CACHED_TARGETS) -> None:
        self.pool, self.size = pool, size
        self._cache: OrderedDict[str, tuple[str, bool]] = OrderedDict()  # path → target, an automation's

    def cached(self, path: str) -> str | None:
        known = self._cache.get(path)
        if known is None:
            return None
        self._cache.move_to_end(path)
        return known[0]

    def automation(self, path: str) -> bool:
        """Whether a path read before is an automation email's link (its runs may wait on a click)."""
        known = self._cache.get(path)
        return known is not None and known[1]

    async def get(self, path: str) -> str | None:
        target = self.cached(path)
        if target is not None:
            return target
        row = await self.pool.fetchrow(_TARGET, path)
        if row is None:  # unknown paths are not kept: anyone can ask for any number of them
            return None
        self._cache[path] = (row["to"], row["automation"])
        if len(self._cache) > self.size:
            self._cache.popitem(last=False)
        return row["to"]


def location(target: str) -> str:
    """A stored target as a Location header holds it: what a URI may not carry (`"`, `<`, `>`, a
    space, a control character, non-ASCII) percent-encoded; what it may, as written."""
    return quote(target, safe=_URI_CHARACTERS)


class Redirects:
    """The tracked links' route."""

    def __init__(self, pool: asyncpg.Pool, settings: Settings, runtime: Any = None) -> None:

        self.targets = Targets(pool)
        self.wait_seconds = settings.click_commit_wait_seconds
        self.clicks = ClickLog(pool, self.wait_seconds)
        self.networks = [ipaddress.ip_network(n) for n in settings.click_scanner_networks]
        self.proxies = settings.proxy_addresses
        meter = runtime.metric_meter if runtime is not None else MetricMeter.noop
        self.requests = meter.create_counter("pressroom_click_requests", "tracked link requests by outcome")
        self._settling: asyncio.Task | None = None
        # `await temporal()` → a Temporal client (the server's, shared with its pages); None: no signals.
        self.temporal: Callable[[], Awaitable[Any]] | None = None
        self._agents: dict[str, bool] = {}

    def _scanner_agent(self, agent: str) -> bool:
        """The user agents' verdicts kept: readers of one email send a few agents, over and over."""
        known = self._agents.get(agent)
        if known is None:
            if len(self._agents) >= CACHED_AGENTS:  # anyone can send any agent: bounded
                self._agents.clear()
            known = self._agents[agent] = bool(_SCANNER_AGENTS.search(agent))
        return known

    def routes(self) -> list:

        return [web.get(ROUTE, self.follow)]

    def scanner(self, request: web.Request) -> str | None:
        """Why the request is a scanner's, as far as the request itself says."""
        if self._scanner_agent(request.headers.get("User-Agent", "")):
            return "user-agent"
        if self.networks:
            try:
                address = ipaddress.ip_address(client_address(request, self.proxies))
            except ValueError:
                return None
            if any(address in network for network in self.networks):
                return "address"
        return None

    async def follow(self, request: web.Request) -> web.Response:

        slug = request.match_info["slug"]
        with tracing.span(f"{request.method} {ROUTE}", {"http.request.method": request.method,
                                                         "url.path": ROUTE}) as span:
            if not _SLUG.fullmatch(slug):
                return self._unknown(span)
            path = REDIRECT_PATH + slug
            try:
                target = self.targets.cached(path)
                if target is None:
                    async with asyncio.timeout(self.wait_seconds):  # a stalled database answers 503, not never
                        target = await self.targets.get(path)
            except Exception as error:
                if not database_unavailable(error):
                    raise
                self._count("unavailable")
                return page("Try again", "<p>This link cannot be followed right now. Please try again in a "
                                          "few minutes.</p>", status=503)
            if target is None:
                return self._unknown(span)
            if request.method == "GET":
                if self._settling is None:  # from the first click on; it also settles a killed server's
                    self._settling = asyncio.create_task(self.clicks.settle_forever())
                click = Click(secrets.token_hex(12), path, canonical_uuid(request.rel_url.query.get("m")),
                              time.time(), self.scanner(request))
                committed = await self.clicks.record(click)
                self._count("recorded" if committed else "queued")
                if committed and click.member_uuid is not None and self.targets.automation(path):
                    self._signal_later(path, click.member_uuid)
            span.set_attribute("http.response.status_code", 302)
        return web.Response(status=302, headers={"Location": location(target), "Cache-Control": "no-store, private"})

    def _signal_later(self, path: str, member_uuid: str) -> None:
        """The member's runs waiting on this email told, after the 302 (never in its way)."""
        task = asyncio.create_task(self._signal_runs(path, member_uuid))
        self.clicks.tasks.add(task)
        task.add_done_callback(self.clicks.tasks.discard)

    async def _signal_runs(self, path: str, member_uuid: str) -> None:
        """Best effort: a run not told reads the click from the table at its wait's end."""
        if self.temporal is None:
            return
        try:
            async with asyncio.timeout(SIGNAL_SECONDS):
                await tell_runs_of_click(self.targets.pool, self.temporal, path, member_uuid)
        except Exception as error:  # noqa: BLE001 (best effort; the wait's end reads the click)
            log.warning("a click's automation runs not signalled (%s)", type(error).__name__)

    def _unknown(self, span) -> web.Response:
        span.set_attribute("http.response.status_code", 404)
        self._count("unknown")
        return page("Link not found", "<p>This link is not valid. Use the link in the email you received.</p>",
                     status=404)

    def _count(self, outcome: str) -> None:
        self.requests.with_additional_attributes({"outcome": outcome}).add(1)

    async def stop(self) -> None:
        if self._settling is not None:
            self._settling.cancel()
        await self.clicks.drain(5.0)
