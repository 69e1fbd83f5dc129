"""Retry policies that more than one workflow uses."""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

# Steps that only read and write PostgreSQL: from 2 s, doubling to 2 minutes, 20 attempts, about
# half an hour. A database restart or failover has that long to come back; a statement still failing
# after it is more likely wrong than waiting, and its run then fails visibly (the email is recorded
# `failed`, the outbox entry `aborted` by the watchdog) instead of retrying unseen for ever.
DATABASE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=2), backoff_coefficient=2.0,
                             maximum_interval=timedelta(minutes=2), maximum_attempts=20)
