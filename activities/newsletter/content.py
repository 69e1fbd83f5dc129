"""The email's content for the send stages: loaded and checked before anything is written, and
rendered and encoded once per segment and sending domain for every batch that shares them."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from email.utils import formataddr, parseaddr

import asyncpg
from temporalio import activity

from activities.email_content import LoadedEmail, load_email, no_sender
from activities.errors import non_retryable
from pressroom.email_rendering import BodyCache, ContentError, Rendered, clip_warning, render, segment_sizes
from pressroom.providers.port import EmailProvider, Message, PreparedMessage, placeholder
from pressroom.settings import Settings


def fallback_sender(from_address: str, fallback_address: str) -> str:
    """The From of a batch sent through the fallback domain: the same name at the fallback address
    (a provider signs for its own domain); replies still reach the sender through Reply-To."""
    name, _ = parseaddr(from_address)
    return formataddr((name, fallback_address)) if name else fallback_address


async def load_for_sending(conn: asyncpg.Connection, email_id: str, settings: Settings) -> LoadedEmail:
    """The email's content and sender; an email that does not exist or cannot be a message is refused."""
    try:
        loaded = await load_email(conn, email_id, settings)
    except ContentError as error:  # a subject or sender that cannot be a header
        raise non_retryable("BadContent", str(error)) from None
    if loaded is None:
        raise non_retryable("EmailNotFound", f"email {email_id} does not exist")
    if not loaded.from_address:  # no default sender outside the development stack
        raise non_retryable("BadContent", no_sender(email_id, loaded.newsletter_slug))
    return loaded


# The redirects a rendering's tracked links name, stored before any batch carries them; a redirect
# already stored is kept. The answer counts ids held by another target (a hash collision), which
# would send readers elsewhere: the send stops instead.
_STORE_REDIRECTS = """
WITH link AS (SELECT * FROM unnest($2::text[], $3::text[]) AS t(id, target)),
stored AS (
    INSERT INTO redirects (id, "from", "to", post_id)
    SELECT link.id, '/r/' || link.id, link.target, (SELECT post_id FROM emails WHERE id = $1) FROM link
    ON CONFLICT DO NOTHING)
SELECT count(*) FROM redirects r JOIN link ON link.id = r.id WHERE r."to" <> link.target"""


async def store_redirects(conn: asyncpg.Connection, email_id: str, links: Mapping[str, str]) -> None:
    """Every redirect of `links` (id → target) stored, once, before a reader can follow it."""
    if not links:
        return
    clashes = await conn.fetchval(_STORE_REDIRECTS, email_id, list(links), list(links.values()))
    if clashes:
        raise non_retryable("RedirectClash", f"email {email_id}: {clashes} redirect ids are another target's")


async def check_content(conn: asyncpg.Connection, email_id: str, settings: Settings) -> None:
    """Render every segment once before anything is written: bad content is refused up front."""
    content = (await load_for_sending(conn, email_id, settings)).content
    try:
        sizes = segment_sizes(content)  # every segment rendered: bad content is refused here
    except ContentError as error:
        raise non_retryable("BadContent", str(error)) from None
    warning = clip_warning(email_id, sizes)
    if warning:  # a warning, not a refusal: the site may mean it, and most clients show it whole
        activity.logger.warning(warning)


class Messages:
    """Each segment's rendering and its message, prepared by the provider per sending scope, kept
    within the body cache's size: rendered once per worker, shared by every batch of the segment."""

    def __init__(self, pool: asyncpg.Pool, settings: Settings) -> None:
        self.pool = pool
        self.settings = settings
        self._bodies = BodyCache(settings.body_cache_bytes)
        self._rendering = asyncio.Lock()  # the batches of a group ask at once: one renders, the others wait for it

    async def get(self, email_id: str, segment: str | None, provider: EmailProvider, *,
                  fallback: bool) -> tuple[Rendered, PreparedMessage]:
        """Through `provider`'s scope; `fallback`: not the account's own domain, so From is the fallback address."""
        key = (email_id, segment, provider.scope)
        cached = self._bodies.get(key)
        if cached is None:
            async with self._rendering:
                cached = self._bodies.get(key)
                if cached is None:
                    cached = await self._prepare(email_id, segment, provider, fallback=fallback)
                    self._bodies.put(key, cached, cached[0].size + cached[1].size)
        return cached

    async def _prepare(self, email_id: str, segment: str | None, provider: EmailProvider, *,
                       fallback: bool) -> tuple[Rendered, PreparedMessage]:
        async with self.pool.acquire() as conn:
            loaded = await load_for_sending(conn, email_id, self.settings)
        try:
            body = render(loaded.content, segment)
        except ContentError as error:
            raise non_retryable("BadContent", str(error)) from None
        if body.links:
            async with self.pool.acquire() as conn:
                await store_redirects(conn, email_id, body.links)
        from_address = loaded.from_address
        if fallback:
            from_address = fallback_sender(from_address, self.settings.fallback_address)
        tags = ["bulk-email", *([self.settings.email_tag] if self.settings.email_tag else [])]
        headers = {"Reply-To": loaded.reply_to, "List-Unsubscribe": f"<{placeholder('unsubscribe_url')}>",
                   "List-Unsubscribe-Post": "List-Unsubscribe=One-Click"}
        prepared = provider.prepare(Message(from_address=from_address, subject=body.subject, html=body.html,
                                            text=body.text, tags=tags, headers=headers,
                                            tracking_opens=loaded.track_opens, tracking_clicks=False))
        return body, prepared
