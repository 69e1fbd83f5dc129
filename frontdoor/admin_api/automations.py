"""The Admin API's `automations/` resource as the reference has it: browse, read, edit (its status,
its actions' content; one path kept), its latest fifty runs, its performance."""

from __future__ import annotations

from typing import Any

from frontdoor.admin_api.envelope import invalid
from operations import automations as ops
from pressroom.errors import NotFound
from pressroom.settings import Settings

_EDITABLE = {"status", "actions", "edges"}
_ACTION_DATA = {"subject", "html", "body", "wait_hours"}


def automation_json(shown: ops.Automation) -> dict[str, Any]:
    a = shown.automation
    return {"id": a.id, "slug": a.slug, "name": a.name, "status": a.status, "member_statuses": a.member_statuses,
            "created_at": a.created_at.isoformat(), "updated_at": a.updated_at.isoformat(),
            "actions": [{"id": x.id, "type": x.type, "revision": x.revision,
                         "data": {"wait_hours": x.wait_hours} if x.type != "send_email" else
                         {"subject": x.subject, "automated_email_id": x.automated_email_id},
                         "sent": x.sent} for x in shown.actions],
            "edges": [{"source_action_id": e.source_action_id, "target_action_id": e.target_action_id,
                       "condition": e.condition}
                      for e in shown.edges]}


def run_json(run: ops.AutomationRun) -> dict[str, Any]:
    return {"id": run.id, "member_id": run.member_id, "status": run.status, "exit_reason": run.exit_reason,
            "created_at": run.created_at.isoformat(), "ended_at": run.ended_at.isoformat() if run.ended_at else None,
            "steps": [{"action_id": s.action_id, "type": s.type, "revision": s.revision, "status": s.status,
                       "error": s.error} for s in run.steps]}


async def browse(settings: Settings) -> dict[str, Any]:
    rows = await ops.list_automations(settings=settings)
    shown = [await ops.show_automation(row.id, settings=settings) for row in rows]
    return {"automations": [automation_json(s) for s in shown],
            "meta": {"pagination": {"page": 1, "limit": "all", "pages": 1, "total": len(shown), "next": None,
                                    "prev": None}}}


async def read(settings: Settings, automation_id: str) -> dict[str, Any]:
    return {"automations": [automation_json(await _by_id(settings, automation_id))]}


async def _by_id(settings: Settings, automation_id: str) -> ops.Automation:
    try:
        shown = await ops.show_automation(automation_id, settings=settings)
    except NotFound:
        raise NotFound("Automation not found.") from None
    if shown.automation.id != automation_id:  # by id only
        raise NotFound("Automation not found.")
    return shown


def _check_edges(current: ops.Automation, edges: Any) -> None:
    """An edit keeps one path: the edges given, if any, must be the automation's own."""
    if edges is None:
        return
    if not isinstance(edges, list) or not all(isinstance(e, dict) for e in edges):
        raise invalid("automations.edges must be a list of {source_action_id, target_action_id}", property="edges")
    given = {(e.get("source_action_id"), e.get("target_action_id")) for e in edges}
    if len(given) != len(edges) or given != {(e.source_action_id, e.target_action_id) for e in current.edges}:
        raise invalid("an edit keeps the automation's one path (and its branch on a click, if any): "
                      "its edges cannot change",
                      property="edges")


async def edit(settings: Settings, automation_id: str, item: dict[str, Any]) -> dict[str, Any]:
    """Checked whole before anything is written: status, then each action's new content."""
    if unknown := set(item) - _EDITABLE - {"id", "slug", "name", "member_statuses", "created_at", "updated_at"}:
        raise invalid(f"automations.{sorted(unknown)[0]} is not supported by Pressroom",
                      property=sorted(unknown)[0], context=f"automation fields Pressroom writes: {sorted(_EDITABLE)}")
    current = await _by_id(settings, automation_id)
    status = item.get("status")
    if status is not None and status not in ("active", "inactive"):
        raise invalid("automations.status must be active or inactive", property="status")
    _check_edges(current, item.get("edges"))
    changes = _action_changes(current, item.get("actions"))
    known = {a.id: a for a in current.actions}
    for action_id, data in changes:  # every change checked before the first is written
        ops.checked_changes(known[action_id], data.get("subject"), data.get("html", data.get("body")),
                            data.get("wait_hours"))
    for action_id, data in changes:
        await ops.edit_automation(automation_id, action_id, subject=data.get("subject"),
                                  body=data.get("html", data.get("body")), wait_hours=data.get("wait_hours"),
                                  settings=settings)
    if status is not None and status != current.automation.status:
        await ops.set_automation_status(automation_id, status, settings=settings)
    return await read(settings, automation_id)


def _action_changes(current: ops.Automation, actions: Any) -> list[tuple[str, dict[str, Any]]]:
    if actions is None:
        return []
    if not isinstance(actions, list) or not all(isinstance(a, dict) for a in actions):
        raise invalid("automations.actions must be a list of actions", property="actions")
    known = {a.id: a for a in current.actions}
    if {a.get("id") for a in actions} != set(known) or len(actions) != len(known):
        raise invalid("an edit keeps the automation's one path: actions cannot be added or removed",
                      property="actions")
    changes = []
    for action in actions:
        data = action.get("data") or {}
        if not isinstance(data, dict) or set(data) - _ACTION_DATA - {"automated_email_id"}:
            raise invalid(f"action {action['id']}: data may hold {', '.join(sorted(_ACTION_DATA))}", property="actions")
        was = known[action["id"]]
        wanted = {k: v for k, v in data.items() if k in _ACTION_DATA}
        if was.type != "send_email" and wanted.get("wait_hours") not in (None, was.wait_hours):
            changes.append((was.id, {"wait_hours": wanted["wait_hours"]}))
        elif was.type == "send_email":
            wanted.pop("wait_hours", None)
            if wanted.get("subject") == was.subject:
                wanted.pop("subject")
            if wanted:
                changes.append((was.id, wanted))
    return changes


async def runs(settings: Settings, automation_id: str) -> dict[str, Any]:
    await _by_id(settings, automation_id)
    found = await ops.automation_runs(automation_id, settings=settings)
    return {"automation_runs": [run_json(r) for r in found.runs]}


async def performance(settings: Settings, automation_id: str) -> dict[str, Any]:
    await _by_id(settings, automation_id)
    stats = await ops.automation_stats(automation_id, settings=settings)
    return {"performance_stats": [{
        "entries": [{"date": e.day, "count": e.entries} for e in stats.entries],
        "sent": stats.sent, "opened": stats.opened, "clicked": stats.clicked,
        "open_rate": stats.open_rate, "click_rate": stats.click_rate}]}
