"""The email's content for the send stages: loaded and checked before anything is written, and
rendered and encoded once per segment and sending domain for every batch that shares them."""

from __future__ import annotations

from email.utils import formataddr, parseaddr

from activities.email_content import LoadedEmail, load_email
from activities.errors import non_retryable
from pressroom.email_rendering import BodyCache, ContentError, Rendered, render, segments_of
from pressroom.providers.port import EmailProvider, Message, PreparedMessage, placeholder
from pressroom.settings import Settings


def fallback_sender(from_address: str, fallback_address: str) -> str:
    """The From of a batch sent through the fallback domain: the same name at the fallback address
    (a provider signs for its own domain); replies still reach the sender through Reply-To."""
    name, _ = parseaddr(from_address)
    return formataddr((name, fallback_address)) if name else fallback_address


async def load_for_sending(conn, email_id: str, settings: Settings) -> LoadedEmail:
    """The email's content and sender; an email that does not exist or cannot be a message is refused."""
    try:
        loaded = await load_email(conn, email_id, settings)
    except ContentError as error:  # a subject or sender that cannot be a header
        raise non_retryable("BadContent", str(error)) from None
    if loaded is None:
        raise non_retryable("EmailNotFound", f"email {email_id} does not exist")
    return loaded


async def check_content(conn, email_id: str, settings: Settings) -> None:
    """Render every segment once before anything is written: bad content is refused up front."""
    content = (await load_for_sending(conn, email_id, settings)).content
    try:
        for segment in segments_of(content):
            render(content, segment)
    except ContentError as error:
        raise non_retryable("BadContent", str(error)) from None


class Messages:
    """Each segment's rendering and its message, prepared by the provider per sending scope, kept
    within the body cache's size: rendered once per worker, shared by every batch of the segment."""

    def __init__(self, pool, settings: Settings) -> None:
        self.pool = pool
        self.settings = settings
        self._bodies = BodyCache(settings.body_cache_bytes)

    async def get(self, email_id: str, segment: str | None, provider: EmailProvider, *,
                  fallback: bool) -> tuple[Rendered, PreparedMessage]:
        """Through `provider`'s scope; `fallback`: not the account's own domain, so From is the fallback address."""
        cached = self._bodies.get((email_id, segment, provider.scope))
        if cached is None:
            async with self.pool.acquire() as conn:
                loaded = await load_for_sending(conn, email_id, self.settings)
            try:
                body = render(loaded.content, segment)
            except ContentError as error:
                raise non_retryable("BadContent", str(error)) from None
            from_address = loaded.from_address
            if fallback:
                from_address = fallback_sender(from_address, self.settings.fallback_address)
            tags = ["bulk-email", *([self.settings.email_tag] if self.settings.email_tag else [])]
            headers = {"Reply-To": loaded.reply_to, "List-Unsubscribe": f"<{placeholder('unsubscribe_url')}>",
                       "List-Unsubscribe-Post": "List-Unsubscribe=One-Click"}
            prepared = provider.prepare(Message(from_address=from_address, subject=body.subject, html=body.html,
                                                text=body.text, tags=tags, headers=headers,
                                                tracking_opens=loaded.track_opens))
            cached = (body, prepared)
            self._bodies.put((email_id, segment, provider.scope), cached, body.size + prepared.size)
        return cached
