"""Automations' SQL: the welcome automations ensured, a run's next action, its member's eligibility."""

from __future__ import annotations

import asyncpg

# The two welcome automations every site has: slug → (name, the member statuses that enter it, the
# automated email that is its first step). Comped members have no welcome of their own: the paid one.
WELCOME_AUTOMATIONS = {
    "welcome-free": ("Welcome (free members)", ["free"], "member-welcome-email-free"),
    "welcome-paid": ("Welcome (paid members)", ["paid", "comped"], "member-welcome-email-paid"),
}
WELCOME_OF_STATUS = {"free": "welcome-free", "paid": "welcome-paid", "comped": "welcome-paid"}
WELCOME_EMAIL_PREFIX = "member-welcome-email-"

_WANTED = ("SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) "
           "AS w (slug, name, statuses, email_slug)")

# Both welcome automations, made when missing (a site whose tables were made after 0088, or emptied);
# one whose path is empty takes the site's welcome email as its first step, and that email's status,
# once the email exists. Nothing changes for a site that has them.
_ENSURE_WELCOME = f"""
WITH wanted AS ({_WANTED}),
made AS (
    INSERT INTO automations (slug, name, member_statuses, status)
    SELECT w.slug, w.name, string_to_array(w.statuses, ','), coalesce(ae.status, 'inactive')
    FROM wanted w LEFT JOIN automated_emails ae ON ae.slug = w.email_slug
    ON CONFLICT (slug) DO NOTHING RETURNING id, slug
), empty AS (
    SELECT a.id, ae.id AS email_id, ae.status FROM (SELECT id, slug FROM automations UNION SELECT * FROM made) a
    JOIN wanted w ON w.slug = a.slug JOIN automated_emails ae ON ae.slug = w.email_slug
    WHERE NOT EXISTS (SELECT 1 FROM automation_actions x WHERE x.automation_id = a.id AND x.deleted_at IS NULL)
), attached AS (
    INSERT INTO automation_actions (automation_id, type, automated_email_id)
    SELECT id, 'send_email', email_id FROM empty RETURNING automation_id
)
-- (a row made above is not seen by this update: it was made with its email's status)
UPDATE automations a SET status = e.status, updated_at = now() FROM empty e WHERE a.id = e.id"""

_NEEDS_ENSURE = """
SELECT count(*) < 2 OR bool_or(NOT EXISTS (SELECT 1 FROM automation_actions x
                                           WHERE x.automation_id = a.id AND x.deleted_at IS NULL)
                               AND EXISTS (SELECT 1 FROM automated_emails ae
                                           WHERE ae.slug = $2 || split_part(a.slug, '-', 2)))
FROM automations a WHERE a.slug = ANY($1::text[])"""


async def ensure_welcome_automations(pool: asyncpg.Pool) -> None:
    """The two welcome automations exist, with the site's welcome email as first step where it has one."""
    if await pool.fetchval(_NEEDS_ENSURE, list(WELCOME_AUTOMATIONS), WELCOME_EMAIL_PREFIX):
        async with pool.acquire() as conn:
            await ensure_welcome_automations_on(conn)


async def ensure_welcome_automations_on(conn: asyncpg.Connection) -> None:
    """`ensure_welcome_automations` on one connection (in its transaction, if it is in one)."""
    slugs = list(WELCOME_AUTOMATIONS)
    if not await conn.fetchval(_NEEDS_ENSURE, slugs, WELCOME_EMAIL_PREFIX):
        return
    names, statuses, emails = zip(*WELCOME_AUTOMATIONS.values(), strict=True)
    async with conn.transaction():
        # Two first members at once must not attach the email twice.
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext('pressroom-welcome-automations'))")
        if await conn.fetchval(_NEEDS_ENSURE, slugs, WELCOME_EMAIL_PREFIX):
            await conn.execute(_ENSURE_WELCOME, slugs, list(names), [",".join(s) for s in statuses], list(emails))


# The automation's first action: the live action no live edge leads to.
FIRST_ACTION = """
SELECT act.id FROM automation_actions act
WHERE act.automation_id = $1 AND act.deleted_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM automation_edges e JOIN automation_actions s ON s.id = e.source_action_id
                  WHERE e.target_action_id = act.id AND s.deleted_at IS NULL)
ORDER BY act.created_at LIMIT 1"""

# The action after $1 on its path ($2: the path a branch took, NULL after any other action); a
# removed action is passed over (its edge out is followed; a removed branch's `not_clicked` one).
NEXT_ACTION = """
WITH RECURSIVE onward (id, deleted, depth) AS (
    SELECT t.id, t.deleted_at IS NOT NULL, 1
    FROM automation_edges e JOIN automation_actions t ON t.id = e.target_action_id
    WHERE e.source_action_id = $1 AND e.condition IS NOT DISTINCT FROM $2::text
  UNION ALL
    SELECT t.id, t.deleted_at IS NOT NULL, o.depth + 1 FROM onward o
    JOIN automation_edges e ON e.source_action_id = o.id JOIN automation_actions t ON t.id = e.target_action_id
    WHERE o.deleted AND o.depth < 100 AND coalesce(e.condition, 'not_clicked') = 'not_clicked'
)
SELECT id FROM onward WHERE NOT deleted ORDER BY depth LIMIT 1"""

# An action's revision as a run reaches it: a send_email's automated email edited outside
# Pressroom (by the site) since its last revision becomes a new one first. Answers the revision.
REACH_REVISION = """
WITH act AS (SELECT a.id, a.type, ae.subject, ae.html, ae.plaintext FROM automation_actions a
             LEFT JOIN automated_emails ae ON ae.id = a.automated_email_id WHERE a.id = $1),
latest AS (SELECT r.* FROM automation_action_revisions r WHERE r.action_id = $1 ORDER BY revision DESC LIMIT 1),
added AS (
    INSERT INTO automation_action_revisions (action_id, revision, subject, html, plaintext)
    SELECT act.id, coalesce((SELECT revision FROM latest), 0) + 1, act.subject, act.html, act.plaintext FROM act
    WHERE act.type = 'send_email' AND NOT EXISTS (
        SELECT 1 FROM latest l WHERE l.subject IS NOT DISTINCT FROM act.subject AND l.html IS NOT DISTINCT FROM act.html
          AND l.plaintext IS NOT DISTINCT FROM act.plaintext)
    ON CONFLICT DO NOTHING RETURNING revision
)
SELECT coalesce((SELECT revision FROM added), (SELECT revision FROM latest))"""

# Why a run's member may not go on ($1 the run): NULL when they may. Deleted, no longer of a status
# the automation takes, email disabled, suppressed, or left every newsletter they had (a member who
# never subscribed is still welcomed, as before automations).
MEMBER_STOP = """
SELECT CASE
    WHEN m.id IS NULL THEN 'member deleted'
    WHEN NOT m.status = ANY(a.member_statuses) THEN 'member changed status'
    WHEN m.email_disabled THEN 'email disabled'
    WHEN EXISTS (SELECT 1 FROM suppressions s WHERE s.email = m.email) THEN 'member suppressed'
    WHEN NOT EXISTS (SELECT 1 FROM members_newsletters mn WHERE mn.member_id = m.id)
         AND EXISTS (SELECT 1 FROM members_subscribe_events se WHERE se.member_id = m.id AND NOT se.subscribed)
        THEN 'member unsubscribed'
    WHEN a.status <> 'active' THEN 'automation disabled'
END
FROM automation_runs r JOIN automations a ON a.id = r.automation_id LEFT JOIN members m ON m.id = r.member_id
WHERE r.id = $1"""


# A member's run of an automation, once: entered again, the same run ($1 automation, $2 member, $3 key).
ENTER_RUN = ("INSERT INTO automation_runs (automation_id, member_id, idempotency_key) VALUES ($1, $2, $3) "
             "ON CONFLICT (idempotency_key) DO UPDATE SET updated_at = automation_runs.updated_at RETURNING id")


def run_key(automation_id: str, member_id: str) -> str:
    """A run's idempotency key, and its workflow's id: one run per member and automation."""
    return f"automation-{automation_id}-{member_id}"


# The email a branch waits on ($1 the run): the run's latest send_email step's automated email.
BRANCH_EMAIL = """
SELECT act.automated_email_id FROM automation_run_steps s JOIN automation_actions act ON act.id = s.action_id
WHERE s.run_id = $1 AND act.type = 'send_email' ORDER BY s.started_at DESC, s.id DESC LIMIT 1"""

# Whether the run's member clicked a link of automated email $2 ($1 the run); a scanner's is no click.
CLICKED = """
SELECT EXISTS (SELECT 1 FROM automation_runs r JOIN members_click_events c ON c.member_id = r.member_id
               JOIN redirects rd ON rd.id = c.redirect_id
               WHERE r.id = $1 AND rd.automated_email_id = $2 AND c.scanner IS NULL)"""

# The runs waiting on a click of the email whose link `from` is $1, for the member of uuid $2: their keys.
WAITING_ON_CLICK = """
SELECT r.idempotency_key, rd.automated_email_id FROM redirects rd
JOIN automation_actions act ON act.automated_email_id = rd.automated_email_id
JOIN automation_runs r ON r.automation_id = act.automation_id AND r.status = 'in_progress'
JOIN members m ON m.id = r.member_id
WHERE rd."from" = $1 AND m.uuid = $2::uuid"""
