"""A chunked batch creation's plan and SQL: the groups it writes in turn, and one chunk of a group
written by one statement."""

from __future__ import annotations

import asyncpg

from activities.newsletter.audience import NOT_SKIPPED, RECIPIENTS, SEGMENT
from pressroom.email_rendering import FREE, NOT_FREE

# A member's place in the warming order (open rate highest first, none last; then member id) as
# one ascending key.
RANK_KEY = "coalesce(-m.email_open_rate::float8, 'Infinity'::float8)"


def falls_back(rate: str, member_id: str) -> str:
    """Whether a member is at or past the first one who falls back (NULLs: nobody does)."""
    return f"coalesce(({RANK_KEY}, m.id) >= ({rate}::float8, {member_id}::text), false)"


# One chunk of a group: $4 segment (NULL: unsegmented), $5-$6 warming's first fallback, $7 the
# group's domain, $8 the last member written in the group, $9 how many, $10 the batch id prefix,
# $11 the first batch's number, $12 the batch size, $13 the email. `after` is formatted in as a plain
# range condition (not "$8 IS NULL OR ..."), so that every chunk is an index range scan.
WRITE_CHUNK = f"""
    WITH chosen AS (
        SELECT m.id, m.uuid, m.email, m.name
        {RECIPIENTS}
          AND ($4::text IS NULL OR {SEGMENT} = $4::text)
          AND {falls_back('$5', '$6')} = $7
          {NOT_SKIPPED.format(param=13)}
          {{after}}
        ORDER BY m.id LIMIT $9),
    numbered AS (
        SELECT chosen.*, $10 || '-' || lpad(($11 + (row_number() OVER (ORDER BY id) - 1) / $12)::text, 5, '0')
                         AS batch_id
        FROM chosen),
    batches AS (
        INSERT INTO email_batches (id, email_id, member_segment, fallback_sending_domain)
        SELECT DISTINCT batch_id, $13, $4, $7 FROM numbered),
    recipients AS (
        INSERT INTO email_recipients (email_id, member_id, batch_id, member_uuid, member_email, member_name)
        SELECT $13, id, batch_id, uuid, email, name FROM numbered)
    SELECT count(*) AS n, max(id) AS last FROM numbered
"""


def creation_segments(creation: asyncpg.Record) -> tuple[str | None, ...]:
    """The segments a chunked creation writes; a creation planned before tiers stored only whether
    it was segmented."""
    if creation["segments"] is not None:
        return tuple(creation["segments"])
    return (FREE, NOT_FREE) if creation["segmented"] else (None,)


def creation_groups(segments: tuple[str | None, ...], warming: bool) -> list[tuple[str | None, bool]]:
    """The groups a chunked creation writes in turn: (segment, through the fallback domain)."""
    return [(segment, fallback) for segment in segments for fallback in ((False, True) if warming else (False,))]
