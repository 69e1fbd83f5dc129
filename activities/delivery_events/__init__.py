"""Applying delivery events, whichever way they came (a polled page, a pushed webhook): one way.

Events arrive as provider JSON; `EventBatch.add` turns each into a DeliveryEvent through the
provider's parser (the port's `parse_event`) or sets it aside with its reason. `apply_batch` applies a batch in one
transaction together with the caller's own step (a cursor saved, inbox rows deleted), so what was
applied and where the caller stands commit together. Applying is idempotent and order-free: a time
takes the earliest event's, failures are one row per recipient whichever order their events come
in, complaints by (email, member), suppressions by address; an event seen again changes nothing.
An event PostgreSQL refuses all the same is found by halving the batch and set aside alone: one
poison event never holds the others back, and never comes back (`delivery_events_rejected`).

* `batch`: the events parsed and the events set aside, as the columns the statements take.
* `apply`: a batch applied in one transaction (times, failures, unsubscribes, complaints,
  suppressions, events set aside), a refused event found by halving.
* `leave`: one way to leave a newsletter, for the provider's unsubscribes, a member's link and an operator.
* `aggregates`: the emails and members whose events changed, recounted.
"""
