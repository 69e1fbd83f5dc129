"""What crosses the Temporal boundary between SendNewsletterWorkflow and the newsletter activities.

Field names are held by stored histories: a renamed field still accepts its old name (AliasChoices).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import AliasChoices, BaseModel, Field


class LockEmailInput(BaseModel):
    email_id: str
    holder: str  # the first run id of the workflow chain that takes the lock (stored with its workflow id)


class SendPlan(BaseModel):
    """The settings a send runs with, read once by an activity so the workflow stays pure."""

    batch_size: int  # the setting when the send began; batches are sized by sending_limits.batch_sizes
    concurrency: int
    # Attempts after the first, and the pause between them, of a send the provider did not take.
    provider_retries: int = Field(validation_alias=AliasChoices("provider_retries", "mailgun_retries"))
    provider_retry_seconds: float = Field(validation_alias=AliasChoices("provider_retry_seconds",
                                                                       "mailgun_retry_seconds"))
    delivery_window_seconds: int
    send_caps: bool = False  # an hourly or daily cap applies: each batch is admitted under it first
    # The provider unreachable after the retries: wait this long, doubling up to the longest, and go on.
    outage_first_wait_seconds: float = 60.0
    outage_max_wait_seconds: float = 3600.0
    # The provider's name in what the run says to people; plans stored without it were Mailgun's.
    provider_title: str = "Mailgun"
    # While the provider is unreachable, how often an authenticated read looks for its return.
    provider_probe_seconds: float = 20.0
    # How often, at most, the email's early hard-bounce and complaint rates are read while it sends.
    reputation_check_seconds: float = 30.0
    # The heartbeat timeout of the send's long activities; plans stored without it had 15 s.
    heartbeat_seconds: float | None = None


class EmailLock(BaseModel):
    acquired: bool
    reason: str = ""  # why not acquired; or, acquired from a sender proved gone, whose lock was taken
    post_id: str | None = None
    plan: SendPlan | None = None


class CreateBatchesInput(BaseModel):
    email_id: str
    retry_failed: bool  # a new send of a failed email sends its failed batches again
    # One chunk of batches per call, each committed whole, until `BatchCounts.creating` is False:
    # sending starts while the rest are written. False (runs started before chunks): all at once.
    chunked: bool = False


class BatchCounts(BaseModel):
    batches_total: int
    batches_submitted: int
    batches_failed: int
    recipients_total: int
    recipients_submitted: int
    batches_uncertain: int = 0  # failed batches whose last send may have reached the provider
    # More batches are still to be written (chunked creation); the totals are then the planned ones.
    creating: bool = False


class ListUnsentBatchesInput(BaseModel):
    email_id: str
    limit: int


class SendBatchInput(BaseModel):
    batch_id: str
    delivery_time: datetime | None = None
    # Whether the workflow may wait on a timer for an uncertain batch's events (BatchSent.confirm_in_seconds);
    # False: an uncertain batch not found is sent again at once (runs whose histories have no such timer).
    may_wait_to_confirm: bool = Field(default=False, validation_alias=AliasChoices("may_wait_to_confirm", "confirm"))


class SendBatchesInput(BaseModel):
    """Several batches of one email sent by one activity, each as `send_batch` sends it."""

    batches: list[SendBatchInput]


class BatchSent(BaseModel):
    batch_id: str
    recipients: int
    provider_id: str
    reconciled: bool  # an earlier attempt had reached the provider; nothing was sent again
    # Set when an uncertain send is not in the provider's events yet: nothing was sent; look again then.
    confirm_in_seconds: float | None = None
    # New batches of this email the send wrote: recipients the provider refused for the moment, to
    # send again (`recipients` counts only those that stayed in this batch). The workflow adds them
    # to its total.
    requeued: int = 0


class BatchesSent(BaseModel):
    sent: list[BatchSent]  # each accepted (or found accepted by an earlier attempt): nothing to do
    # Not settled by this call (an error, an uncertain send, a look-up to wait for, a wait to hold):
    # the workflow sends each on its own with `send_batch`, where its retries, look-ups and waits are.
    alone: list[str] = []


class FailBatchInput(BaseModel):
    batch_id: str
    status_code: int | None
    message: str


class ProbeProviderInput(BaseModel):
    """Wait for the provider's return: look every `every_seconds`, answer once it is reachable and
    `at_least_seconds` have passed, or after `at_most_seconds` with `back` False."""

    every_seconds: float
    at_least_seconds: float = 0.0
    at_most_seconds: float = 600.0


class ProviderBack(BaseModel):
    back: bool
    detail: str = ""  # what the last look said (no address, no key)


class ReadReputationInput(BaseModel):
    email_id: str


class EmailReputation(BaseModel):
    """An email's early answers: how many recipients the provider has answered for (delivered or
    failed for good), how many of them hard-bounced or complained, and why to pause, if at all."""

    answered: int
    hard_bounced: int
    complained: int
    pause_reason: str = ""


class RecordPauseInput(BaseModel):
    email_id: str
    reason: str  # empty: the pause is over


class FinishEmailInput(BaseModel):
    email_id: str
    # Set when an operator cancelled the send (`newsletter cancel`): who, and when the run heard it.
    cancelled_by: str | None = None
    cancelled_at: datetime | None = None


class EmailOutcome(BaseModel):
    email_id: str
    status: str  # submitted | failed | skipped | cancelled
    message: str = ""
    counts: BatchCounts | None = None
