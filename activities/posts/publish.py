"""Scheduled posts: publish a post exactly at its time, and keep workflows and rows in step.

The timer fires a lead time early (see workflows/posts.py) and `publish_post` waits out the rest
with a local sleep, so Temporal's work is done before the deadline; the posts due at the same
instant are then published together by one statement, so they do not queue behind each other. The
update is guarded: it publishes only a post that is still scheduled for exactly that time.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta

import asyncpg
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import heartbeating
from activities.metrics import Instruments
from activities.outbox import site_events
from activities.posts.models import PublishPostActivityInput, PublishResult, ReconcileResult
from activities.posts.schedule import reconcile_scheduled_posts
from pressroom.dependencies import Dependencies

# The worker's clock and Temporal's agree to milliseconds in practice (NTP); this bounds the local
# wait should they not, so a timer never turns into an unbounded sleep.
MAX_CLOCK_SKEW_SECONDS = 1.0


# The post's email that no attempt has sent (pending, or failed: an early send refused because the
# post was not published yet, or one stopped when it was unpublished); publication hands it over.
UNSENT_EMAIL = """(SELECT e.id FROM emails e WHERE e.post_id = p.id AND p.newsletter_id IS NOT NULL
                    AND e.status IN ('pending', 'failed'))"""

# Why a published post's newsletter will not go out, in words; NULL when it goes, went, or the post is
# not published yet. Needs `p` (posts) and `e` (its email, left-joined).
NEWSLETTER_NOT_GOING = """CASE
    WHEN p.newsletter_id IS NULL OR p.status NOT IN ('published', 'sent') THEN NULL
    WHEN e.id IS NULL THEN 'its post is published but has no email to send'
    WHEN e.status = 'failed' THEN 'its post is published but email ' || e.id || ' failed: '
                                  || coalesce(e.error, 'no reason recorded')
    WHEN e.status = 'pending' AND p.publish_completed_at < now() - interval '2 minutes'
        THEN 'its post was published at ' || to_char(p.publish_completed_at AT TIME ZONE 'UTC',
                                                     'YYYY-MM-DD HH24:MI:SS "UTC"')
             || ' and email ' || e.id || ' is still pending: is a worker running? '
             || '`pressroom newsletter send ' || e.id || '` sends it'
    END"""


def heartbeat_interval() -> float:
    """How often a waiting publish heartbeats: a quarter of its heartbeat timeout (the SDK sends at
    most one heartbeat per 80% of it anyway), so a thousand waiting posts do not wake the worker
    more often than the server needs to hear from them."""
    timeout = activity.info().heartbeat_timeout if activity.in_activity() else None
    return min(max(timeout.total_seconds() / 4, 0.25), 2.5) if timeout else 2.0


class DueTogether:
    """Publishes the posts that fall due at the same instant with one statement, at that instant.

    Every publish activity of this worker waiting for the same time joins one UPDATE, run by one
    task that wakes at the deadline: a thousand posts due together take one round trip, and the
    thousand activities wake only after it, not before. Each post keeps its own guard (still
    scheduled, for exactly that time); each activity gets its own row back, or None when its post
    changed while it waited.
    """

    def __init__(self, pool: asyncpg.Pool, site_url: str = "") -> None:
        self.pool = pool
        self.site_url = site_url
        self._waiting: dict[datetime, dict[str, asyncio.Future]] = {}
        self._statements: set[asyncio.Task] = set()

    async def publish(self, post_id: str, publish_at: datetime, deadline: float | None = None) -> asyncpg.Record | None:
        """The post's published row (publish_completed_at, email_id), or None if it is not due any more.

        `deadline` (epoch seconds on this worker's clock) is when the statement runs; by default now.
        """
        waiting = self._waiting.get(publish_at)
        if waiting is None:
            waiting = self._waiting[publish_at] = {}
            statement = asyncio.create_task(self._publish(publish_at, time.time() if deadline is None else deadline))
            self._statements.add(statement)
            statement.add_done_callback(self._statements.discard)
        future = waiting.get(post_id)  # the same post twice (a retry racing its first attempt) shares the row
        if future is None:
            future = waiting[post_id] = asyncio.get_running_loop().create_future()
        try:
            while not (await asyncio.wait({future}, timeout=heartbeat_interval()))[0]:
                if activity.in_activity():
                    activity.heartbeat()
        except asyncio.CancelledError:
            if self._waiting.get(publish_at) is waiting and waiting.pop(post_id, None) is future:
                future.cancel()  # not published yet: an activity that gave up publishes nothing
            raise
        return future.result()

    async def _publish(self, publish_at: datetime, deadline: float) -> None:
        while (left := deadline - time.time()) > 0:  # noqa: ASYNC110 (a deadline on the clock, not an event)
            await asyncio.sleep(min(left - 0.005, 2.0) if left > 0.02 else left)  # the last stretch in short steps
        waiting = self._waiting.pop(publish_at)
        if not waiting:
            return
        try:
            async with self.pool.acquire() as conn, conn.transaction():  # the posts and their site events
                rows = await conn.fetch(
                    f"""WITH published AS (
                           UPDATE posts p SET status = 'published', publish_completed_at = clock_timestamp(),
                                              updated_at = now()
                           FROM unnest($1::text[]) AS due(id)
                           WHERE p.id = due.id AND p.status = 'scheduled' AND p.published_at = $2
                           RETURNING p.id, p.newsletter_id, p.publish_completed_at, p.published_from)
                       SELECT p.id, p.publish_completed_at, p.published_from, {UNSENT_EMAIL} AS email_id
                       FROM published p""", list(waiting), publish_at)
                # What it was before: scheduled, or what it was when published at once (a draft).
                await site_events.emit(conn, "post.published", [row["id"] for row in rows],
                                       {row["id"]: {"status": row["published_from"] or "scheduled"} for row in rows},
                                       site_url=self.site_url)
        except BaseException as error:
            for future in waiting.values():
                if not future.done():
                    future.set_exception(error)
            if not isinstance(error, Exception):
                raise
            return
        found = {row["id"]: row for row in rows}
        for post_id, future in waiting.items():
            if not future.done():
                future.set_result(found.get(post_id))


class PostsActivities:
    def __init__(self, deps: Dependencies) -> None:
        self.pool = deps.pool
        self.temporal = deps.temporal
        self.settings = deps.settings
        self._due_together = DueTogether(deps.pool, deps.settings.site_url)
        self.metrics = Instruments()

    @activity.defn
    async def publish_post(self, input: PublishPostActivityInput) -> PublishResult:
        """scheduled → published at the time, only if the post is still scheduled for that time.

        Safe to repeat: a post is never published twice, and an attempt that finds it already
        published for this time (an earlier attempt's worker died before reporting) answers
        "published" so the newsletter still follows.
        """
        if input.retry_seconds is None:
            return await self._publish_post(input)
        try:
            return await self._publish_post(input)
        except (asyncio.CancelledError, ApplicationError):
            raise
        except Exception as error:  # noqa: BLE001 (any failure becomes the retry the policy describes)
            raise ApplicationError(f"{type(error).__name__}: {error}", type=type(error).__name__,
                                   next_retry_delay=timedelta(seconds=input.retry_seconds)) from None

    async def _publish_post(self, input: PublishPostActivityInput) -> PublishResult:
        post = await self.pool.fetchrow("SELECT status, published_at FROM posts WHERE id = $1", input.post_id)
        if (not_due := await self._not_due(input, post)) is not None:
            return not_due

        remaining = input.publish_at.timestamp() - time.time()
        if remaining > input.lead_seconds + MAX_CLOCK_SKEW_SECONDS:
            activity.logger.warning("the timer fired %.1f s before post %s is due; the worker's clock may be "
                                    "behind Temporal's", remaining, input.post_id)
            remaining = input.lead_seconds + MAX_CLOCK_SKEW_SECONDS
        published = await self._due_together.publish(input.post_id, input.publish_at, time.time() + remaining)
        if published is None:  # changed while we waited: look again from the top
            return await self._changed(input)
        email_id = published["email_id"]
        lateness = (published["publish_completed_at"] - input.publish_at).total_seconds() * 1000
        self.metrics.histogram_float(
            "pressroom_publish_lateness", "How late posts were published", "ms").record(max(lateness, 0.0))
        activity.logger.info("published post %s %.0f ms after its time", input.post_id, lateness)
        return PublishResult(status="published", email_id=email_id, lateness_ms=lateness,
                             newsletter_note=None if email_id else await self._newsletter_note(input.post_id))

    async def _newsletter_note(self, post_id: str) -> str | None:
        """Why the just-published post's newsletter will not go out (logged), or None."""
        note = await self.pool.fetchval(
            f"SELECT {NEWSLETTER_NOT_GOING} FROM posts p LEFT JOIN emails e ON e.post_id = p.id WHERE p.id = $1",
            post_id)
        if note:
            activity.logger.warning("post %s: its newsletter will not go out: %s", post_id, note)
        return note

    async def _already_published(self, input: PublishPostActivityInput) -> PublishResult:
        row = await self.pool.fetchrow(
            f"SELECT p.publish_completed_at, {UNSENT_EMAIL} AS email_id FROM posts p WHERE p.id = $1", input.post_id)
        lateness = (row["publish_completed_at"] - input.publish_at).total_seconds() * 1000 \
            if row["publish_completed_at"] else None
        return PublishResult(status="published", email_id=row["email_id"], lateness_ms=lateness,
                             newsletter_note=None if row["email_id"] else await self._newsletter_note(input.post_id))

    async def _changed(self, input: PublishPostActivityInput) -> PublishResult:
        post = await self.pool.fetchrow("SELECT status, published_at FROM posts WHERE id = $1", input.post_id)
        return await self._not_due(input, post) or PublishResult(status="moved", publish_at=post["published_at"])

    async def _not_due(self, input: PublishPostActivityInput, post: asyncpg.Record | None) -> PublishResult | None:
        """What to report when the post is not (or no longer) scheduled for this run's time; None when it is."""
        if post is None:
            return PublishResult(status="not_found")
        if post["status"] == "published" and post["published_at"] == input.publish_at:
            return await self._already_published(input)
        if post["status"] != "scheduled":
            return PublishResult(status="not_scheduled")
        if post["published_at"] != input.publish_at:
            return PublishResult(status="moved", publish_at=post["published_at"])
        return None

    @activity.defn
    async def reconcile_posts(self) -> ReconcileResult:
        """Every scheduled post has its workflow at its time; no workflow waits for a post that is not.

        Safe to repeat: starting or moving a workflow to the time it already has changes nothing.
        """
        async with heartbeating():
            result = await reconcile_scheduled_posts(self.temporal, self.pool, self.settings)
        activity.logger.info("reconciled posts: %d started or moved, %d stopped", result.started_or_moved,
                             result.stopped)
        return result
