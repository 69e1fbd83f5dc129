"""Two starts of one email's send at once: the second finds the first's run, even when that run
closes between the second's refused start and its look (it never raises WorkflowAlreadyStartedError)."""

from __future__ import annotations

import uuid

from temporalio.exceptions import WorkflowAlreadyStartedError

from operations.newsletter import start_newsletter
from workflows.newsletter_models import newsletter_workflow_id

from .conftest import seed_email


class ClosesMeanwhile:
    """The real client, whose run of the workflow id closes right after a start is refused for it:
    the race of two starts with a run that ends in between, made certain."""

    def __init__(self, client) -> None:
        self.client = client

    def __getattr__(self, name: str):
        return getattr(self.client, name)

    async def start_workflow(self, *args, **kwargs):
        try:
            return await self.client.start_workflow(*args, **kwargs)
        except WorkflowAlreadyStartedError:
            await self.client.get_workflow_handle(kwargs["id"]).terminate(reason="the race's other run ends")
            raise


async def test_a_start_whose_rival_run_closed_meanwhile_reports_that_run(dev_env, settings, db):
    seeded = await seed_email(db, members=2)
    workflow_id = newsletter_workflow_id(seeded.email_id)
    rival = await dev_env.client.start_workflow("SendNewsletterWorkflow", id=workflow_id,
                                                task_queue=f"nobody-{uuid.uuid4().hex[:8]}")

    start = await start_newsletter(seeded.email_id, client=ClosesMeanwhile(dev_env.client), settings=settings)
    assert (start.started, start.run_id) == (False, rival.first_execution_run_id)
    assert start.message == (f"{workflow_id} was started by another start and ended meanwhile (run {start.run_id}, "
                             f"terminated); `pressroom newsletter status {seeded.email_id}` says how")
