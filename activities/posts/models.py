"""Scheduled posts' workflow id and the models their workflow and activities take and answer."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

PUBLISH_WORKFLOW_PREFIX = "post-publish-"


def publish_workflow_id(post_id: str) -> str:
    """The post's workflow id: its idempotency key, one timer per post."""
    return f"{PUBLISH_WORKFLOW_PREFIX}{post_id}"


class PublishPostInput(BaseModel):
    post_id: str
    publish_at: datetime
    lead_seconds: float = 10.0
    retries: int = 30  # a 503 is retried every 5 s, 30 times, then the run fails visibly
    retry_seconds: float = 5.0
    # How soon a worker that dies while the publish waits is noticed (its activity's heartbeat
    # timeout); runs started before this field existed use 2 s.
    heartbeat_seconds: float | None = None


class RescheduleInput(BaseModel):
    publish_at: datetime


class PublishPostActivityInput(BaseModel):
    post_id: str
    publish_at: datetime
    lead_seconds: float
    # Set by runs that retry a dead worker's attempt at once: a failure raised here then waits this
    # long before the next attempt (a steady PRESSROOM_PUBLISH_RETRY_SECONDS, as an unavailable
    # database is tried again), instead of the retry policy's interval.
    retry_seconds: float | None = None


class PublishResult(BaseModel):
    status: str  # published | moved | not_found | not_scheduled
    publish_at: datetime | None = None  # the post's time now (for "moved")
    email_id: str | None = None  # a newsletter email left unsent, to send after publishing
    lateness_ms: float | None = None
    newsletter_note: str | None = None  # why the post's newsletter will not go out, when it will not


class ReconcileResult(BaseModel):
    started_or_moved: int
    stopped: int
