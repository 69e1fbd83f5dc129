"""cause_of: the one reading of a Temporal failure's cause, in workflows and the CLI."""

from __future__ import annotations

from temporalio.exceptions import ActivityError, ApplicationError, RetryState, TimeoutError, TimeoutType

from pressroom.errors import FailureCause, cause_of


def activity_error(cause: BaseException) -> ActivityError:
    error = ActivityError("Activity task failed", scheduled_event_id=5, started_event_id=6, identity="w",
                          activity_type="send_batch", activity_id="1", retry_state=RetryState.MAXIMUM_ATTEMPTS_REACHED)
    error.__cause__ = cause
    return error


def test_an_application_error_gives_its_message_type_and_details():
    cause = cause_of(activity_error(ApplicationError("Mailgun refused", 400, type="MailgunRejected")))
    assert cause == FailureCause("Mailgun refused", "MailgunRejected", (400,))
    assert str(cause) == "MailgunRejected: Mailgun refused"


def test_a_timeout_gives_its_own_words_and_no_type():
    timeout = TimeoutError("activity Heartbeat timeout", type=TimeoutType.HEARTBEAT, last_heartbeat_details=[])
    cause = cause_of(activity_error(timeout))
    assert cause == FailureCause("activity Heartbeat timeout") and str(cause) == "activity Heartbeat timeout"


def test_an_error_without_a_cause_gives_its_own_words():
    assert cause_of(RuntimeError("boom")).message == "boom"


def test_a_run_that_failed_because_an_activity_did_gives_the_activitys_own_words():
    from temporalio.client import WorkflowFailureError

    failed = WorkflowFailureError(cause=activity_error(ApplicationError("Unexpected test error", type="RaiseError")))
    assert cause_of(failed) == FailureCause("Unexpected test error", "RaiseError")
