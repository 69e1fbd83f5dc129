"""The Admin API's automations/ resource through real HTTP: browse, read, edit (one path kept), its
latest runs and its performance."""

from __future__ import annotations

from operations.automations import create_sequence
from tests.admin_api.test_resources import one
from tests.admin_api.test_tokens import error_of


async def test_automations_are_browsed_read_edited_and_their_runs_and_figures_listed(api, db):
    async with db.acquire() as conn:
        automation_id = await create_sequence(conn, "onboarding", "Onboarding", ["free"], [
            {"type": "send_email", "subject": "Hello", "html": "<p>Hello</p>"},
            {"type": "wait", "wait_hours": 72},
            {"type": "send_email", "subject": "Later", "html": "<p>Later</p>"}])
    browsed = await api.get("automations/")
    assert browsed.status_code == 200, browsed.text
    assert {a["slug"] for a in browsed.json()["automations"]} == {"welcome-free", "welcome-paid", "onboarding"}
    automation = one(await api.get(f"automations/{automation_id}/"), "automations")
    assert [a["type"] for a in automation["actions"]] == ["send_email", "wait", "send_email"]
    assert len(automation["edges"]) == 2

    actions = automation["actions"]
    actions[0]["data"]["subject"] = "Hello again"
    actions[1]["data"]["wait_hours"] = 48
    edited = await api.put(f"automations/{automation_id}/", json={"automations": [
        {"status": "inactive", "actions": actions, "edges": automation["edges"]}]})
    assert edited.status_code == 200, edited.text
    after = one(edited, "automations")
    assert after["status"] == "inactive" and after["actions"][0]["data"]["subject"] == "Hello again"
    assert after["actions"][1]["data"]["wait_hours"] == 48 and after["actions"][1]["revision"] == 2

    looped = [{"source_action_id": actions[2]["id"], "target_action_id": actions[0]["id"]}, *automation["edges"]]
    refused = await api.put(f"automations/{automation_id}/", json={"automations": [{"edges": looped}]})
    assert refused.status_code == 422 and "one path" in error_of(refused)["message"]
    dropped = await api.put(f"automations/{automation_id}/", json={"automations": [{"actions": actions[:2]}]})
    assert dropped.status_code == 422 and "cannot be added or removed" in error_of(dropped)["message"]
    assert one(await api.get(f"automations/{automation_id}/"), "automations")["actions"][0]["revision"] == 2

    half = [{**actions[0], "data": {"subject": "Not kept"}}, {**actions[1], "data": {"wait_hours": "soon"}}, actions[2]]
    partial = await api.put(f"automations/{automation_id}/", json={"automations": [{"actions": half}]})
    assert partial.status_code == 422 and "wait_hours must be a number between 0 and" in error_of(partial)["message"]
    assert one(await api.get(f"automations/{automation_id}/"), "automations")["actions"][0]["data"]["subject"] == \
        "Hello again"  # checked whole: nothing written

    runs = await api.get(f"automations/{automation_id}/runs/")
    assert runs.status_code == 200 and runs.json() == {"automation_runs": []}
    stats = one(await api.get(f"automations/{automation_id}/performance-stats/"), "performance_stats")
    assert stats["sent"] == 0 and stats["entries"] == []
    missing = await api.get("automations/nope/")
    assert missing.status_code == 404 and error_of(missing)["type"] == "NotFoundError"
