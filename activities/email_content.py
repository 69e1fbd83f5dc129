"""Reading an email's content and a member's values from PostgreSQL, for the pure renderer.

The send activity, the preview and the test send read through here, so all three render the same
source: the email's own HTML snapshot when it has one, else its post's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import urlsplit

import asyncpg

from pressroom.email_rendering import EmailContent, header_text, mailbox, member_values, ref_value
from pressroom.email_template import DESIGN_COLUMNS, EmailTemplate
from pressroom.settings import Settings
from pressroom.store.posts import AUTHOR_NAMES_JSON


@dataclass(frozen=True)
class LoadedEmail:
    content: EmailContent
    from_address: str  # "": neither the newsletter nor PRESSROOM_FROM_ADDRESS names one (a send is refused)
    reply_to: str
    track_opens: bool
    newsletter_uuid: str | None  # None: the email has no newsletter, its link leaves every one
    newsletter_slug: str | None = None


async def load_email(conn: asyncpg.Connection, email_id: str, settings: Settings) -> LoadedEmail | None:
    """The email's content and sender, or None when there is no such email; a ContentError when its
    subject or sender cannot be a header (checked here, where they enter, for every path)."""
    row = await conn.fetchrow(
        """SELECT e.subject, coalesce(nullif(e.html, ''), nullif(p.email_html, ''), p.html) AS html, p.visibility,
                  p.slug, e.track_opens,
                  coalesce(e.track_clicks, n.track_clicks, $2) AS track_clicks,
                  n.name, n.slug AS newsletter_slug, n.uuid::text AS newsletter_uuid, n.sender_name, n.sender_email,
                  n.sender_reply_to,
                  p.title, p.status AS post_status, to_jsonb(p) AS post, to_jsonb(n) AS newsletter,
                  """ + AUTHOR_NAMES_JSON + """ AS authors
           FROM emails e JOIN posts p ON p.id = e.post_id LEFT JOIN newsletters n ON n.id = e.newsletter_id
           WHERE e.id = $1""", email_id, settings.email_track_clicks)
    if row is None:
        return None
    site = settings.site_url.rstrip("/")
    sender = mailbox(None, row["sender_email"], "sender", email_id) if row["sender_email"] else settings.from_address
    from_address = mailbox(row["sender_name"] or row["name"], sender, "sender", email_id) \
        if row["sender_email"] else sender
    reply_to = sender if row["sender_reply_to"] in (None, "newsletter", "support") \
        else mailbox(None, row["sender_reply_to"], "reply-to", email_id)
    content = EmailContent(email_id=email_id, subject=header_text(row["subject"], "subject", email_id),
                           html=row["html"] or "",
                           visibility=row["visibility"], post_url=f"{site}/{row['slug']}/",
                           upgrade_url=f"{site}/#/portal/account/plans", track_clicks=row["track_clicks"],
                           site_url=site, link_ref=ref_value(row["name"] or "") if settings.outbound_link_tagging
                           else None, template=_template(row, site))
    return LoadedEmail(content=content, from_address=from_address, reply_to=reply_to,
                       track_opens=row["track_opens"], newsletter_uuid=row["newsletter_uuid"],
                       newsletter_slug=row["newsletter_slug"])


def no_sender(email_id: str, newsletter: str | None) -> str:
    """Why an email has no sender: neither its newsletter's nor the site-wide setting (no default)."""
    whose = f"newsletter {newsletter} has no sender" if newsletter else "it has no newsletter"
    fix = f"`pressroom newsletters edit {newsletter} --sender-email ADDRESS` or " if newsletter else ""
    return (f"email {email_id} has no sender: {whose} and PRESSROOM_FROM_ADDRESS is not set; set {fix}"
            "PRESSROOM_FROM_ADDRESS")


def _template(row: asyncpg.Record, site: str) -> EmailTemplate:
    """The template's parts from the post's and newsletter's rows as they stand: a field the post
    does not have (a feature image, authors) is absent, not an error."""
    post = json.loads(row["post"])
    newsletter = json.loads(row["newsletter"]) if row["newsletter"] else {}
    return EmailTemplate(
        site_title=urlsplit(site).hostname or site, post_title=row["title"], site_url=site,
        # An email-only post (status sent) has no page of its own to view.
        post_url=f"{site}/{row['slug']}/" if row["post_status"] != "sent" else "",
        excerpt=_text(post.get("custom_excerpt")), byline=_byline(row["authors"]),
        feature_image=_text(post.get("feature_image")), feature_image_alt=_text(post.get("feature_image_alt")),
        feature_image_caption=_text(post.get("feature_image_caption")), newsletter_name=row["name"] or "",
        design={k: newsletter[k] for k in DESIGN_COLUMNS if k in newsletter})


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _byline(authors: object) -> str | None:
    if isinstance(authors, str):  # a JSON text column
        try:
            authors = json.loads(authors)
        except ValueError:
            return None
    if not isinstance(authors, list):
        return None
    names = [n for n in (a.get("name") if isinstance(a, dict) else a for a in authors)
             if isinstance(n, str) and n.strip()]
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else (names[0] if names else None)


async def load_member_values(conn: asyncpg.Connection, member_id: str, loaded: LoadedEmail,
                             settings: Settings) -> tuple[dict, str] | None:
    """(replacement values, status) of a member, or None when there is no such member."""
    row = await conn.fetchrow("SELECT email, name, uuid, status FROM members WHERE id = $1", member_id)
    if row is None:
        return None
    return member_values(name=row["name"], email=row["email"], uuid=str(row["uuid"]), status=row["status"],
                         site_url=settings.site_url, link_secret=settings.require_members_link_secret(),
                         newsletter_uuid=loaded.newsletter_uuid, email_id=loaded.content.email_id), row["status"]
