"""The transactional outbox, one module per stage of an entry.

Service → job → per-entry processing → handler, as in Ghost:

* `enqueue`: an entry written beside the domain change, in the caller's transaction.
* `relay`: due entries claimed and one DeliverOutboxEntryWorkflow started for each.
* `delivery`: the ledger asked first, the event type's handler run with the protocol's retries, the
  entry recorded succeeded or aborted; entries whose delivery run closed without finishing them.
* `welcome`: the handler of MemberCreatedEvent, the member's welcome email.
* `site_events`: the site's events (member.added, post.published, …), one entry per subscribed webhook.
* `site_webhook`: their handler, a signed POST to the webhook's target.
* `models`: the event types, and the inputs and results that cross the Temporal boundary.

The ledger is written before the outbox row, so a key that succeeded is never handled again. The
layers above enqueue and name deliveries through the names exported here.
"""

from activities.outbox import site_events
from activities.outbox.models import WELCOME_EMAIL_SLUGS, outbox_workflow_id
from pressroom.store.outbox import NOTIFY_CHANNEL, enqueue, enqueue_many, payload_digest

__all__ = ["NOTIFY_CHANNEL", "WELCOME_EMAIL_SLUGS", "enqueue", "enqueue_many", "outbox_workflow_id", "payload_digest",
           "site_events"]
