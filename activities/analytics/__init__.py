"""Email analytics: page the email provider's events into email_recipients, then aggregate.

Each phase (latest opened, latest others, missing, backfills) keeps its own cursor in the jobs
table. A phase reads its window page by page and applies a batch of pages in one transaction that
also moves its cursor (the times and dirty marks in one statement; failures, unsubscribes and
complaints, when the batch has any, in a few more), while it reads the next pages; after each batch
it heartbeats the next page's URL, so a retry continues from the last batch applied. Applying is
idempotent: a time is set only when still empty, failures are one row per recipient, complaints by
(email, member), suppressions by address.

* `models`: the phases and their jobs, the inputs and results that cross the Temporal boundary.
* `run`: the run's activities: each phase's windows fetched, the aggregates, the run's summary.
* `window`: one window read page by page, applied batch by batch with its cursor.

The events themselves are applied by `activities/delivery_events/`, as pushed events are.
"""
