"""What crosses the Temporal boundary between SendNewsletterWorkflow and the newsletter activities.

Field names are held by stored histories: a renamed field keeps its old name as an alias.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

# The last detail of a send_batch failure that is an outage (Mailgun not reached, or asking to slow
# down), not a verdict on the batch: the workflow waits for Mailgun instead of failing it.
MAILGUN_UNREACHABLE = "mailgun-unreachable"


class LockEmailInput(BaseModel):
    email_id: str
    holder: str  # the first run id of the workflow chain that takes the lock (stored with its workflow id)


class SendPlan(BaseModel):
    """The settings a send runs with, read once by an activity so the workflow stays pure."""

    batch_size: int  # the setting when the send began; batches are sized by sending_limits.batch_sizes
    concurrency: int
    mailgun_retries: int
    mailgun_retry_seconds: float
    delivery_window_seconds: int
    send_caps: bool = False  # an hourly or daily cap applies: each batch is admitted under it first
    # Mailgun unreachable after the retries: wait this long, doubling up to the longest, and go on.
    outage_first_wait_seconds: float = 60.0
    outage_max_wait_seconds: float = 3600.0


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
    batches_uncertain: int = 0  # failed batches whose last send may have reached Mailgun
    # More batches are still to be written (chunked creation); the totals are then the planned ones.
    creating: bool = False


class ListUnsentBatchesInput(BaseModel):
    email_id: str
    limit: int


class SendBatchInput(BaseModel):
    batch_id: str
    delivery_time: datetime | None = None
    # The workflow waits on a timer when asked to (BatchSent.confirm_in_seconds). False: runs
    # started before that existed, for which an uncertain batch not found is resent at once.
    confirm: bool = False


class BatchSent(BaseModel):
    batch_id: str
    recipients: int
    provider_id: str
    reconciled: bool  # an earlier attempt had reached Mailgun; nothing was sent again
    # Set when an uncertain send is not in Mailgun's events yet: nothing was sent; look again then.
    confirm_in_seconds: float | None = None


class FailBatchInput(BaseModel):
    batch_id: str
    status_code: int | None
    message: str


class FinishEmailInput(BaseModel):
    email_id: str


class EmailOutcome(BaseModel):
    email_id: str
    status: str  # submitted | failed | skipped
    message: str = ""
    counts: BatchCounts | None = None
