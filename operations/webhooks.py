"""The provider's pushed events: their registration and status, and the inbox's workflow.

The receiver that takes the pushes is frontdoor/receiver.py, served by `pressroom serve`.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from temporalio.common import WorkflowIDConflictPolicy

from activities.webhooks import INBOX_WORKFLOW_ID, InboxInput
from pressroom import database
from pressroom.errors import BadInput
from pressroom.providers.wiring import provider_from_settings, push_path
from pressroom.settings import Settings, get_settings
from workflows.webhooks import WebhookInboxWorkflow

LINK_SOURCE = "unsubscribe-link"  # the members' links' refusals, counted beside the provider's in webhook_refusals


# --- the inbox's workflow ---------------------------------------------------------------------------

async def ensure_inbox_applier(client, settings: Settings) -> None:
    """The inbox workflow runs (one per namespace and task queue); an existing run is kept."""
    await client.start_workflow(WebhookInboxWorkflow.run, InboxInput(),
                                id=f"{INBOX_WORKFLOW_ID}-{settings.task_queue}", task_queue=settings.task_queue,
                                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                                static_summary="Apply pushed delivery events from the webhook inbox")


# --- registration and status -------------------------------------------------------------------------

def webhook_url(url: str, path: str = "/webhooks/<provider>") -> str:
    """A URL the provider can call (`path`: the configured provider's, for the examples): https
    (plain http only to this machine), a host, no credentials, no spaces, at most 2,000 characters.
    The signature does not cover the event: over plain http anyone on the way could read an
    envelope and use it for another event first."""
    parts = urlsplit(url) if isinstance(url, str) and len(url) <= 2000 and url.isprintable() and " " not in url \
        else None
    try:
        port_ok = parts is not None and (parts.port is None or parts.port > 0)
    except ValueError:
        port_ok = False
    if parts is None or not port_ok or parts.scheme not in ("http", "https") or not parts.hostname \
            or parts.username or parts.password:
        # Not echoed: it may hold a password.
        raise BadInput(f"--url is not an absolute https URL without credentials (e.g. https://hooks.example.com{path})")
    if parts.scheme == "http":
        host = parts.hostname
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if not loopback:
            raise BadInput(f"--url must be https:// (plain http:// only for this machine: 127.0.0.1, ::1, localhost), "
                           f"e.g. https://hooks.example.com{path}")
    return url


async def webhooks_setup(url: str, settings: Settings | None = None) -> dict[str, str]:
    """Register `url` for every kind Pressroom applies; answers kind → created / added / unchanged."""
    settings = settings or get_settings()
    url = webhook_url(url, push_path(settings))
    provider = provider_from_settings(settings)
    try:
        return await provider.register_push(url)
    finally:
        await provider.aclose()


async def webhooks_status(settings: Settings | None = None) -> dict:
    """The last event received and applied per kind, the inbox's depth and age, refusals by reason,
    and the pushed events set aside."""
    settings = settings or get_settings()
    async with database.connection(settings.require_database()) as conn:
        kinds = await conn.fetch("SELECT kind, applied, last_received_at, last_applied_at FROM webhook_kinds "
                                 "WHERE provider = $1 ORDER BY kind", settings.email_provider)
        inbox = await conn.fetchrow("SELECT count(*) AS depth, extract(epoch FROM now() - min(received_at)) AS age "
                                    "FROM webhook_inbox")
        refusals = await conn.fetch("SELECT reason, count, last_at FROM webhook_refusals WHERE provider = $1 "
                                    "ORDER BY count DESC, reason", settings.email_provider)
        set_aside = await conn.fetchval("SELECT count(*) FROM delivery_events_rejected WHERE source = 'push'")
        link_refusals = await conn.fetch("SELECT reason, count, last_at FROM webhook_refusals WHERE provider = $1 "
                                         "ORDER BY count DESC, reason", LINK_SOURCE)
    return {"kinds": {r["kind"]: {"applied": r["applied"], "last_received_at": r["last_received_at"],
                                  "last_applied_at": r["last_applied_at"]} for r in kinds},
            "inbox": {"depth": inbox["depth"], "oldest_seconds": round(float(inbox["age"]), 3)
                      if inbox["age"] is not None else None},
            "refusals": {r["reason"]: {"count": r["count"], "last_at": r["last_at"]} for r in refusals},
            "set_aside": set_aside,
            "link_refusals": {r["reason"]: {"count": r["count"], "last_at": r["last_at"]} for r in link_refusals}}
