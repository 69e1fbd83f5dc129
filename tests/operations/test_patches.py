"""`pressroom patches check`: which patches may be retired, asked of Temporal (docs/production.md, "Patches")."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import timedelta
from pathlib import Path

from temporalio import workflow
from temporalio.worker import Worker

import workflows
from operations.patches import PATCHES, check_patches, release_key
from pressroom.errors import BadInput
from tests.newsletter.test_failures import wait_until
from tests.operations.test_waiting import cli, cli_env

HISTORIES = Path(__file__).resolve().parents[1] / "histories"


def test_every_patch_constant_is_listed_once():
    declared = set()
    for path in Path(workflows.__file__).parent.glob("*.py"):
        module = __import__(f"workflows.{path.stem}", fromlist=["_"])
        declared |= {f"workflows.{path.stem}.{name}" for name in vars(module) if name.endswith("_PATCH")}
    listed = [patch.constant for patch in PATCHES]
    assert sorted(listed) == sorted(declared) and len(set(listed)) == len(listed)


def test_each_patch_names_the_first_release_whose_histories_hold_its_marker():
    first: dict[str, str] = {}
    stored = sorted((path.name for path in HISTORIES.iterdir() if path.is_dir() and path.name[0].isdigit()),
                    key=release_key)
    # A patch of the coming release has no stored history yet: it names a release after every stored one.
    coming = [patch for patch in PATCHES if patch.release not in stored]
    assert all(release_key(patch.release) > release_key(stored[-1]) for patch in coming), coming
    for release in stored:
        for history in (HISTORIES / release).glob("*.json"):
            for event in json.loads(history.read_text()).get("events", []) if history.name != "manifest.json" else []:
                marker = event.get("markerRecordedEventAttributes")
                if marker and marker["markerName"] == "core_patch":
                    for payload in marker["details"]["patch-data"]["payloads"]:
                        first.setdefault(json.loads(base64.b64decode(payload["data"]))["id"], release)
    assert {patch.patch_id: patch.release for patch in PATCHES if patch not in coming} == first


# Stand-ins registered under the real type's name: one started by code from before any patch (no
# marker), one by code that knows the newest publish patch.
@workflow.defn(name="PublishPostWorkflow", sandboxed=False)
class PublishBeforeAnyPatch:
    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)


@workflow.defn(name="PublishPostWorkflow", sandboxed=False)
class PublishOfToday:
    @workflow.run
    async def run(self) -> None:
        workflow.patched("publish-prompt-retry-at-start")
        await workflow.wait_condition(lambda: False)


async def test_an_open_run_older_than_a_patch_keeps_it_and_one_that_knows_it_does_not(dev_env, settings):
    client, queue = dev_env.client, settings.task_queue
    old_id, new_id = f"old-{uuid.uuid4().hex[:8]}", f"new-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[PublishBeforeAnyPatch]):
        old = await client.start_workflow("PublishPostWorkflow", id=old_id, task_queue=queue,
                                          execution_timeout=timedelta(minutes=5))
        await wait_until(lambda: _started(old))
    async with Worker(client, task_queue=queue, workflows=[PublishOfToday]):
        new = await client.start_workflow("PublishPostWorkflow", id=new_id, task_queue=queue,
                                          execution_timeout=timedelta(minutes=5))
        await wait_until(lambda: _started(new))
    try:
        async def both_listed() -> bool:
            return _by_constant(await check_patches(client, task_queue=queue))[
                "workflows.posts.PROMPT_RETRY_PATCH"].open_runs == 2

        await wait_until(both_listed)  # visibility lags the start a little
        statuses = _by_constant(await check_patches(client, task_queue=queue))
        for constant in ("workflows.posts.PROMPT_RETRY_PATCH", "workflows.posts.PROMPT_RETRY_AT_START_PATCH"):
            assert statuses[constant].older_runs == 1 and statuses[constant].examples == [old_id]
            assert not statuses[constant].may_retire
        assert statuses["workflows.outbox.COMPLETE_IN_HANDLER_PATCH"].may_retire  # no open delivery on this queue

        code, out, err = await cli("patches", "check", "--task-queue", queue, "--json",
                                   env=cli_env(settings, dev_env))
        assert code == 0, err
        answer = {row["constant"]: row for row in json.loads(out)["patches"]}
        assert answer["workflows.posts.PROMPT_RETRY_PATCH"]["may_retire"] is False
        assert answer["workflows.posts.PROMPT_RETRY_PATCH"]["examples"] == [old_id]
    finally:
        for handle in (old, new):
            await handle.terminate("test over")


async def test_a_task_queue_that_could_break_the_query_is_refused(dev_env):
    try:
        await check_patches(dev_env.client, task_queue='x" OR WorkflowType="y')
    except BadInput as error:
        assert "spaces" in str(error) or "quote" in str(error)
    else:
        raise AssertionError("the task queue was not refused")
    try:
        await check_patches(dev_env.client, task_queue='x"y')
    except BadInput as error:
        assert "quote" in str(error)
    else:
        raise AssertionError("the task queue was not refused")


async def _started(handle) -> bool:
    """The run's first workflow task is done: its patch marker (or its lack of one) is in its history."""
    async for event in handle.fetch_history_events():
        if event.HasField("workflow_task_completed_event_attributes"):
            return True
    return False


def _by_constant(statuses):
    return {status.patch.constant: status for status in statuses}
