"""Small untruths an operator met on day two: each number says what it claims."""

from __future__ import annotations

from temporalio.api.failure.v1 import Failure
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionResponse

from commands.newsletter import failure_words
from operations.answers import FailureReason
from operations.limits import sending_limits
from operations.newsletter import _waiting_words, retrying

from .conftest import seed_email
from .test_send import run_send


async def test_limits_show_counts_what_was_really_sent_today(db, mailgun, ts_worker):
    """No send caps are set, so no quota is reserved: sent_today still counts the accepted recipients."""
    client, settings = ts_worker
    before = {d["domain"]: d for d in await sending_limits(settings)}[settings.mailgun_domain]["sent_today"]
    seeded = await seed_email(db, members=1200)
    assert (await run_send(client, settings, seeded.email_id)).status == "submitted"
    [domain] = [d for d in await sending_limits(settings) if d["domain"] == settings.mailgun_domain]
    assert domain["sent_today"] - before == 1200 and domain["sent_this_hour"] >= 1200


def test_a_failure_code_is_said_once():
    failure = FailureReason(severity="temporary", code=452, enhanced_code="4.2.2",
                            message="4.2.2 The email account is over quota", n=1)
    assert failure_words(failure) == "452 4.2.2 The email account is over quota"
    assert failure_words(failure.model_copy(update={"message": "Mailbox full"})) == "452 4.2.2 Mailbox full"
    assert failure_words(failure.model_copy(update={"code": None, "enhanced_code": None, "message": "Not delivering"})
                         ) == "Not delivering"
    # Both codes at the message's start, as Mailgun words it: each once, on the dashboard as in the CLI.
    both = failure.model_copy(update={"message": "452 4.2.2 The email account is over quota"})
    assert failure_words(both) == both.words() == "452 4.2.2 The email account is over quota"


class Described:
    def __init__(self, *pending: PendingActivityInfo) -> None:
        self.raw_description = DescribeWorkflowExecutionResponse(pending_activities=list(pending))


def test_a_retried_last_step_is_what_the_send_waits_for():
    pending = PendingActivityInfo(attempt=4, last_failure=Failure(message="ConnectionDoesNotExistError: closed"))
    pending.activity_type.name = "finish_email"
    words = retrying(Described(pending))
    assert words == "finish_email to succeed: attempt 4 after ConnectionDoesNotExistError: closed"
    run = {"worker_polling": True, "worker_answering": True}
    assert _waiting_words(None, None, run, words) == words
    # A first attempt in flight is not a retry: the send just sends.
    first = PendingActivityInfo(attempt=1)
    first.activity_type.name = "send_batch"
    assert retrying(Described(first)) is None and _waiting_words(None, None, run, None) is None
