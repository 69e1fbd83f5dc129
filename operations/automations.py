"""Automations as the operator, the Admin API and the pages ask for them: list, read, edit, switch on
and off, their runs and their figures; a sequence made and a member entered (tests, benchmarks, the
histories' capture)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from activities.automations.models import AutomationRunInput, ClickedSignal
from operations.answers import (
    Automation,
    AutomationAction,
    AutomationEdge,
    AutomationRow,
    AutomationRun,
    AutomationRuns,
    AutomationStats,
)
from operations.common import temporal_client
from pressroom import database
from pressroom.email_rendering import html_to_text
from pressroom.errors import BadInput, NotFound
from pressroom.settings import Settings, get_settings
from pressroom.store import automations as store
from workflows.automations import AutomationRunWorkflow

RUN_STATUSES = ("in_progress", "completed", "exited_early")
RUNS_SHOWN = 50  # the reference's latest fifty
MAX_WAIT_HOURS = 24 * 365


# --- reads -----------------------------------------------------------------------------------------

_ROWS = """
SELECT a.id, a.slug, a.name, a.status, a.member_statuses, a.created_at, a.updated_at,
       (SELECT count(*) FROM automation_actions x WHERE x.automation_id = a.id AND x.deleted_at IS NULL) AS actions,
       count(r.id) FILTER (WHERE r.status = 'in_progress') AS in_progress,
       count(r.id) FILTER (WHERE r.status = 'completed') AS completed,
       count(r.id) FILTER (WHERE r.status = 'exited_early') AS exited_early
FROM automations a LEFT JOIN automation_runs r ON r.automation_id = a.id
WHERE $1::text IS NULL OR a.id = $1 OR a.slug = $1
GROUP BY a.id ORDER BY a.created_at, a.slug"""

_ACTIONS = """
SELECT act.id, act.type, act.automated_email_id, rev.revision, rev.wait_hours,
       coalesce(ae.subject, rev.subject) AS subject,
       (SELECT count(*) FROM automation_run_steps s WHERE s.action_id = act.id AND s.provider_id IS NOT NULL) AS sent,
       (SELECT count(*) FROM automation_run_steps s WHERE s.action_id = act.id AND s.status = 'in_progress')
           AS in_progress
FROM automation_actions act
LEFT JOIN automated_emails ae ON ae.id = act.automated_email_id
LEFT JOIN LATERAL (SELECT * FROM automation_action_revisions r WHERE r.action_id = act.id
                   ORDER BY r.revision DESC LIMIT 1) rev ON true
WHERE act.automation_id = $1 AND act.deleted_at IS NULL"""

_EDGES = ("SELECT e.source_action_id, e.target_action_id, e.condition FROM automation_edges e "
          "JOIN automation_actions s ON s.id = e.source_action_id "
          "JOIN automation_actions t ON t.id = e.target_action_id "
          "WHERE e.automation_id = $1 AND s.deleted_at IS NULL AND t.deleted_at IS NULL")


def _ordered(actions: list, edges: list) -> list:
    """The actions in their path's order (a path is checked when it is written: one start, no branch)."""
    # A branch's `clicked` path is listed after its `not_clicked` one (each edge shows its condition).
    following = {e["source_action_id"]: e["target_action_id"] for e in edges if e.get("condition") != "clicked"}
    targets = {e["target_action_id"] for e in edges}
    by_id = {a["id"]: a for a in actions}
    starts = [a for a in actions if a["id"] not in targets]
    ordered, seen = [], set()
    current = starts[0]["id"] if starts else None
    while current is not None and current not in seen and current in by_id:
        ordered.append(by_id[current])
        seen.add(current)
        current = following.get(current)
    return ordered + [a for a in actions if a["id"] not in seen]


async def _pool_ready(conn) -> None:
    await store.ensure_welcome_automations_on(conn)


async def list_automations(*, settings: Settings | None = None) -> list[AutomationRow]:
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        await _pool_ready(conn)
        return [AutomationRow.model_validate(dict(r)) for r in await conn.fetch(_ROWS, None)]


async def _find(conn, name: str):
    row = await conn.fetchrow(_ROWS, name)
    if row is None:
        raise NotFound(f"no automation {name!r} (see `pressroom automations list`)")
    return row


async def show_automation(name: str, *, settings: Settings | None = None) -> Automation:
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        await _pool_ready(conn)
        return await _automation(conn, await _find(conn, name))


async def _automation(conn, row) -> Automation:
    edges = [dict(e) for e in await conn.fetch(_EDGES, row["id"])]
    actions = _ordered([dict(a) for a in await conn.fetch(_ACTIONS, row["id"])], edges)
    return Automation(automation=AutomationRow.model_validate(dict(row)),
                      actions=[AutomationAction.model_validate({**a, "position": n})
                               for n, a in enumerate(actions, 1)],
                      edges=[AutomationEdge.model_validate(e) for e in edges])


_RUNS = """
SELECT r.id, r.member_id, r.status, r.exit_reason, r.current_action_id, r.created_at, r.ended_at,
       coalesce((SELECT json_agg(json_build_object(
                    'action_id', s.action_id, 'type', act.type, 'revision', s.revision, 'status', s.status,
                    'provider_id', s.provider_id, 'error', s.error, 'path', s.path, 'started_at', s.started_at,
                    'finished_at', s.finished_at) ORDER BY s.started_at, s.id)
                 FROM automation_run_steps s JOIN automation_actions act ON act.id = s.action_id
                 WHERE s.run_id = r.id), '[]') AS steps
FROM automation_runs r
WHERE ($1::text IS NULL OR r.automation_id = $1) AND ($2::text IS NULL OR r.status = $2)
  AND ($3::text IS NULL OR r.member_id = $3)
ORDER BY r.created_at DESC, r.id DESC LIMIT $4"""


def _run(row) -> AutomationRun:
    return AutomationRun.model_validate({**dict(row), "steps": json.loads(row["steps"])})


async def automation_runs(name: str, status: str | None = None, *, limit: int = RUNS_SHOWN,
                          settings: Settings | None = None) -> AutomationRuns:
    """Its latest runs, newest first, with their steps; `status` one of RUN_STATUSES."""
    if status is not None and status not in RUN_STATUSES:
        raise BadInput(f"--status {status!r} is not one of {', '.join(RUN_STATUSES)}")
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        row = await _find(conn, name)
        runs = await conn.fetch(_RUNS, row["id"], status, None, limit)
    return AutomationRuns(automation_id=row["id"], status=status, runs=[_run(r) for r in runs])


async def member_runs(conn, member_id: str) -> list[AutomationRun]:
    """A member's runs with their steps, newest first (`members show`)."""
    return [_run(r) for r in await conn.fetch(_RUNS, None, None, member_id, RUNS_SHOWN)]


_STATS = """
SELECT
  (SELECT coalesce(json_agg(json_build_object('day', d, 'entries', n) ORDER BY d), '[]') FROM (
      SELECT created_at::date AS d, count(*) AS n FROM automation_runs WHERE automation_id = $1
      AND created_at > now() - interval '30 days' GROUP BY 1) days) AS entries,
  (SELECT count(*) FROM automation_run_steps s JOIN automation_runs r ON r.id = s.run_id
   WHERE r.automation_id = $1 AND s.provider_id IS NOT NULL) AS sent,
  (SELECT count(DISTINCT (c.member_id, rd.automated_email_id)) FROM members_click_events c
   JOIN redirects rd ON rd.id = c.redirect_id
   JOIN automation_actions act ON act.automated_email_id = rd.automated_email_id
   WHERE act.automation_id = $1 AND c.scanner IS NULL AND c.member_id IS NOT NULL) AS clicked"""


async def automation_stats(name: str, *, settings: Settings | None = None) -> AutomationStats:
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        row = await _find(conn, name)
        stats = await conn.fetchrow(_STATS, row["id"])
    sent = stats["sent"]
    return AutomationStats(automation_id=row["id"], entries=json.loads(stats["entries"]), sent=sent, opened=None,
                           clicked=stats["clicked"], open_rate=None,
                           click_rate=round(stats["clicked"] / sent, 4) if sent else None)


# --- changes ---------------------------------------------------------------------------------------

async def set_automation_status(name: str, status: str, *, settings: Settings | None = None) -> AutomationRow:
    """On or off. A welcome automation's email is switched with it (the welcome's own switch, which
    deliveries begun before automations read). Runs of one switched off end at their next step."""
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn, conn.transaction():
        await _pool_ready(conn)
        row = await _find(conn, name)
        if row["slug"] in store.WELCOME_AUTOMATIONS:
            email_slug = store.WELCOME_AUTOMATIONS[row["slug"]][2]
            switched = await conn.fetchval(
                "UPDATE automated_emails ae SET status = $2, updated_at = now() FROM automation_actions act "
                "WHERE act.automation_id = $1 AND act.automated_email_id = ae.id AND act.deleted_at IS NULL "
                "RETURNING 1", row["id"], status)
            if switched is None and status == "active":
                raise BadInput(f"automation {row['slug']} has no email to send: the site's welcome email "
                               f"{email_slug} does not exist yet")
        await conn.execute("UPDATE automations SET status = $2, updated_at = now() WHERE id = $1", row["id"], status)
        return AutomationRow.model_validate(dict(await _find(conn, row["id"])))


async def edit_automation(name: str, action: str, *, subject: str | None = None, body: str | None = None,
                          wait_hours: float | None = None, settings: Settings | None = None) -> Automation:
    """One action's subject, body (HTML) or wait changed: a new revision, which runs that have not yet
    reached the action follow. The path itself (its actions and edges) is not changed: one path."""
    if subject is None and body is None and wait_hours is None:
        raise BadInput("nothing to change: give --subject, --body or --wait-hours")
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn, conn.transaction():
        await _pool_ready(conn)
        automation = await _automation(conn, await _find(conn, name))
        chosen = _action(automation, action)
        changes = checked_changes(chosen, subject, body, wait_hours)
        await _revise(conn, chosen, **changes)
        return await _automation(conn, await _find(conn, automation.automation.id))


def _action(automation: Automation, action: str) -> AutomationAction:
    for candidate in automation.actions:
        if action in (candidate.id, str(candidate.position)):
            return candidate
    raise NotFound(f"automation {automation.automation.slug} has no action {action!r} "
                   f"(its actions: {', '.join(str(a.position) for a in automation.actions) or 'none'})")


def checked_changes(action: AutomationAction, subject: str | None, body: str | None,
                    wait_hours: float | None) -> dict[str, Any]:
    """The changes one action may take, else BadInput naming what is wrong (nothing written)."""
    if action.type in ("wait", "wait_for_click"):
        if subject is not None or body is not None:
            raise BadInput(f"action {action.position} is a wait: only --wait-hours changes it")
        if isinstance(wait_hours, bool) or not isinstance(wait_hours, int | float) \
                or not 0 <= wait_hours <= MAX_WAIT_HOURS:
            raise BadInput(f"wait_hours must be a number between 0 and {MAX_WAIT_HOURS}")
        return {"wait_hours": wait_hours}
    if wait_hours is not None:
        raise BadInput(f"action {action.position} sends an email: --wait-hours does not apply")
    if subject is not None and (not isinstance(subject, str) or not subject.strip()
                                or any(c in subject for c in "\r\n")):
        raise BadInput("the subject must be one line of text")
    if body is not None and (not isinstance(body, str) or not body.strip()):
        raise BadInput("the body must not be empty")
    return {"subject": subject, "body": body}


async def _revise(conn, action: AutomationAction, *, subject: str | None = None, body: str | None = None,
                  wait_hours: float | None = None) -> None:
    if action.type == "send_email":
        await conn.execute(
            "UPDATE automated_emails SET subject = coalesce($2, subject), html = coalesce($3, html), "
            "plaintext = coalesce($4, plaintext), updated_at = now() WHERE id = $1",
            action.automated_email_id, subject, body, html_to_text(body) if body is not None else None)
    await conn.execute(
        "INSERT INTO automation_action_revisions (action_id, revision, wait_hours, subject, html, plaintext) "
        "SELECT $1, coalesce(max(r.revision), 0) + 1, $2, ae.subject, ae.html, ae.plaintext "
        "FROM automation_actions act LEFT JOIN automated_emails ae ON ae.id = act.automated_email_id "
        "LEFT JOIN automation_action_revisions r ON r.action_id = act.id WHERE act.id = $1 "
        "GROUP BY ae.subject, ae.html, ae.plaintext", action.id, wait_hours)


# --- a sequence made, a member entered ---------------------------------------------------------------

def check_one_path(steps: list[dict[str, Any]], *, branch_allowed: bool = True) -> None:
    """A path's steps as written: each a wait (wait_hours) or an email (subject, html); one path, whose
    last step may be the one branch (`wait_for_click`, wait_hours, a `clicked` and a `not_clicked` path)."""
    if not steps:
        raise BadInput("an automation needs at least one action")
    for n, step in enumerate(steps, 1):
        kind = step.get("type")
        if kind in ("wait", "wait_for_click"):
            hours = step.get("wait_hours")
            if not isinstance(hours, int | float) or not 0 <= hours <= MAX_WAIT_HOURS:
                raise BadInput(f"action {n}: wait_hours must be a number between 0 and {MAX_WAIT_HOURS}")
        elif kind == "send_email":
            if not step.get("subject") or not step.get("html"):
                raise BadInput(f"action {n}: a send_email needs a subject and an html body")
        else:
            raise BadInput(f"action {n}: type must be wait, send_email or wait_for_click")
        if kind == "wait_for_click":
            _check_branch(n, step, last=n == len(steps), allowed=branch_allowed)


def _check_branch(n: int, step: dict[str, Any], *, last: bool, allowed: bool) -> None:
    if not allowed or not last:
        raise BadInput(f"action {n}: a wait_for_click is the path's last action and its only branch")
    for path in ("clicked", "not_clicked"):
        if not isinstance(step.get(path), list):
            raise BadInput(f"action {n}: a wait_for_click needs its {path} path (a list of actions)")
        check_one_path(step[path], branch_allowed=False)


async def create_sequence(conn, slug: str, name: str, member_statuses: list[str], steps: list[dict[str, Any]],
                          *, status: str = "active") -> str:
    """An automation of `steps` in order (one path, ending in at most one branch), each email an
    automated email of its own."""
    check_one_path(steps)
    async with conn.transaction():
        automation_id = await conn.fetchval(
            "INSERT INTO automations (slug, name, member_statuses, status) VALUES ($1, $2, $3, $4) RETURNING id",
            slug, name, member_statuses, status)
        await _write_path(conn, automation_id, name, steps, None, None, [0])
    return automation_id


async def _write_path(conn, automation_id: str, name: str, steps: list[dict[str, Any]], previous: str | None,
                      condition: str | None, counter: list[int]) -> None:
    """`steps` joined in order after `previous` (its first edge with `condition`); a branch's paths after it."""
    for step in steps:
        counter[0] += 1
        n = counter[0]
        email_id = None
        if step["type"] == "send_email":
            email_id = await conn.fetchval(
                "INSERT INTO automated_emails (name, slug, subject, html, plaintext) VALUES ($1, $2, $3, $4, $5) "
                "RETURNING id", f"{name} #{n}", f"automation-{automation_id}-{n}", step["subject"],
                step["html"], html_to_text(step["html"]))
        action_id = await conn.fetchval(
            "INSERT INTO automation_actions (automation_id, type, automated_email_id) VALUES ($1, $2, $3) "
            "RETURNING id", automation_id, step["type"], email_id)
        await conn.execute(
            "INSERT INTO automation_action_revisions (action_id, revision, wait_hours, subject, html, plaintext) "
            "VALUES ($1, 1, $2, $3, $4, $5)", action_id, step.get("wait_hours"), step.get("subject"),
            step.get("html"), html_to_text(step["html"]) if step.get("html") else None)
        if previous is not None:
            await conn.execute("INSERT INTO automation_edges (automation_id, source_action_id, target_action_id, "
                               "condition) VALUES ($1, $2, $3, $4)", automation_id, previous, action_id, condition)
        previous, condition = action_id, None
        if step["type"] == "wait_for_click":
            for path in ("clicked", "not_clicked"):
                await _write_path(conn, automation_id, name, step[path], action_id, path, counter)


async def enter_member(conn, automation_id: str, member_id: str, *, client=None,
                       settings: Settings | None = None) -> str:
    """The member's run of the automation, started once (its workflow id is the run's key)."""
    settings = settings or get_settings()
    client = client or await temporal_client(settings)
    key = store.run_key(automation_id, member_id)
    run_id = await conn.fetchval(store.ENTER_RUN, automation_id, member_id, key)
    with contextlib.suppress(WorkflowAlreadyStartedError):  # entered twice: one run
        await client.start_workflow(AutomationRunWorkflow.run, AutomationRunInput(run_id=run_id), id=key,
                                    task_queue=settings.task_queue,
                                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE)
    return key


async def tell_runs_of_click(pool: asyncpg.Pool, temporal: Callable[[], Awaitable[Client]], path: str,
                             member_uuid: str) -> None:
    """Signal the member's runs waiting for a click on the email of link `path`; the client is asked
    for only when a run waits. A run that ended meanwhile is passed over."""
    runs = await pool.fetch(store.WAITING_ON_CLICK, path, member_uuid)
    if not runs:
        return
    client = await temporal()
    for run in runs:
        with contextlib.suppress(RPCError):  # the run ended, or never started
            await client.get_workflow_handle(run["idempotency_key"]).signal(
                AutomationRunWorkflow.clicked, ClickedSignal(automated_email_id=run["automated_email_id"]))
