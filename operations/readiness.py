"""What running Pressroom needs beyond reachable services, for `pressroom check`: workers polling
the task queue, the schedules and the outbox relay present, the webhook inbox draining.

Each check answers one line that names what is missing and what starts it. A `pressroom worker`
creates the schedules and starts the relay and the inbox's workflow when it starts.
"""

from __future__ import annotations

from temporalio.service import RPCError, RPCStatusCode

from activities.webhooks import INBOX_WORKFLOW_ID
from operations.analytics import analytics_schedule_id
from operations.check import CheckResult
from operations.common import running
from operations.deliverability import check_reputation, check_senders
from operations.posts import reconcile_schedule_id
from operations.waiting import answers, fresh_pollers, no_answer_message
from pressroom import database
from pressroom.settings import Settings
from workflows.outbox import RELAY_WORKFLOW_ID

START_A_WORKER = "start one with `pressroom worker`"
# Pushed events older than this still in the inbox: it is not being applied.
INBOX_STALE_SECONDS = 300


async def check_workers(client, settings: Settings) -> CheckResult:
    """Workers listed as polling the queue, and one of them answering: Temporal lists a worker for
    up to a minute after it died (its last poll lingers), so the outbox relay, which runs on the
    queue for as long as a worker does, is asked a query: no answer within seconds means no worker."""
    queue = settings.task_queue
    workflows = await fresh_pollers(client, queue)
    activities = await fresh_pollers(client, queue, activities=True)
    if workflows is None or activities is None:
        return CheckResult("Workers", False, f"Temporal could not say who polls task queue {queue}")
    if not workflows or not activities:
        missing = "workflow" if not workflows else "activity"
        return CheckResult("Workers", False, f"no worker is polling task queue {queue} for {missing} tasks; "
                                             f"{START_A_WORKER}")
    if await answers(client, f"{RELAY_WORKFLOW_ID}-{queue}") is False:
        return CheckResult("Workers", False, no_answer_message(queue))
    count = len(set(workflows) | set(activities))
    return CheckResult("Workers", True, f"{count} worker{'s' if count != 1 else ''} polling task queue {queue}")


async def check_schedules(client, settings: Settings) -> CheckResult:
    """This site's schedules (ids naming its task queue, site_schedule_id) present, not paused, and on
    its task queue: one on another queue runs another site's work, or this site's on a queue its
    workers do not poll, and this site's never runs."""
    ids = (analytics_schedule_id(settings), reconcile_schedule_id(settings))
    missing, paused, elsewhere = [], [], []
    for schedule_id in ids:
        try:
            description = await client.get_schedule_handle(schedule_id).describe()
        except RPCError as error:
            if error.status != RPCStatusCode.NOT_FOUND:
                raise
            missing.append(schedule_id)
            continue
        if description.schedule.state.paused:
            paused.append(schedule_id)
        queue = getattr(description.schedule.action, "task_queue", settings.task_queue)
        if queue != settings.task_queue:
            elsewhere.append(f"{schedule_id} runs on task queue {queue}")
    if missing:
        return CheckResult("Schedules", False, f"{', '.join(missing)} missing; a `pressroom worker` creates "
                                               "them when it starts")
    if paused:
        return CheckResult("Schedules", False, f"{', '.join(paused)} paused: nothing runs on them")
    if elsewhere:
        return CheckResult("Schedules", False, f"{'; '.join(elsewhere)}, not {settings.task_queue}: this site's "
                                               f"work does not run on them (`pressroom analytics schedule` moves "
                                               f"{ids[0]} here; delete {ids[1]} and a worker here makes it again)")
    return CheckResult("Schedules", True, f"{ids[0]} and {ids[1]} present on task queue {settings.task_queue}")


async def check_relay(client, settings: Settings) -> CheckResult:
    workflow_id = f"{RELAY_WORKFLOW_ID}-{settings.task_queue}"
    if not await running(client.get_workflow_handle(workflow_id)):
        return CheckResult("Outbox relay", False, f"{workflow_id} is not running; a `pressroom worker` starts it")
    return CheckResult("Outbox relay", True, f"{workflow_id} running")


async def check_inbox(client, settings: Settings) -> CheckResult:
    workflow_id = f"{INBOX_WORKFLOW_ID}-{settings.task_queue}"
    async with database.connection(settings.require_database()) as conn:
        inbox = await conn.fetchrow("SELECT count(*) AS depth, extract(epoch FROM now() - min(received_at)) AS age "
                                    "FROM webhook_inbox")
    waiting = (f"{inbox['depth']:,} pushed event{'s' if inbox['depth'] != 1 else ''} waiting, the oldest for "
               f"{float(inbox['age']):.0f} s" if inbox["depth"] else "empty")
    if not await running(client.get_workflow_handle(workflow_id)):
        return CheckResult("Webhook inbox", False, f"{waiting}; {workflow_id} is not running to apply them "
                                                   "(a `pressroom worker` starts it)")
    if inbox["depth"] and float(inbox["age"]) > INBOX_STALE_SECONDS:
        return CheckResult("Webhook inbox", False, f"{waiting}: not draining (is a worker running?)")
    return CheckResult("Webhook inbox", True, f"{waiting}; {workflow_id} running")


RUNNING_CHECKS = (("Workers", check_workers), ("Schedules", check_schedules), ("Outbox relay", check_relay),
                  ("Webhook inbox", check_inbox), ("Senders", check_senders), ("Reputation", check_reputation))
