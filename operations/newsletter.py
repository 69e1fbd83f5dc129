"""Newsletter sending, client side: start the send of an email, follow its progress."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from operations.common import temporal_client
from pressroom.errors import NotFound, PressroomError
from pressroom.settings import Settings, get_settings


@dataclass(frozen=True)
class NewsletterStart:
    workflow_id: str
    run_id: str
    started: bool  # False: an existing run was found, and `message` says which
    message: str


async def start_newsletter(email_id: str, *, client=None, settings: Settings | None = None) -> NewsletterStart:
    """Start the send of an email, or find the run that already sends or sent it."""
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.common import WorkflowIDConflictPolicy
    from temporalio.exceptions import WorkflowAlreadyStartedError
    from temporalio.service import RPCError

    from pressroom import database
    from workflows.newsletter import SendNewsletterInput, SendNewsletterWorkflow, newsletter_workflow_id

    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        status = await conn.fetchval("SELECT status FROM emails WHERE id = $1", email_id)
    if status is None:
        raise NotFound(f"email {email_id} does not exist")
    client = client or await temporal_client(settings)
    workflow_id = newsletter_workflow_id(email_id)
    if status == "submitted":
        try:
            last = await client.get_workflow_handle(workflow_id).describe()
            by = f" by run {last.run_id} ({last.status.name.lower() if last.status else 'unknown'})"
        except RPCError:
            by = ""
        return NewsletterStart(workflow_id, "", False, f"email {email_id} was already sent{by}; nothing to send")
    try:
        handle = await client.start_workflow(
            SendNewsletterWorkflow.run, SendNewsletterInput(email_id=email_id), id=workflow_id,
            task_queue=settings.task_queue, id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            static_summary=f"Send email {email_id} to its newsletter's members")
    except WorkflowAlreadyStartedError as error:
        running = await client.get_workflow_handle(workflow_id).describe()
        if running.status == WorkflowExecutionStatus.RUNNING:
            return NewsletterStart(workflow_id, error.run_id or running.run_id, False,
                                   f"{workflow_id} is already running (run {running.run_id}); not starting another")
        raise
    return NewsletterStart(workflow_id, handle.first_execution_run_id or handle.result_run_id or "", True,
                           f"started {workflow_id}")


async def follow_newsletter(workflow_id: str, *, client=None, on_progress=None, poll_seconds: float = 0.5):
    """Query the run's progress until it ends; returns its outcome (following continue-as-new)."""
    from temporalio.client import WorkflowFailureError
    from temporalio.service import RPCError

    from workflows.newsletter import SendNewsletterWorkflow

    client = client or await temporal_client()
    handle = client.get_workflow_handle_for(SendNewsletterWorkflow.run, workflow_id)
    result = asyncio.ensure_future(handle.result())
    try:
        while not result.done():
            try:
                progress = await handle.query(SendNewsletterWorkflow.progress)
                if on_progress:
                    on_progress(progress)
            except RPCError:
                pass  # between two runs of a continue-as-new, or before the first task: ask again
            await asyncio.wait([result], timeout=poll_seconds)
        return result.result()
    except WorkflowFailureError as error:
        cause = error.cause
        raise PressroomError(f"{workflow_id} failed: {getattr(cause, 'message', None) or cause or error}") from None
    finally:
        result.cancel()
