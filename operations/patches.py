"""Which workflow patches may be retired: asked of Temporal, not assumed (docs/production.md, "Patches").

A run started before the release that introduced a patch replays that patch's old branch, so the
branch stays while such a run is open. Temporal says which runs are open; each run's history says
which code started it: a run whose history holds the patch's marker, or the marker of any patch of
the same release or a later one, ran code that knows the patch. Any other open run of the type is
counted as older than the patch (a run that has not yet reached the patch's call is counted too:
the check errs on the side of keeping a branch).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import datetime

from pressroom.errors import BadInput, PressroomError
from pressroom.inputs import entity_id
from workflows import newsletter, newsletter_sending, outbox, posts


@dataclass(frozen=True)
class Patch:
    constant: str  # where the code declares it: module.CONSTANT
    patch_id: str  # what histories hold
    workflow_type: str
    release: str  # the first release whose workers wrote its marker


# Every patch of every workflow, with the release that introduced it (the stored histories of that
# release are the first to hold its marker: tests/histories/<version>/).
PATCHES = [
    Patch("workflows.newsletter.CONFIRM_UNCERTAIN_PATCH", newsletter.CONFIRM_UNCERTAIN_PATCH,
          "SendNewsletterWorkflow", "0.2.0"),
    Patch("workflows.newsletter.PROVIDER_LIMITS_PATCH", newsletter.PROVIDER_LIMITS_PATCH,
          "SendNewsletterWorkflow", "0.2.0"),
    Patch("workflows.newsletter.PIPELINED_BATCHES_PATCH", newsletter.PIPELINED_BATCHES_PATCH,
          "SendNewsletterWorkflow", "0.3.0"),
    Patch("workflows.newsletter.PROVIDER_OUTAGE_PATCH", newsletter.PROVIDER_OUTAGE_PATCH,
          "SendNewsletterWorkflow", "0.5.0"),
    Patch("workflows.newsletter.CANCEL_PATCH", newsletter.CANCEL_PATCH, "SendNewsletterWorkflow", "0.7.0"),
    Patch("workflows.newsletter.CONFIRM_ASIDE_PATCH", newsletter.CONFIRM_ASIDE_PATCH,
          "SendNewsletterWorkflow", "0.9.0"),
    Patch("workflows.newsletter_sending.PROVIDER_PROBE_PATCH", newsletter_sending.PROVIDER_PROBE_PATCH,
          "SendNewsletterWorkflow", "0.9.0"),
    Patch("workflows.newsletter.CANCEL_WHILE_LOCKING_PATCH", newsletter.CANCEL_WHILE_LOCKING_PATCH,
          "SendNewsletterWorkflow", "0.9.0"),
    Patch("workflows.newsletter.REPUTATION_PAUSE_PATCH", newsletter.REPUTATION_PAUSE_PATCH,
          "SendNewsletterWorkflow", "0.9.0"),
    Patch("workflows.newsletter.SEND_GROUPS_PATCH", newsletter.SEND_GROUPS_PATCH,
          "SendNewsletterWorkflow", "0.10.0"),
    Patch("workflows.newsletter_sending.ACCOUNT_ROOM_PATCH", newsletter_sending.ACCOUNT_ROOM_PATCH,
          "SendNewsletterWorkflow", "0.12.0"),
    Patch("workflows.outbox.CONFIRM_UNCERTAIN_PATCH", outbox.CONFIRM_UNCERTAIN_PATCH,
          "DeliverOutboxEntryWorkflow", "0.2.0"),
    Patch("workflows.outbox.COMPLETE_LOCALLY_PATCH", outbox.COMPLETE_LOCALLY_PATCH,
          "DeliverOutboxEntryWorkflow", "0.3.0"),
    Patch("workflows.outbox.COMPLETE_IN_HANDLER_PATCH", outbox.COMPLETE_IN_HANDLER_PATCH,
          "DeliverOutboxEntryWorkflow", "0.6.0"),
    Patch("workflows.outbox.WELCOME_AUTOMATION_PATCH", outbox.WELCOME_AUTOMATION_PATCH,
          "DeliverOutboxEntryWorkflow", "0.12.0"),
    Patch("workflows.posts.PROMPT_RETRY_PATCH", posts.PROMPT_RETRY_PATCH, "PublishPostWorkflow", "0.2.0"),
    Patch("workflows.posts.PROMPT_RETRY_AT_START_PATCH", posts.PROMPT_RETRY_AT_START_PATCH,
          "PublishPostWorkflow", "0.4.0"),
    Patch("workflows.posts.RESCHEDULE_REVIVES_PATCH", posts.RESCHEDULE_REVIVES_PATCH, "PublishPostWorkflow", "0.10.0"),
]
PATCH_MARKER = "core_patch"  # the marker Temporal's SDKs record for workflow.patched
HISTORIES_AT_ONCE = 8


@dataclass
class PatchStatus:
    patch: Patch
    open_runs: int = 0
    older_runs: int = 0  # open runs that may still replay the old branch
    oldest_started: datetime | None = None
    examples: list[str] = field(default_factory=list)  # a few workflow ids, to open in the Web UI

    @property
    def may_retire(self) -> bool:
        return self.older_runs == 0

    def as_dict(self) -> dict:
        return {"constant": self.patch.constant, "patch_id": self.patch.patch_id,
                "workflow_type": self.patch.workflow_type, "release": self.patch.release,
                "open_runs": self.open_runs, "older_runs": self.older_runs,
                "oldest_started": self.oldest_started, "examples": self.examples, "may_retire": self.may_retire}


def release_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def patch_ids_in(events) -> set[str]:
    """The patch ids a run's history records (each marker's `patch-data`, JSON written by the SDK)."""
    found = set()
    for event in events:
        if not event.HasField("marker_recorded_event_attributes"):
            continue
        marker = event.marker_recorded_event_attributes
        if marker.marker_name != PATCH_MARKER or "patch-data" not in marker.details:
            continue
        for payload in marker.details["patch-data"].payloads:
            try:
                found.add(json.loads(payload.data)["id"])
            except (ValueError, KeyError, TypeError):
                continue  # not a marker this check can read: the run counts as older
    return found


def knows_patch(patch: Patch, recorded: set[str]) -> bool:
    """Whether a run that recorded these patch ids ran code that knows `patch`."""
    return any(other.patch_id in recorded for other in PATCHES
               if other.workflow_type == patch.workflow_type
               and release_key(other.release) >= release_key(patch.release))


async def check_patches(client, *, task_queue: str | None = None, limit: int = 10_000) -> list[PatchStatus]:
    """Per patch, the open runs of its workflow type that may still replay its old branch.

    Only runs on `task_queue` when given. Reads at most `limit` open runs per workflow type (each
    run's history once); more raises, since a partial answer could say a patch may go when it may not."""
    if task_queue is not None:
        entity_id(task_queue, "task queue")
        if any(quote in task_queue for quote in "\"'\\"):  # it goes into a visibility query's string
            raise BadInput(f"the task queue {task_queue!r} holds a quote or a backslash")
    statuses = [PatchStatus(patch) for patch in PATCHES]
    slots = asyncio.Semaphore(HISTORIES_AT_ONCE)
    for workflow_type in sorted({patch.workflow_type for patch in PATCHES}):
        runs = []
        query = f'WorkflowType="{workflow_type}" AND ExecutionStatus="Running"'
        if task_queue:
            query += f' AND TaskQueue="{task_queue}"'
        async for run in client.list_workflows(query):
            runs.append(run)
            if len(runs) > limit:
                raise PressroomError(f"more than {limit:,} open {workflow_type} runs: raise --limit to check them all")

        async def recorded(run) -> set[str]:
            async with slots:
                handle = client.get_workflow_handle(run.id, run_id=run.run_id)
                return patch_ids_in([event async for event in handle.fetch_history_events()])

        histories = await asyncio.gather(*(recorded(run) for run in runs))
        for status in statuses:
            if status.patch.workflow_type != workflow_type:
                continue
            status.open_runs = len(runs)
            for run, ids in zip(runs, histories, strict=True):
                if knows_patch(status.patch, ids):
                    continue
                status.older_runs += 1
                if status.oldest_started is None or run.start_time < status.oldest_started:
                    status.oldest_started = run.start_time
                if len(status.examples) < 3:
                    status.examples.append(run.id)
    return statuses
