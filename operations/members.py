"""Members: adding one commits the member and its welcome email's outbox entry together."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote, quote_plus

from activities.outbox import WELCOME_EMAIL_SLUGS, site_events
from operations.answers import MemberProfile
from operations.automations import member_runs
from operations.clicks import member_clicks
from pressroom import database, tracing
from pressroom.errors import BadInput, NotFound, PressroomError
from pressroom.inputs import MAX_LABELS, email_address, entity_id, free_text, slug
from pressroom.providers.port import ProviderError
from pressroom.providers.wiring import provider_from_settings
from pressroom.settings import Settings, get_settings
from pressroom.store.labels import give_labels, label_pairs, take_labels
from pressroom.store.members import leave
from pressroom.store.outbox import enqueue, enqueue_for_new_ids
from pressroom.store.tiers import DEFAULT_TIER

if TYPE_CHECKING:
    import asyncpg


@dataclass(frozen=True)
class MemberAdded:
    member_id: str
    welcome_key: str | None  # the outbox entry of the welcome email, when one was asked for
    event_key: str = ""  # the member's MemberCreatedEvent entry (written whether a welcome was asked or not)


_ADD_TIERS = """
INSERT INTO members_products (member_id, product_id) SELECT $1, p.id FROM products p WHERE p.slug = ANY($2::text[])
ON CONFLICT DO NOTHING"""


async def give_labels_and_tiers(conn, member_id: str, labels: tuple[tuple[str, str], ...], tiers: list[str]) -> None:
    """Label the member (labels, (name, slug) each, found or made by pressroom/store/labels.py) and
    put them in tiers, in the caller's transaction; a tier that does not exist is refused by name
    (tiers are the site's, never made here)."""
    if tiers:
        found = {r["slug"] for r in await conn.fetch("SELECT slug FROM products WHERE slug = ANY($1::text[])", tiers)}
        absent = [t for t in tiers if t not in found]
        if absent:
            raise BadInput(f"no tier {', '.join(absent)} (the site's tiers are its products)")
        await conn.execute(_ADD_TIERS, member_id, tiers)
    await give_labels(conn, member_id, labels)


@dataclass(frozen=True)
class Membership:
    status: str | None  # None: not said (a new member is free, one that exists keeps theirs)
    default_tier: bool  # comped without a tier named: given the site's default tier


def membership(*, status: str | None, comped: bool | None, tiers: bool, stripe: bool = False,
               current: str | None = None) -> Membership:
    """A member's status from what a way in says, the one rule of the Admin API and the import
    (docs/members.md, "Status and tiers"). The complimentary flag first, as a client sets it on a
    member it read (the status beside it as read): true is comped, but for a Stripe customer, whose
    status is Stripe's; false makes a comped member (said, or `current`) free. Then a status said
    is kept; else a tier named is a paid member's (how `members export` writes paid members)."""
    if status is not None and status not in WELCOME_EMAIL_SLUGS:
        raise BadInput(f"status {status!r} is not one of {', '.join(WELCOME_EMAIL_SLUGS)}")
    if comped is True and not stripe:
        return Membership("comped", not tiers)
    if comped is False and (status or current) == "comped":
        if tiers:
            raise BadInput("a comped member with a tier cannot be made free: Pressroom would keep their tier")
        return Membership("free", False)
    if status is None and tiers:
        status = "paid"
    if status == "free" and tiers:
        raise BadInput("a free member cannot be given a tier")
    return Membership(status, status == "comped" and not tiers)


def _slugs(values, what: str) -> list[str]:
    slugs = list(dict.fromkeys(slug(v, what) for v in values or ()))
    if len(slugs) > MAX_LABELS:
        raise BadInput(f"{len(slugs):,} {what}s given; a member has at most {MAX_LABELS}")
    return slugs


@tracing.traced("pressroom members add")
async def add_member(email: str, name: str | None = None, *, status: str = "free", labels=(), tiers=(),
                     note: str | None = None, newsletters: list[str] | None = None, welcome: bool = False,
                     settings: Settings | None = None) -> MemberAdded:
    """The member, its labels and tiers and its MemberCreatedEvent in one transaction: all commit, or none.
    `newsletters` (ids or slugs) subscribes them to those; None, to every newsletter that subscribes
    new members on signup. No welcome email unless `welcome` (the reference's `send_email`): the
    event carries the decision, for its handler to read."""

    if status not in WELCOME_EMAIL_SLUGS:
        raise BadInput(f"member status {status!r} is not one of {', '.join(WELCOME_EMAIL_SLUGS)}")
    email, name, note = email_address(email), free_text(name, "name"), free_text(note, "note", 2000)
    labels, tiers = label_pairs(labels), _slugs(tiers, "tier")
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn, conn.transaction():
        # Not the unique constraint's error: PostgreSQL would write the address in its own log.
        member_id = await conn.fetchval(
            "INSERT INTO members (email, name, status, note) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING "
            "RETURNING id", email, name, status, note)
        if member_id is None:
            raise BadInput("a member with that address already exists (change them with `pressroom members update "
                           "ID|ADDRESS`)")
        tracing.annotate(member_id=member_id)
        await restore_suppressions(conn, [email], settings)
        await give_labels_and_tiers(conn, member_id, labels, tiers)
        if membership(status=status, comped=None, tiers=bool(tiers)).default_tier:
            await conn.execute("INSERT INTO members_products (member_id, product_id) SELECT $1, id FROM "
                               f"({DEFAULT_TIER}) d", member_id)
        if newsletters is None:
            await conn.execute("INSERT INTO members_newsletters (member_id, newsletter_id) "
                               "SELECT $1, id FROM newsletters WHERE subscribe_on_signup AND status = 'active'",
                               member_id)
        elif newsletters:
            chosen = await _newsletter_ids(conn, list(newsletters), "newsletter")
            await conn.execute("INSERT INTO members_newsletters (member_id, newsletter_id) "
                               "SELECT DISTINCT $1, unnest($2::text[])", member_id, list(chosen.values()))
        # A member is welcomed, with the automated email for their status, only when asked and the
        # setting is on (the handler reads it again when it sends); never an address a bounce or a
        # complaint suppressed (a deleted member's, come back).
        suppressed = await conn.fetchval("SELECT 1 FROM suppressions WHERE email = $1", email)
        welcomed = welcome and settings.welcome_emails and not suppressed
        key = await enqueue(conn, MEMBER_CREATED, *member_created(member_id, welcome=welcomed))
        await site_events.emit(conn, "member.added", member_id)
    return MemberAdded(member_id, key if welcomed else None, key)


MEMBER_CREATED, _CREATED_FIELD, _CREATED_KEY = "MemberCreatedEvent", "member_id", "member-created-"


def member_created(member_id: str, *, welcome: bool) -> tuple[dict, str]:
    """A new member's MemberCreatedEvent, (payload, idempotency key), as `members add` and `members
    import --welcome` enqueue it: the same member is welcomed once, whichever added them; `welcome`
    says whether their welcome email was asked for."""
    return {_CREATED_FIELD: member_id, "welcome": welcome}, _CREATED_KEY + member_id


async def welcome_added_members(conn, member_ids: list[str]) -> int:
    """member_created's entries (welcome asked) for members added in this transaction (`members
    import --welcome`), thousands in one statement; returns how many were queued."""
    return await enqueue_for_new_ids(conn, MEMBER_CREATED, _CREATED_FIELD, _CREATED_KEY, member_ids,
                                     {"welcome": True})


# A member's last emails and what became of each: sent (its batch), delivered, opened, failed (the
# failure that stands), complained. Newest first, by the email's creation.
_MEMBER_EMAILS = """
SELECT e.id AS email_id, e.subject, e.status AS email_status, b.status AS batch_status, e.created_at,
       b.updated_at AS sent_at, er.delivered_at, er.opened_at, er.failed_at, f.severity AS failure,
       f.code AS failure_code, f.enhanced_code AS failure_enhanced_code, f.message AS failure_message,
       c.created_at AS complained_at
FROM email_recipients er
JOIN emails e ON e.id = er.email_id
JOIN email_batches b ON b.id = er.batch_id
LEFT JOIN email_recipient_failures f ON f.email_recipient_id = er.id
LEFT JOIN email_spam_complaint_events c ON c.email_id = er.email_id AND c.member_id = er.member_id
WHERE er.member_id = $1
ORDER BY e.created_at DESC, e.id DESC LIMIT $2"""

# With, for a newsletter they left, when, how (link, provider, operator) and through which email.
_MEMBER_SUBSCRIPTIONS = """
SELECT n.id AS newsletter_id, n.slug, n.name, n.status, mn.id IS NOT NULL AS subscribed,
       l.created_at AS left_at, l.source AS left_by, l.email_id AS left_through_email
FROM newsletters n LEFT JOIN members_newsletters mn ON mn.newsletter_id = n.id AND mn.member_id = $1
LEFT JOIN LATERAL (SELECT e.created_at, e.source, e.email_id FROM members_subscribe_events e
                   WHERE e.member_id = $1 AND e.newsletter_id = n.id AND NOT e.subscribed
                   ORDER BY e.created_at DESC LIMIT 1) l ON mn.id IS NULL
ORDER BY n.created_at, n.id"""

_MEMBER_OUTBOX = """
SELECT o.id AS outbox_id, o.event_type, o.status, o.attempts, o.last_error_code, o.created_at, o.processed_at
FROM outbox o WHERE o.payload->>'member_id' = $1
ORDER BY o.created_at DESC, o.id DESC LIMIT 20"""

_MEMBER_AUTOMATED = """
SELECT a.slug, r.send_outcome, r.created_at
FROM automated_email_recipients r JOIN automated_emails a ON a.id = r.automated_email_id
WHERE r.member_id = $1 ORDER BY r.created_at DESC"""


_MEMBER_LABELS = """
SELECT l.slug FROM members_labels ml JOIN labels l ON l.id = ml.label_id WHERE ml.member_id = $1 ORDER BY l.slug"""
_MEMBER_TIERS = """
SELECT p.slug, p.name, mp.expiry_at, mp.expiry_at IS NOT NULL AND mp.expiry_at <= now() AS expired
FROM members_products mp JOIN products p ON p.id = mp.product_id WHERE mp.member_id = $1 ORDER BY p.slug"""


def address_as_stored(address: str) -> str:
    """An address given to find a member, in the form members are stored in (a punycode domain in
    Unicode, as `members add` and the import store it); as given when it is no valid address."""
    try:
        return email_address(address)
    except BadInput:
        return address.strip()


def email_outcome(row) -> str:
    """What became of one email for one member, in a word or two."""
    if row["complained_at"]:
        return "complained"
    if row["failure"]:
        return f"failed ({row['failure']})"
    if row["opened_at"]:
        return "opened"
    if row["delivered_at"]:
        return "delivered"
    if row["batch_status"] == "submitted":
        return "sent"
    return {"failed": "batch failed", "retired": "batch retired"}.get(row["batch_status"], "not sent yet")


async def member_profile(member: str, *, emails: int = 10, settings: Settings | None = None) -> MemberProfile:
    """A member by id or address: status, note, subscriptions, suppression (and why), the outbox
    entries about them, and their last `emails` emails with what became of each (0: none read)."""
    by_address = "@" in member
    if not by_address:
        entity_id(member, "member")
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        row = await conn.fetchrow(
            "SELECT m.id AS member_id, m.email, m.name, m.note, m.status, m.email_disabled, m.email_count, "
            "m.email_opened_count, m.email_open_rate, m.last_seen_at, m.created_at FROM members m "
            + ("WHERE lower(m.email) = lower($1)" if by_address else "WHERE m.id = $1"),
            address_as_stored(member) if by_address else member.strip())
        if row is None:
            raise NotFound("no member has that address" if by_address else f"member {member} does not exist")
        member_id = row["member_id"]
        suppression = await conn.fetchrow(
            "SELECT reason, email_id, created_at FROM suppressions WHERE email = $1", row["email"])
        subscriptions = await conn.fetch(_MEMBER_SUBSCRIPTIONS, member_id)
        outbox = await conn.fetch(_MEMBER_OUTBOX, member_id)
        automated = await conn.fetch(_MEMBER_AUTOMATED, member_id)
        last = await conn.fetch(_MEMBER_EMAILS, member_id, emails) if emails else []
        labels = await conn.fetch(_MEMBER_LABELS, member_id)
        tiers = await conn.fetch(_MEMBER_TIERS, member_id)
        clicks = await member_clicks(conn, member_id)
        runs = await member_runs(conn, member_id)
    return MemberProfile.model_validate({
            "automation_runs": [r.model_dump() for r in runs],
            **dict(row),
            "labels": [r["slug"] for r in labels],
            "tiers": [dict(t) for t in tiers],
            "suppression": dict(suppression) if suppression else None,
            "subscriptions": [dict(s) for s in subscriptions],
            "outbox": [dict(o) for o in outbox],
            "automated_emails": [dict(a) for a in automated],
            "emails": [{**{k: v for k, v in dict(e).items() if k != "batch_status"}, "outcome": email_outcome(e)}
                       for e in last],
            "clicks": [c.model_dump() for c in clicks]})


@dataclass(frozen=True)
class Resubscribed:
    member_id: str
    removed: dict[str, list[str]]  # per sending domain, the Mailgun lists the address was taken off
    suppression: str | None  # the reason of Pressroom's own suppression that was lifted, if any


@tracing.traced("pressroom members resubscribe")
async def resubscribe_member(member: str, *, settings: Settings | None = None) -> Resubscribed:
    """Mail a member again who bounced, unsubscribed or complained and whom the site has subscribed again.

    The provider first: the address is taken off each sending domain's suppression lists (Mailgun's
    bounces, unsubscribes and complaints; otherwise it keeps dropping their mail); then Pressroom's
    own suppression is lifted and the address enabled, in one transaction, with the time: an event
    from before it, read again later, no longer unsubscribes or suppresses them. A refusal from the
    provider writes nothing.
    Safe to repeat. Which newsletters they receive stays the site's to say (members_newsletters).
    """
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        row = await _member_row(conn, member)  # by id or address, as `members show`
    member_id, address = row["id"], row["email"]
    provider = provider_from_settings(settings)
    scopes = [provider.scope, *([settings.fallback_domain] if settings.fallback_domain else [])]
    try:
        removed = {scope: await provider.for_scope(scope).remove_suppressions(address) for scope in scopes}
    except ProviderError as error:
        raise PressroomError(f"member {member_id} was not resubscribed: {error}") from None
    finally:
        await provider.aclose()
    async with database.connection(settings.require_database()) as conn, conn.transaction():
        lifted = await conn.fetchval("DELETE FROM suppressions WHERE email = $1 RETURNING reason", address)
        await conn.execute("UPDATE members SET email_disabled = false, resubscribed_at = now(), updated_at = now() "
                           "WHERE id = $1", member_id)
    return Resubscribed(member_id, removed, lifted)


@dataclass(frozen=True)
class Unsubscribed:
    member_id: str
    newsletter_id: str | None  # None: every newsletter
    removed: int  # subscriptions removed now (0: they had already left)


@tracing.traced("pressroom members unsubscribe")
async def unsubscribe_member(member: str, newsletter: str | None = None, *,
                             settings: Settings | None = None) -> Unsubscribed:
    """Unsubscribe a member (by id or address) from a newsletter (by id or slug), or from every one:
    the path a member's link and a provider's unsubscribe event take, recorded as the operator's.
    Safe to repeat."""
    if newsletter is not None:
        entity_id(newsletter, "newsletter")
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn, conn.transaction():
        member_id = (await _member_row(conn, member))["id"]
        tracing.annotate(member_id=member_id)
        newsletter_id = None
        if newsletter is not None:
            newsletter_id = await conn.fetchval("SELECT id FROM newsletters WHERE id = $1 OR slug = $1 "
                                                "ORDER BY id = $1 DESC LIMIT 1", newsletter)
            if newsletter_id is None:
                raise NotFound(f"newsletter {newsletter} does not exist")
        removed = await leave(conn, member_id, newsletter_id, "operator")
    return Unsubscribed(member_id, newsletter_id, removed)


async def _member_row(conn, member: str, *, lock: bool = False):
    """A member named by id or address (`members show` takes either), or NotFound in one line."""
    by_address = "@" in member
    if not by_address:
        entity_id(member, "member")
    row = await conn.fetchrow(
        "SELECT id, uuid, email, name, status, email_disabled FROM members "
        + ("WHERE lower(email) = lower($1)" if by_address else "WHERE id = $1") + (" FOR UPDATE" if lock else ""),
        address_as_stored(member) if by_address else member.strip())
    if row is None:
        # The address is not repeated: it may be a mistyped one of someone else's.
        raise NotFound("no member has that address" if by_address else f"member {member} does not exist")
    return row


async def _newsletter_ids(conn, names: list[str], option: str) -> dict[str, str]:
    """Newsletters named by id or slug: {name as given: id}; the first one unknown refused."""
    for name in names:
        entity_id(name, "newsletter")
    rows = await conn.fetch("SELECT n.name AS given, (SELECT id FROM newsletters WHERE id = n.name OR slug = n.name "
                            "ORDER BY id = n.name DESC LIMIT 1) AS id FROM unnest($1::text[]) AS n(name)", names)
    found = {row["given"]: row["id"] for row in rows}
    missing = [name for name in names if found.get(name) is None]
    if missing:
        raise NotFound(f"{option} {missing[0]}: no newsletter has that id or slug")
    return found


@dataclass(frozen=True)
class MemberUpdated:
    member_id: str
    changed: list[str]  # the fields that changed: name, status, newsletters
    subscribed: list[str]  # newsletter slugs newly subscribed to
    unsubscribed: list[str]  # newsletter slugs newly left
    labels: list[str]  # the member's labels now


@tracing.traced("pressroom members update")
async def update_member(member: str, *, name: str | None = None, status: str | None = None,
                        newsletters: Sequence[str] = (), no_newsletters: Sequence[str] = (),
                        labels: Sequence[str] = (), no_labels: Sequence[str] = (), note: str | None = None,
                        settings: Settings | None = None) -> MemberUpdated:
    """A member's name, status and subscriptions, every input checked before one transaction writes them.

    `name` None leaves it, "" clears it. Subscribing to a newsletter the member has is a no-op, and
    so is leaving one they are not on, and the same for labels (one the site has not got is made, as
    `members add --label` makes it): safe to repeat.
    """
    if status is not None and status not in WELCOME_EMAIL_SLUGS:
        raise BadInput(f"--status {status!r} is not one of {', '.join(WELCOME_EMAIL_SLUGS)}")
    both = set(newsletters) & set(no_newsletters)
    if both:
        raise BadInput(f"newsletter {sorted(both)[0]} is given to both --newsletter and --no-newsletter")
    new_name = free_text(name, "name") if name is not None else None
    new_note = free_text(note, "note", 2000) if note is not None else None
    giving, taking = label_pairs(labels), label_pairs(no_labels)
    both = {slug for _, slug in giving} & {slug for _, slug in taking}
    if both:
        raise BadInput(f"label {sorted(both)[0]} is given to both --label and --no-label")
    if name is None and status is None and note is None and not (newsletters or no_newsletters or labels
                                                                 or no_labels):
        raise BadInput("nothing to update: give --name, --status, --newsletter, --no-newsletter, --label or --no-label")
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn, conn.transaction():
        row = await _member_row(conn, member, lock=True)
        member_id = row["id"]
        tracing.annotate(member_id=member_id)
        previous = await site_events.before(conn, "member.edited", member_id)
        # Only what was asked is run: an option not given costs no statement.
        joining = await _newsletter_ids(conn, list(newsletters), "--newsletter") if newsletters else {}
        leaving = await _newsletter_ids(conn, list(no_newsletters), "--no-newsletter") if no_newsletters else {}
        if set(joining.values()) & set(leaving.values()):
            raise BadInput("one newsletter is given to both --newsletter and --no-newsletter (by id and by slug)")
        changed = []
        if name is not None and new_name != row["name"]:
            changed.append("name")
        if status is not None and status != row["status"]:
            changed.append("status")
        if note is not None and new_note != await conn.fetchval("SELECT note FROM members WHERE id = $1", member_id):
            changed.append("note")
        if changed:
            await conn.execute(
                "UPDATE members SET name = CASE WHEN $2 THEN $3 ELSE name END, status = coalesce($4, status), "
                "note = CASE WHEN $5 THEN $6 ELSE note END, updated_at = now() WHERE id = $1",
                member_id, name is not None, new_name, status, note is not None, new_note)
        subscribed = [r["slug"] for r in await conn.fetch(
            "WITH added AS (INSERT INTO members_newsletters (member_id, newsletter_id) "
            "SELECT $1, unnest($2::text[]) ON CONFLICT (member_id, newsletter_id) DO NOTHING RETURNING newsletter_id) "
            "SELECT n.slug FROM added JOIN newsletters n ON n.id = added.newsletter_id ORDER BY n.slug",
            member_id, list(set(joining.values())))] if joining else []
        unsubscribed = [r["slug"] for r in await conn.fetch(
            "WITH removed AS (DELETE FROM members_newsletters WHERE member_id = $1 AND newsletter_id = ANY($2::text[]) "
            "RETURNING newsletter_id) "
            "SELECT n.slug FROM removed JOIN newsletters n ON n.id = removed.newsletter_id ORDER BY n.slug",
            member_id, list(set(leaving.values())))] if leaving else []
        if subscribed or unsubscribed:
            changed.append("newsletters")
        given = await give_labels(conn, member_id, giving)
        taken = await take_labels(conn, member_id, taking) if taking else []
        if given or taken:
            changed.append("labels")
        labelled = [r["slug"] for r in await conn.fetch(_MEMBER_LABELS, member_id)]  # the answer: labels now
        if len(labelled) > MAX_LABELS:  # nothing is written: the transaction ends with the error
            raise BadInput(f"member {member_id} would have {len(labelled):,} labels; at most {MAX_LABELS}")
        if changed and not {"name", "status", "note"} & set(changed):
            await conn.execute("UPDATE members SET updated_at = now() WHERE id = $1", member_id)
        if changed:
            await site_events.emit(conn, "member.edited", member_id, previous)
    return MemberUpdated(member_id, changed, subscribed, unsubscribed, labelled)


# A deleted member's suppression keeps this instead of their address (suppressions.email holds no
# '@' then, so it matches no member): the address cannot be read back from it, and the same address
# added again finds its suppression (`restore_suppressions`).
ADDRESS_HASH_PREFIX = "hmac-sha256:"


def address_hash(address: str, key: str) -> str:
    """The keyed hash a suppression keeps of a deleted member's address (case folded, as members are found)."""
    return ADDRESS_HASH_PREFIX + hmac.new(key.encode(), address.strip().lower().encode(), hashlib.sha256).hexdigest()


async def restore_suppressions(conn, addresses: list[str], settings: Settings) -> int:
    """Suppressions kept as keyed hashes of deleted members' addresses, given back to these addresses
    (members added again): a bounce or a complaint still stands. Returns how many were restored."""
    key = settings.address_hash_key.get_secret_value()
    if not key or not addresses:
        return 0
    restored = await conn.fetch(
        "UPDATE suppressions s SET email = a.address FROM unnest($1::text[], $2::text[]) AS a(address, hash) "
        "WHERE s.email = a.hash AND NOT EXISTS (SELECT 1 FROM suppressions c WHERE c.email = a.address) "
        "RETURNING s.id", addresses, [address_hash(address, key) for address in addresses])
    return len(restored)


@dataclass(frozen=True)
class MemberDeleted:
    member_id: str
    suppression: str | None  # "kept as a keyed hash" when the address was suppressed
    recipients_cleared: int  # rows of sent emails kept by member id, their address and name cleared
    recipients_removed: int  # rows of batches never sent, removed


def _like_pattern(address: str) -> str:
    """The address as a case-insensitive regular expression matching it literally (PostgreSQL's AREs
    take a backslash before any character other than a letter or digit as that character)."""
    return "".join(c if c.isalnum() else "\\" + c for c in address)


# Rows that keep a copy of the member's address or name, in the tables that outlive them. Each is
# reached through the member id ($1), with the address ($2) and the name ($3) as case-insensitive
# patterns. Records of sends, failures and complaints stay, by member id. Stored provider events
# are scrubbed apart (`_scrub_events`): their JSON must be decoded first.
_SCRUB = [
    # A batch that never went out (nor may have: no uncertain send) loses the recipient: it must not
    # send to an address that is gone.
    ("removed", "DELETE FROM email_recipients er USING email_batches b WHERE er.member_id = $1 AND b.id = er.batch_id "
                "AND b.status <> 'submitted' AND b.send_outcome IS DISTINCT FROM 'uncertain' "
                "AND b.send_outcome IS DISTINCT FROM 'accepted'"),
    ("cleared", "UPDATE email_recipients SET member_email = '', member_name = NULL WHERE member_id = $1"),
    (None, "UPDATE email_recipient_failures SET message = regexp_replace(message, $2, '<address>', 'gi') "
           "WHERE member_id = $1 OR email_recipient_id IN (SELECT id FROM email_recipients WHERE member_id = $1)"),
    (None, "UPDATE email_recipient_failures SET message = regexp_replace(message, $3, '<name>', 'gi') "
           "WHERE (member_id = $1 OR email_recipient_id IN (SELECT id FROM email_recipients WHERE member_id = $1)) "
           "AND $2::text IS NOT NULL AND $3::text IS NOT NULL"),  # $2 unused: every statement takes the first ones
    (None, "UPDATE email_spam_complaint_events SET email_address = '' WHERE member_id = $1"),
    (None, "UPDATE automated_email_recipients SET member_email = '', member_name = NULL WHERE member_id = $1"),
    (None, "UPDATE outbox SET last_error_msg = regexp_replace(last_error_msg, $2, '<address>', 'gi') "
           "WHERE payload->>'member_id' = $1 AND last_error_msg ~* $2"),
    # A site event about them that its webhook refused keeps no body: it is not sent any more.
    (None, "UPDATE outbox SET payload = payload - 'body', status = 'skipped', last_error_code = 'MEMBER_DELETED', "
           "last_error_msg = 'the member was deleted after its webhook refused this event', updated_at = now() "
           "WHERE webhook_id IS NOT NULL AND status = 'aborted' AND payload->>'member_id' = $1"),
    # What webhook targets answered to their events (a target's text may repeat their name).
    (None, "UPDATE webhook_attempts SET answer = NULL WHERE member_id = $1 AND answer IS NOT NULL"),
    # SES's acceptances of sends to them (kept to confirm an uncertain send: none is, or the delete
    # was refused above).
    (None, "DELETE FROM provider_acceptances WHERE recipient ~* ('^' || $2 || '$') AND $1::text IS NOT NULL"),
]
# Stored provider events: those that may hold the member (a form of the address, or any `\\u`
# escape, which hides it from a pattern on the raw text) are decoded and scrubbed in Python.
_EVENT_TABLES = ("delivery_events_rejected", "webhook_inbox")
_EVENTS_TO_SCRUB = "SELECT id, event FROM {table} WHERE event ~* $1 OR strpos(event, '\\u') > 0"
_SCRUBBED_EVENTS = "UPDATE {table} t SET event = s.event FROM unnest($1::bigint[], $2::text[]) AS s(id, event) " \
                   "WHERE t.id = s.id"


def _forms(value: str) -> list[str]:
    """`value` as it may be stored: plain, percent-encoded, base64 (standard, URL-safe, unpadded)."""
    forms = {value, quote(value, safe=""), quote(value), quote_plus(value)}
    raw = value.encode()
    forms |= {base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode(),
              base64.urlsafe_b64encode(raw).decode().rstrip("=")}
    return sorted(forms, key=len, reverse=True)


def _scrubbed(text: str, address: str, name: str | None) -> str:
    """A stored event without the member's address or name in any of their forms: its JSON decoded
    (a JSON text inside a string too), scrubbed, encoded again; a text that is not JSON as it is."""
    patterns = [(re.compile("|".join(re.escape(f) for f in _forms(address)), re.IGNORECASE), "<address>")]
    if name:
        # Whole words only: a short name must not eat the event's other words.
        patterns.append((re.compile(r"(?<!\w)(?:" + "|".join(re.escape(f) for f in _forms(name)) + r")(?!\w)",
                                    re.IGNORECASE), "<name>"))

    def replaced(value: str) -> str:
        for pattern, mask in patterns:
            value = pattern.sub(mask, value)
        return value

    def walk(value):
        if isinstance(value, str):
            if value.lstrip()[:1] in ("{", "["):
                try:
                    return json.dumps(walk(json.loads(value)))
                except (ValueError, RecursionError):
                    pass
            return replaced(value)
        if isinstance(value, dict):
            return {replaced(key): walk(item) for key, item in value.items()}
        if isinstance(value, list):
            return [walk(item) for item in value]
        return value

    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return replaced(text)
    return json.dumps(walk(document))  # ASCII, as received: no NUL or lone surrogate reaches the column


async def _scrub_events(conn, address: str, name: str | None) -> None:
    pattern = "|".join(_like_pattern(form) for form in _forms(address))
    for table in _EVENT_TABLES:
        rows = await conn.fetch(_EVENTS_TO_SCRUB.format(table=table), pattern)
        scrubbed = [(row["id"], row["event"], _scrubbed(row["event"], address, name)) for row in rows]
        changed = [(event_id, text) for event_id, before, text in scrubbed if text != before]
        if changed:
            await conn.execute(_SCRUBBED_EVENTS.format(table=table), [i for i, _ in changed], [t for _, t in changed])


@tracing.traced("pressroom members delete")
async def delete_member(member: str, *, settings: Settings | None = None,
                        pool: asyncpg.Pool | None = None) -> MemberDeleted:
    """The member's row and personal data, in one transaction: subscriptions go with the row
    (cascade); sent emails' records keep the member id with the address and name cleared; a batch
    never sent loses them; raw provider events and stored errors have the address replaced. A
    suppression keeps a keyed hash of the address (PRESSROOM_ADDRESS_HASH_KEY), or goes.

    Refused, writing nothing, while a batch holding the member may be at the provider (its send
    uncertain): its look-up needs the address. Deleting again finds no member.
    """
    settings = settings or get_settings()
    # Refused before anything is read: without the key the suppression would go with the address.
    key = settings.require_address_hash_key()
    async with database.connection(settings.require_database(), pool) as conn, conn.transaction():
        row = await _member_row(conn, member, lock=True)
        member_id, address = row["id"], row["email"]
        tracing.annotate(member_id=member_id)
        in_flight = await conn.fetchval(
            "SELECT b.email_id FROM email_recipients er JOIN email_batches b ON b.id = er.batch_id "
            "WHERE er.member_id = $1 AND b.status <> 'submitted' AND b.send_outcome = 'uncertain' LIMIT 1", member_id)
        if in_flight is not None:
            raise PressroomError(f"member {member_id} was not deleted: a batch of email {in_flight} holding them may "
                                 "have reached the provider and is being looked up; delete them once that send is done")
        await site_events.emit(conn, "member.deleted", member_id)  # as they were, before any scrubbing
        name = row["name"] if row["name"] and row["name"].strip() else None
        patterns = [_like_pattern(address), _like_pattern(name) if name else None]
        counts = {}
        for counted, statement in _SCRUB:
            given = [p for n, p in (("$2", patterns[0]), ("$3", patterns[1])) if n in statement]
            if None in given:
                continue  # a statement for the name, and the member has none
            done = await conn.execute(statement, member_id, *given)
            if counted:
                counts[counted] = int(done.rsplit(" ", 1)[-1])
        await _scrub_events(conn, address, name)
        # An older hash of the same address (deleted, added again meanwhile without the key) gives way.
        await conn.execute("DELETE FROM suppressions WHERE email = $1", address_hash(address, key))
        kept = await conn.fetchval("UPDATE suppressions SET email = $2 WHERE lower(email) = lower($1) RETURNING id",
                                   address, address_hash(address, key))
        suppression = "kept as a keyed hash" if kept else None
        await conn.execute("DELETE FROM members WHERE id = $1", member_id)
    return MemberDeleted(member_id, suppression, counts["cleared"], counts["removed"])
