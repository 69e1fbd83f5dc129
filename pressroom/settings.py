"""Pressroom's configuration: environment variables read once into one settings object.

The variable names are a contract (docs/production.md "Configuration"): deployments set them. A
variable that is not set falls back to the development stack started by `pressroom dev up` when it
runs, and otherwise to the documented default; a value that is missing or malformed is one line
naming the variable.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import re
from email.headerregistry import AddressHeader, HeaderRegistry
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    AliasPath,
    BeforeValidator,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from temporalio.envconfig import ClientConfigProfile

from pressroom.codec import EncryptionKeyError, parse_keys

MAILGUN_MAX_RECIPIENTS = 1000  # Mailgun refuses a message with more recipients than this.
MAILGUN_US = "https://api.mailgun.net"
# The shortest retention of recipient rows: `check`'s rates read the last 30 days of them.
MIN_RETENTION_DAYS = 31


LogLevel = Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR"], BeforeValidator(lambda v: str(v).strip().upper())]


class ConfigurationError(Exception):
    """A setting is missing or malformed; the message is one line naming the variable."""


def project_home() -> Path:
    """Where the development stack keeps its data: PRESSROOM_HOME, else the nearest `.pressroom`
    folder here or above (as git finds `.git`: a command run from a subfolder of the project finds
    its running stack), else ./.pressroom."""

    if "PRESSROOM_HOME" in os.environ:
        return Path(os.environ["PRESSROOM_HOME"]).resolve()
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / ".pressroom").is_dir():
            return folder / ".pressroom"
    return here / ".pressroom"


def dev_stack_file() -> Path:
    return project_home() / "stack.json"


def read_dev_stack() -> dict[str, str]:
    """The addresses the running development stack wrote, or {} when it is not up."""
    try:
        return json.loads(dev_stack_file().read_text())
    except (FileNotFoundError, ValueError):
        return {}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    # --- the contract: docs/production.md "Configuration" ---
    database_url: str = Field(default="", validation_alias="DATABASE_URL")
    # Behind a pooler (docs/production.md "Behind a connection pooler"): `transaction` turns asyncpg's
    # named prepared statements off (read by pressroom/database.py from the same variable); the direct
    # URL is a PostgreSQL session of its own, for LISTEN, which a transaction pooler does not keep.
    database_pooler: Literal["none", "session", "transaction"] = Field(
        default="none", validation_alias="PRESSROOM_DATABASE_POOLER")
    database_direct_url: str = Field(default="", validation_alias="DATABASE_DIRECT_URL")
    temporal_address: str = Field(default="127.0.0.1:7233", validation_alias="TEMPORAL_ADDRESS")
    temporal_namespace: str = Field(default="default", validation_alias="TEMPORAL_NAMESPACE")
    task_queue: str = Field(default="pressroom", validation_alias="PRESSROOM_TASK_QUEUE")
    mailgun_api_key: SecretStr = Field(default=SecretStr(""), validation_alias="MAILGUN_API_KEY")
    mailgun_domain: str = Field(default="", validation_alias="MAILGUN_DOMAIN")
    mailgun_base_url: str = Field(default=MAILGUN_US, validation_alias="MAILGUN_BASE_URL")
    # The email provider; each one's own settings live in its package (pressroom/providers/<name>/).
    email_provider: Literal["mailgun", "ses"] = Field(default="mailgun", validation_alias="PRESSROOM_EMAIL_PROVIDER")

    # --- Temporal connection for clusters and Temporal Cloud ---
    # The SDK's standard client settings (temporalio.envconfig): these variables, and under them the
    # profile TEMPORAL_PROFILE of the file TEMPORAL_CONFIG_FILE (see `load_settings`).
    temporal_api_key: SecretStr = Field(default=SecretStr(""), validation_alias="TEMPORAL_API_KEY")
    temporal_tls: bool = Field(default=False, validation_alias="TEMPORAL_TLS")
    temporal_tls_client_cert: str = Field(default="", validation_alias="TEMPORAL_TLS_CLIENT_CERT_PATH")
    temporal_tls_client_key: str = Field(default="", validation_alias="TEMPORAL_TLS_CLIENT_KEY_PATH")
    temporal_tls_server_ca_cert: str = Field(default="", validation_alias="TEMPORAL_TLS_SERVER_CA_CERT_PATH")
    temporal_tls_server_name: str = Field(default="", validation_alias="TEMPORAL_TLS_SERVER_NAME")
    # Pressroom's own names for the client certificate, from before the standard ones; they still win.
    temporal_tls_cert: str = Field(default="", validation_alias="TEMPORAL_TLS_CERT")
    temporal_tls_key: str = Field(default="", validation_alias="TEMPORAL_TLS_KEY")

    # --- newsletter sending ---
    batch_size: int = Field(default=MAILGUN_MAX_RECIPIENTS, ge=1, validation_alias="PRESSROOM_BATCH_SIZE")
    send_concurrency: int = Field(default=2, ge=1, le=100, validation_alias="PRESSROOM_SEND_CONCURRENCY")
    # The send policy, the same for every provider (the PRESSROOM_MAILGUN_ names still read, deprecated).
    provider_retries: int = Field(default=6, ge=0, validation_alias=AliasChoices(
        "PRESSROOM_PROVIDER_RETRIES", "PRESSROOM_MAILGUN_RETRIES"))
    provider_retry_seconds: float = Field(default=10.0, gt=0, validation_alias=AliasChoices(
        "PRESSROOM_PROVIDER_RETRY_SECONDS", "PRESSROOM_MAILGUN_RETRY_SECONDS"))
    # The provider unreachable (no connection, a request never written, 429) after the retries above:
    # the send waits on a durable timer, from the first wait doubling to the longest, and carries on
    # by itself when the provider answers again. Only a refusal that will not change fails a batch.
    provider_outage_first_wait_seconds: float = Field(default=60.0, gt=0, validation_alias=AliasChoices(
        "PRESSROOM_PROVIDER_OUTAGE_FIRST_WAIT_SECONDS", "PRESSROOM_MAILGUN_OUTAGE_FIRST_WAIT_SECONDS"))
    provider_outage_max_wait_seconds: float = Field(default=3600.0, gt=0, validation_alias=AliasChoices(
        "PRESSROOM_PROVIDER_OUTAGE_MAX_WAIT_SECONDS", "PRESSROOM_MAILGUN_OUTAGE_MAX_WAIT_SECONDS"))
    mailgun_timeout_seconds: float = Field(default=30.0, gt=0, validation_alias="PRESSROOM_MAILGUN_TIMEOUT_SECONDS")
    delivery_window_seconds: int = Field(default=0, ge=0, validation_alias="PRESSROOM_DELIVERY_WINDOW_SECONDS")
    # An uncertain send (5xx, lost answer) not yet in Mailgun's events is looked up again for this
    # long before it is sent again. Mailgun's event polling guide says events may be stored up to
    # about 30 minutes after they happen (the analytics trust threshold has the same reason); only
    # after that is "no accepted event" evidence that it was not accepted. 0 resends at once.
    send_confirm_window_seconds: float = Field(default=30 * 60, ge=0,
                                               validation_alias="PRESSROOM_SEND_CONFIRM_WINDOW_SECONDS")
    send_confirm_poll_seconds: float = Field(default=60.0, gt=0, validation_alias="PRESSROOM_SEND_CONFIRM_POLL_SECONDS")
    # How soon a worker that dies mid-send (writing batches, sending them, looking for the provider's
    # return) is noticed and its activity retried elsewhere. Its activities beat after 2 s and every
    # 2 s, and Temporal forwards a beat at most every 80% of the timeout: from 5 s a beat late by
    # a loaded machine still comes in time.
    send_heartbeat_seconds: float = Field(default=15.0, ge=5, le=60,
                                          validation_alias="PRESSROOM_SEND_HEARTBEAT_SECONDS")
    # A live worker polls again at least every long poll (Temporal's matching.longPollExpirationInterval,
    # a minute by default); Temporal keeps listing a worker that stopped for minutes, so a worker
    # whose last poll is older than this is taken for gone.
    worker_seen_within_seconds: float = Field(default=90.0, gt=0,
                                              validation_alias="PRESSROOM_WORKER_SEEN_WITHIN_SECONDS")
    email_tag: str = Field(default="", validation_alias="PRESSROOM_EMAIL_TAG")
    site_url: str = Field(default="http://localhost:2368", validation_alias="PRESSROOM_SITE_URL")
    # Keys the members' unsubscribe links (hex HMAC-SHA256 of the member's uuid), as the reference
    # platform's `members_email_auth_secret` does: give both the same value and each accepts the other's links.
    members_link_secret: SecretStr = Field(default=SecretStr(""), validation_alias="PRESSROOM_MEMBERS_LINK_SECRET")
    # The site-wide sender of newsletters without their own and of welcome emails. No default outside
    # the development stack (which gives DEV_FROM_ADDRESS): a send without a sender is refused.
    from_address: str = Field(default="", validation_alias="PRESSROOM_FROM_ADDRESS")
    # Rendered bodies a worker keeps, per email and segment, so batches reuse one rendering.
    body_cache_bytes: int = Field(default=32 * 1024 * 1024, ge=0, validation_alias="PRESSROOM_BODY_CACHE_BYTES")
    # Clicks counted by Pressroom's own redirects (`{PRESSROOM_SITE_URL}/r/{id}?m={uuid}`) for every
    # email whose own and newsletter's `track_clicks` are unset (docs/clicks.md).
    email_track_clicks: bool = Field(default=False, validation_alias="PRESSROOM_EMAIL_TRACK_CLICKS")
    # The reference platform's outbound link tagging: `ref={newsletter-slug}-newsletter` on links to other sites.
    outbound_link_tagging: bool = Field(default=False, validation_alias="PRESSROOM_OUTBOUND_LINK_TAGGING")

    # --- the provider's limits: domain warming and send caps ---
    # With both set, a growing share of each email goes through MAILGUN_DOMAIN, the rest through this
    # domain of the same Mailgun account, from this address.
    fallback_domain: str = Field(default="", validation_alias="MAILGUN_FALLBACK_DOMAIN")
    fallback_address: str = Field(default="", validation_alias="MAILGUN_FALLBACK_ADDRESS")
    # Messages (recipients) per sending domain per clock hour / UTC day: "N" for every domain, or
    # "mg.example.com=N,fallback.example.com=M". Unset: no cap.
    hourly_send_limit: Annotated[dict[str, int], NoDecode] = Field(
        default={}, validation_alias="PRESSROOM_HOURLY_SEND_LIMIT")
    daily_send_limit: Annotated[dict[str, int], NoDecode] = Field(
        default={}, validation_alias="PRESSROOM_DAILY_SEND_LIMIT")

    # --- members ---
    # The key of the HMAC-SHA256 a deleted member's suppression keeps instead of their address, so
    # the address, added again, is still suppressed. It must stay the same for as long as those
    # suppressions matter. The development stack makes one and keeps it; elsewhere `members delete`
    # refuses without it (`require_address_hash_key`).
    address_hash_key: SecretStr = Field(default=SecretStr(""), validation_alias="PRESSROOM_ADDRESS_HASH_KEY")

    # --- outbox ---
    welcome_emails: bool = Field(default=True, validation_alias="PRESSROOM_WELCOME_EMAILS")
    # A welcome email whose template cannot be rendered waits, pending, and is tried again this long
    # after; once the template is fixed, it goes out.
    welcome_template_retry_seconds: float = Field(default=60.0, gt=0,
                                                  validation_alias="PRESSROOM_WELCOME_TEMPLATE_RETRY_SECONDS")
    # Each variable's first name is the one to set; the names after it are deprecated aliases that
    # deployments made before the PRESSROOM_/_SECONDS naming still set (docs/production.md "Configuration").
    outbox_batch: int = Field(default=32, ge=1, le=10_000,
                              validation_alias=AliasChoices("PRESSROOM_OUTBOX_BATCH", "OUTBOX_BATCH"))
    outbox_max_attempts: int = Field(default=6, ge=1, validation_alias=AliasChoices(
        "PRESSROOM_OUTBOX_MAX_ATTEMPTS", "OUTBOX_MAX_ATTEMPTS"))
    outbox_backoff_seconds: Annotated[list[int], NoDecode] = Field(
        default=[5, 10, 20, 40, 80, 160],
        validation_alias=AliasChoices("PRESSROOM_OUTBOX_BACKOFF_SECONDS", "OUTBOX_BACKOFF_SEC"))
    outbox_poll_interval_seconds: float = Field(default=0.5, gt=0, validation_alias=AliasChoices(
        "PRESSROOM_OUTBOX_POLL_INTERVAL_SECONDS", "OUTBOX_POLL_INTERVAL_SEC"))
    outbox_max_open_deliveries: int = Field(default=500, ge=1, validation_alias=AliasChoices(
        "PRESSROOM_OUTBOX_MAX_OPEN_DELIVERIES", "OUTBOX_MAX_OPEN_DELIVERIES"))
    outbox_delete_on_success: bool = Field(default=False, validation_alias=AliasChoices(
        "PRESSROOM_OUTBOX_DELETE_ON_SUCCESS", "OUTBOX_DELETE_ON_SUCCESS"))
    # How often the watchdog looks for rows whose run closed without finishing them (every job's).
    orphan_check_seconds: float = Field(default=60, gt=0, validation_alias=AliasChoices(
        "PRESSROOM_ORPHAN_CHECK_SECONDS", "OUTBOX_ORPHAN_CHECK_SEC"))

    # --- email analytics ---
    analytics_interval_seconds: int = Field(default=300, ge=10,
                                            validation_alias="PRESSROOM_ANALYTICS_INTERVAL_SECONDS")
    analytics_max_opened_events: int = Field(default=10_000, ge=1,
                                             validation_alias="PRESSROOM_ANALYTICS_MAX_OPENED_EVENTS")
    analytics_trust_threshold_seconds: int = Field(default=30 * 60, ge=0,
                                                   validation_alias="PRESSROOM_ANALYTICS_TRUST_THRESHOLD_SECONDS")
    analytics_end_margin_seconds: int = Field(default=60, ge=0,
                                              validation_alias="PRESSROOM_ANALYTICS_END_MARGIN_SECONDS")

    # --- retention: an email's recipient rows are folded into its figures and its members' once it
    # ended longer ago than this, then dropped (docs/production.md "Retention"); 0 keeps them for ever.
    recipient_retention_days: int = Field(default=180, ge=0, validation_alias="PRESSROOM_RECIPIENT_RETENTION_DAYS")
    retention_chunk_rows: int = Field(default=10_000, ge=100, le=1_000_000,
                                      validation_alias="PRESSROOM_RETENTION_CHUNK_ROWS")

    # --- scheduled posts ---
    # A thousand posts due at one instant take Temporal some 20 s of workflow tasks on two cores
    # (bench/scheduling.py): the timer fires early enough for all of them to be waiting in time, and
    # a waiting publish's heartbeats (one per 80% of the timeout) do not crowd those tasks out.
    publish_lead_seconds: float = Field(default=30.0, ge=0, validation_alias="PRESSROOM_PUBLISH_LEAD_SECONDS")
    publish_retries: int = Field(default=30, ge=0, validation_alias="PRESSROOM_PUBLISH_RETRIES")
    publish_retry_seconds: float = Field(default=5.0, gt=0, validation_alias="PRESSROOM_PUBLISH_RETRY_SECONDS")
    publish_heartbeat_seconds: float = Field(default=5.0, ge=1, le=60,
                                             validation_alias="PRESSROOM_PUBLISH_HEARTBEAT_SECONDS")

    # --- webhooks: events pushed by the provider (pressroom webhooks serve) ---
    # The domain's HTTP webhook signing key (Mailgun: Sending → Webhooks), not the API key.
    webhook_signing_key: SecretStr = Field(default=SecretStr(""), validation_alias="MAILGUN_WEBHOOK_SIGNING_KEY")
    # A request signed longer ago (or further ahead) than this is refused as stale; its token is
    # remembered this long, so a replay is refused either way.
    webhook_max_age_seconds: int = Field(default=300, ge=10, le=86400,
                                         validation_alias="PRESSROOM_WEBHOOK_MAX_AGE_SECONDS")
    webhook_max_body_bytes: int = Field(default=256 * 1024, ge=1024, le=16 * 1024 * 1024,
                                        validation_alias="PRESSROOM_WEBHOOK_MAX_BODY_BYTES")
    # A retry of a push answered 503 may carry its first signature (see docs/front-door.md): a
    # request signed up to this long ago is taken; its token is remembered as long, so a replay is
    # refused all the same. Mailgun retries for 8 hours.
    webhook_retry_window_seconds: int = Field(default=9 * 3600, ge=60, le=7 * 86400,
                                              validation_alias="PRESSROOM_WEBHOOK_RETRY_WINDOW_SECONDS")
    # Set-aside events (delivery_events_rejected) are kept this long for `analytics rejected`, then pruned.
    rejected_events_keep_days: int = Field(default=30, ge=1, le=3650,
                                           validation_alias="PRESSROOM_REJECTED_EVENTS_KEEP_DAYS")
    webhook_apply_batch: int = Field(default=2000, ge=1, le=20_000, validation_alias="PRESSROOM_WEBHOOK_APPLY_BATCH")

    # --- the site's webhooks: its events delivered to integrations (docs/site-webhooks.md) ---
    # http:// to loopback and loopback addresses admitted: the development stack and tests.
    site_webhooks_allow_loopback: bool = Field(default=False, validation_alias="PRESSROOM_WEBHOOKS_ALLOW_LOOPBACK")
    # Private, shared and link-local addresses admitted (an intranet integration); loopback stays refused.
    site_webhooks_allow_private: bool = Field(default=False, validation_alias="PRESSROOM_WEBHOOKS_ALLOW_PRIVATE")
    # Attempts of one delivery on the outbox's backoff (its last step repeated): 200 at 160 s is
    # about nine hours of a target down before its entry is aborted.
    site_webhooks_max_attempts: int = Field(default=200, ge=1, le=10_000,
                                            validation_alias="PRESSROOM_WEBHOOKS_MAX_ATTEMPTS")
    site_webhooks_timeout_seconds: float = Field(default=10.0, gt=0, le=120,
                                                 validation_alias="PRESSROOM_WEBHOOKS_TIMEOUT_SECONDS")
    # Deliveries of one webhook in flight at once. 1 keeps its events strictly in order; more lets a
    # slow target take a burst faster, in order of dispatch only.
    site_webhooks_in_flight: int = Field(default=1, ge=1, le=100, validation_alias="PRESSROOM_WEBHOOKS_IN_FLIGHT")

    # --- the front door (pressroom serve): what one client may hold open ---
    serve_header_timeout_seconds: float = Field(default=10.0, gt=0, le=300,
                                                validation_alias="PRESSROOM_SERVE_HEADER_TIMEOUT_SECONDS")
    serve_body_timeout_seconds: float = Field(default=10.0, gt=0, le=300,
                                              validation_alias="PRESSROOM_SERVE_BODY_TIMEOUT_SECONDS")
    serve_max_connections: int = Field(default=1024, ge=1, le=100_000,
                                       validation_alias="PRESSROOM_SERVE_MAX_CONNECTIONS")
    # One client address may hold this many of them (a client reopening connections faster than the
    # head deadline drops them cannot hold the whole cap); the addresses of the operator's proxies
    # (comma-separated) carry many clients and count only toward the total.
    serve_max_connections_per_client: int = Field(default=128, ge=1, le=100_000,
                                                  validation_alias="PRESSROOM_SERVE_MAX_CONNECTIONS_PER_CLIENT")
    serve_proxies: str = Field(default="", validation_alias="PRESSROOM_SERVE_PROXIES")
    # A click is committed before its redirect is answered; when the database takes longer than this,
    # the reader is redirected anyway and the click stays queued until it commits (docs/clicks.md).
    click_commit_wait_seconds: float = Field(default=2.0, gt=0, le=30,
                                             validation_alias="PRESSROOM_CLICK_COMMIT_WAIT_SECONDS")
    # Networks (CIDR, comma-separated) of mail scanners whose requests are counted apart from readers'.
    click_scanner_networks: Annotated[list[str], NoDecode] = Field(
        default_factory=list, validation_alias="PRESSROOM_CLICK_SCANNER_NETWORKS")

    # --- deliverability (docs/deliverability.md) ---
    # While the provider is unreachable, a send looks for its return this often (an authenticated
    # read, not a send), so it goes on within this long of the provider's recovery.
    provider_probe_seconds: float = Field(default=20.0, ge=1, le=300,
                                          validation_alias="PRESSROOM_PROVIDER_PROBE_SECONDS")
    # A send reads its early hard-bounce and complaint rates at most this often, and pauses itself
    # between batches once at least PAUSE_MIN_ANSWERED recipients are answered for and a rate is at
    # or over its threshold. 0 for either rate turns that pause off.
    reputation_check_seconds: float = Field(default=30.0, ge=1, validation_alias="PRESSROOM_REPUTATION_CHECK_SECONDS")
    pause_min_answered: int = Field(default=1000, ge=1, validation_alias="PRESSROOM_PAUSE_MIN_ANSWERED")
    pause_hard_bounce_rate: float = Field(default=0.05, ge=0, le=1, validation_alias="PRESSROOM_PAUSE_HARD_BOUNCE_RATE")
    pause_complaint_rate: float = Field(default=0.003, ge=0, le=1, validation_alias="PRESSROOM_PAUSE_COMPLAINT_RATE")
    pause_min_complaints: int = Field(default=10, ge=1, validation_alias="PRESSROOM_PAUSE_MIN_COMPLAINTS")
    # Where `check` asks DNS for the sending domains' DMARC records (comma-separated addresses;
    # empty: the system's resolvers), and how long it waits for an answer.
    dns_nameservers: str = Field(default="", validation_alias="PRESSROOM_DNS_NAMESERVERS")
    dns_timeout_seconds: float = Field(default=3.0, gt=0, le=30, validation_alias="PRESSROOM_DNS_TIMEOUT_SECONDS")
    # `check` over the last 30 days: warned at the first rate, failing at the second.
    complaint_rate_warn: float = Field(default=0.001, ge=0, le=1, validation_alias="PRESSROOM_COMPLAINT_RATE_WARN")
    complaint_rate_fail: float = Field(default=0.003, ge=0, le=1, validation_alias="PRESSROOM_COMPLAINT_RATE_FAIL")
    hard_bounce_rate_warn: float = Field(default=0.02, ge=0, le=1, validation_alias="PRESSROOM_HARD_BOUNCE_RATE_WARN")
    hard_bounce_rate_fail: float = Field(default=0.05, ge=0, le=1, validation_alias="PRESSROOM_HARD_BOUNCE_RATE_FAIL")

    # --- worker ---
    # Publish activities mostly sleep out their last seconds; many may wait at once when posts share a time.
    worker_max_activities: int = Field(default=1000, ge=1, validation_alias="PRESSROOM_WORKER_MAX_ACTIVITIES")
    # A run's next workflow task first waits this long for the worker that holds the run in its cache,
    # then goes to any worker (which replays its history): how soon a killed worker's runs go on.
    # Temporal's SDK default; a live worker that is slower than this only costs a replay elsewhere.
    worker_sticky_seconds: float = Field(default=10.0, ge=1, le=60, validation_alias="PRESSROOM_WORKER_STICKY_SECONDS")
    metrics_port: int = Field(default=0, ge=0, le=65535, validation_alias="PRESSROOM_METRICS_PORT")
    metrics_host: str = Field(default="127.0.0.1", validation_alias="PRESSROOM_METRICS_HOST")
    # A worker's GET /healthz (operations/worker_health.py) on PRESSROOM_METRICS_HOST; 0: none.
    worker_health_port: int = Field(default=0, ge=0, le=65535, validation_alias="PRESSROOM_WORKER_HEALTH_PORT")
    encryption_key: SecretStr = Field(default=SecretStr(""), validation_alias="PRESSROOM_ENCRYPTION_KEY")
    codec_token: SecretStr = Field(default=SecretStr(""), validation_alias="PRESSROOM_CODEC_TOKEN")
    # With a key, payloads nobody encrypted are refused; true opens a migration window (and logs it).
    codec_allow_plaintext: bool = Field(default=False, validation_alias="PRESSROOM_CODEC_ALLOW_PLAINTEXT")
    log_format: Literal["text", "json"] = Field(default="text", validation_alias="PRESSROOM_LOG_FORMAT")
    # Pressroom's (and Temporal's) lines from this level; libraries' (httpx logs each request URL at
    # INFO, query string included) from PRESSROOM_LIBRARY_LOG_LEVEL.
    log_level: LogLevel = Field(default="INFO", validation_alias="PRESSROOM_LOG_LEVEL")
    library_log_level: LogLevel = Field(default="WARNING", validation_alias="PRESSROOM_LIBRARY_LOG_LEVEL")

    @field_validator("serve_proxies")
    @classmethod
    def _proxy_addresses(cls, value: str) -> str:
        for part in (p.strip() for p in value.split(",") if p.strip()):
            try:
                ipaddress.ip_address(part)
            except ValueError:
                raise ValueError(f"{part!r} is not an IP address: give the proxies' addresses, comma-separated") \
                    from None
        return value

    @property
    def proxy_addresses(self) -> frozenset[str]:
        return frozenset(str(ipaddress.ip_address(p.strip())) for p in self.serve_proxies.split(",") if p.strip())

    @field_validator("recipient_retention_days")
    @classmethod
    def _keeps_the_rates(cls, value: int) -> int:
        if 0 < value < MIN_RETENTION_DAYS:
            raise ValueError(f"{value} is below {MIN_RETENTION_DAYS} days: the last 30 days' rates (`pressroom check`) "
                             "read the recipient rows (0 keeps them for ever)")
        return value

    @field_validator("batch_size")
    @classmethod
    def _within_mailgun_maximum(cls, value: int) -> int:
        if value > MAILGUN_MAX_RECIPIENTS:
            raise ValueError(f"{value} is above Mailgun's maximum of {MAILGUN_MAX_RECIPIENTS} recipients per message")
        return value

    @field_validator("email_tag")
    @classmethod
    def _one_plain_tag(cls, value: str) -> str:
        # It is sent as a Mailgun tag and put in the events query's filter expression (`bulk-email AND
        # <tag>`): one word, in the characters a tag and an expression both take as they are.

        if value and not re.fullmatch(r"[A-Za-z0-9_.:-]{1,128}", value):
            raise ValueError("must be one tag of at most 128 letters, digits and . _ : - (no spaces)")
        return value

    @field_validator("outbox_backoff_seconds", mode="before")
    @classmethod
    def _parse_backoff(cls, value: object) -> object:
        # Accept a JSON list, "[5,10,20]", and a plain "5,10,20".
        if isinstance(value, str):
            text = value.strip().strip("[]")
            return [int(part) for part in text.split(",") if part.strip()]
        return value

    @field_validator("outbox_backoff_seconds")
    @classmethod
    def _backoff_not_empty(cls, value: list[int]) -> list[int]:
        if not value or any(v <= 0 for v in value):
            raise ValueError("must be a list of positive seconds, such as 5,10,20")
        return value

    @field_validator("click_scanner_networks", mode="before")
    @classmethod
    def _parse_networks(cls, value: object) -> object:

        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, list):
            try:
                return [str(ipaddress.ip_network(str(part), strict=False)) for part in value]
            except ValueError as error:
                raise ValueError(f"must be networks such as 192.0.2.0/24,2001:db8::/32 ({error})") from None
        return value

    @field_validator("hourly_send_limit", "daily_send_limit", mode="before")
    @classmethod
    def _parse_send_limit(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        limits: dict[str, int] = {}
        for part in (p.strip() for p in value.split(",")):
            if not part:
                continue
            domain, _, number = part.rpartition("=")
            try:
                limits[domain.strip() or "*"] = int(number)
            except ValueError:
                raise ValueError(f"{part!r} is not a number of messages: use N, or domain=N joined by commas") from None
        return limits

    @field_validator("hourly_send_limit", "daily_send_limit")
    @classmethod
    def _positive_send_limit(cls, value: dict[str, int]) -> dict[str, int]:
        for domain, limit in value.items():
            if limit <= 0:
                where = "" if domain == "*" else f" for {domain}"
                raise ValueError(f"a cap of {limit}{where} would never send; give a positive number of messages, "
                                 "or leave it unset for no cap")
        return value

    @model_validator(mode="after")
    def _fallback_complete(self) -> Settings:
        if self.fallback_domain and "@" not in self.fallback_address:
            raise ValueError("MAILGUN_FALLBACK_DOMAIN is set but MAILGUN_FALLBACK_ADDRESS is not an address: domain "
                             "warming needs both (for example noreply@" + self.fallback_domain + ")")
        if self.fallback_address and not self.fallback_domain:
            raise ValueError("MAILGUN_FALLBACK_ADDRESS is set without MAILGUN_FALLBACK_DOMAIN: domain warming "
                             "needs both")
        if self.fallback_domain and self.fallback_domain == self.mailgun_domain:
            raise ValueError("MAILGUN_FALLBACK_DOMAIN must differ from MAILGUN_DOMAIN: warming sends part of each "
                             "email through another domain")
        return self

    def send_limit(self, domain: str, window: str) -> int | None:
        """The cap of `domain` per "hour" or "day", or None for no cap."""
        limits = self.hourly_send_limit if window == "hour" else self.daily_send_limit
        return limits.get(domain, limits.get("*"))

    def secret_values(self) -> list[str]:
        """Every secret this process holds, for the log mask: keys, tokens, each encryption key."""
        values = [self.mailgun_api_key, self.temporal_api_key, self.codec_token, self.encryption_key,
                  self.webhook_signing_key, self.members_link_secret, self.address_hash_key]
        if self.email_provider == "ses":  # AWS credentials come from the standard variables, read raw here
            values += [SecretStr(os.environ.get(name, "")) for name in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")]
        found = [value.get_secret_value() for value in values if value.get_secret_value()]
        for entry in self.encryption_key.get_secret_value().split(","):  # "k2:<base64>,k1:<base64>"
            found.extend(part.strip() for part in entry.split(":") if len(part.strip()) >= 16)
        return found

    @property
    def warming(self) -> bool:
        return bool(self.fallback_domain)

    @field_validator("encryption_key")
    @classmethod
    def _encryption_keys(cls, value: SecretStr) -> SecretStr:
        if value.get_secret_value():
            # On every command's start-up path: cryptography loads only when a key is set.

            try:
                parse_keys(value.get_secret_value())
            except EncryptionKeyError as error:  # the message never contains key material
                raise ValueError(str(error)) from None
        return value

    @field_validator("webhook_signing_key", "members_link_secret")
    @classmethod
    def _not_blank(cls, value: SecretStr) -> SecretStr:
        # Unset is "" (refused where it is needed); set, a key of spaces would sign for anyone.
        text = value.get_secret_value()
        if text and (not text.strip() or text != text.strip() or not text.isprintable()):
            raise ValueError("is blank, has spaces around it or control characters (give the key itself)")
        return value

    @field_validator("from_address")
    @classmethod
    def _one_mailbox(cls, value: str) -> str:
        """One `Name <address>` (or a bare address), written again by email.headerregistry."""
        if value == "":
            return value  # unset: a send that needs it is refused, naming it

        if any(not c.isprintable() for c in value):
            raise ValueError("holds a line break or control character")
        header = HeaderRegistry()("from", value)
        if (not isinstance(header, AddressHeader) or header.defects or len(header.addresses) != 1
                or not header.addresses[0].domain):
            raise ValueError("must be one address, such as Pressroom <noreply@example.com> (quote a name "
                             'holding commas: "Pressroom, Inc." <noreply@example.com>)')
        return str(header.addresses[0])

    @field_validator("database_url")
    @classmethod
    def _postgres_url(cls, value: str) -> str:
        if value and not value.startswith(("postgres://", "postgresql://")):
            raise ValueError("must start with postgresql:// (for example postgresql://user@host:5432/db)")
        return value

    @field_validator("mailgun_base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @field_validator("temporal_address")
    @classmethod
    def _host_port(cls, value: str) -> str:
        host, _, port = value.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError("must be host:port, such as 127.0.0.1:7233")
        if not 1 <= int(port) <= 65535:
            raise ValueError(f"port {port} is out of range (1 to 65535)")
        return value

    @field_validator("temporal_namespace", "task_queue")
    @classmethod
    def _a_name(cls, value: str) -> str:
        # Temporal accepts almost any string here, but an empty or padded one is always a slip.
        if not value.strip():
            raise ValueError("is empty")
        if value != value.strip() or not value.isprintable():
            raise ValueError(f"{value!r} has spaces around it or control characters")
        if len(value) > 255:
            raise ValueError("is longer than 255 characters")
        return value

    def require_database(self) -> str:

        if not self.database_url and os.environ.get("DATABASE_URL") == "":
            raise ConfigurationError("DATABASE_URL is set but empty (unset it to use the development stack, "
                                     "or set a postgresql:// URL)")
        if not self.database_url:
            raise ConfigurationError(
                "DATABASE_URL is not set and the development stack is not running "
                "(start it with `pressroom dev up`, or set DATABASE_URL)")
        return self.database_url

    def direct_database(self) -> str:
        """The URL of a PostgreSQL session of its own (LISTEN): DATABASE_DIRECT_URL, else DATABASE_URL."""
        return self.database_direct_url or self.database_url

    # --- the provider's neutral view: what activities read, whichever provider sends ---

    def require_mailgun(self) -> None:
        if not self.mailgun_api_key.get_secret_value():
            raise ConfigurationError("MAILGUN_API_KEY is not set (required outside the development stack)")
        if not self.mailgun_domain:
            raise ConfigurationError("MAILGUN_DOMAIN is not set (required outside the development stack)")

    def require_webhook_signing_key(self) -> str:
        key = self.webhook_signing_key.get_secret_value()
        if not key:
            raise ConfigurationError("MAILGUN_WEBHOOK_SIGNING_KEY is not set: the receiver cannot tell Mailgun's "
                                     "requests from forged ones (Mailgun: Sending → Webhooks → HTTP webhook "
                                     "signing key)")
        return key

    def require_address_hash_key(self) -> str:
        key = self.address_hash_key.get_secret_value()
        if not key:
            raise ConfigurationError("PRESSROOM_ADDRESS_HASH_KEY is not set: a deleted member's suppression would go "
                                     "with their address, and the address added again would be mailed (set it to a "
                                     "long random value, such as `openssl rand -hex 32`, and keep it)")
        return key

    def require_members_link_secret(self) -> str:
        secret = self.members_link_secret.get_secret_value()
        if not secret:
            raise ConfigurationError("PRESSROOM_MEMBERS_LINK_SECRET is not set: members' unsubscribe links cannot be "
                                     "signed (give it the site's members_email_auth_secret, or a new random value)")
        return secret


def _names(alias: str | AliasChoices | AliasPath | None) -> list[str]:
    """A field's variable, then the deprecated names it still answers to (every field has one: Settings)."""
    if isinstance(alias, AliasChoices):
        return [str(name) for name in alias.choices]
    assert isinstance(alias, str)
    return [alias]


# Each field's variable, and the deprecated names a variable still answers to (its aliases).
_ALIASES = {name: _names(field.validation_alias)[0] for name, field in Settings.model_fields.items()}
DEPRECATED_VARIABLES = {old: _ALIASES[name] for name, field in Settings.model_fields.items()
                        for old in _names(field.validation_alias)[1:]}


def _warn_deprecated(environ) -> None:

    for old, new in DEPRECATED_VARIABLES.items():
        if old in environ:
            ignored = " (ignored: it is set too)" if new in environ else ""
            logging.getLogger(__name__).warning("%s is deprecated: set %s instead%s", old, new, ignored)


def temporal_profile():
    """The SDK's standard Temporal client settings: the profile TEMPORAL_PROFILE (default "default")
    of TEMPORAL_CONFIG_FILE (default ~/.config/temporalio/temporal.toml), the TEMPORAL_* variables over it."""


    path = os.environ.get("TEMPORAL_CONFIG_FILE")
    if path and not os.path.isfile(path):  # the SDK would quietly use no file at all
        raise ConfigurationError(f"TEMPORAL_CONFIG_FILE {path!r} cannot be read: no such file")
    try:
        return ClientConfigProfile.load()
    except Exception as error:  # noqa: BLE001 (the SDK core's ConfigError (an unknown profile, a malformed file))
        message = " ".join(str(error).split())
        raise ConfigurationError(f"the Temporal client configuration cannot be loaded: {message} "
                                 "(check TEMPORAL_PROFILE and TEMPORAL_CONFIG_FILE)") from None


def _profile_values(profile) -> dict[str, object]:
    """The profile's settings by field; a certificate given as data (…_DATA) is kept as its PEM text."""
    def source(value: object) -> str | None:
        return value.decode() if isinstance(value, bytes) else None if value is None else str(value)

    values: dict[str, object] = {"temporal_address": profile.address, "temporal_namespace": profile.namespace,
                                 "temporal_api_key": profile.api_key}
    if profile.tls is not None:
        values.update(temporal_tls=True if profile.tls.disabled is False else None,
                      temporal_tls_client_cert=source(profile.tls.client_cert),
                      temporal_tls_client_key=source(profile.tls.client_private_key),
                      temporal_tls_server_ca_cert=source(profile.tls.server_root_ca_cert),
                      temporal_tls_server_name=profile.tls.server_name)
    return {field: value for field, value in values.items() if value is not None}


# The development stack's sender (its site sends from example.com); nowhere else is there a default.
DEV_FROM_ADDRESS = "Pressroom <noreply@example.com>"


def load_settings(**overrides: object) -> Settings:
    """Read the environment once; fall back to the Temporal profile file, then to the development
    stack, for what is not set.

    Overrides (field names) win over all; tests use them instead of mutating os.environ.
    """

    stack = read_dev_stack()
    fallback: dict[str, Any] = {}
    if "PRESSROOM_FROM_ADDRESS" not in os.environ and "DATABASE_URL" not in os.environ and stack.get("database_url"):
        fallback["PRESSROOM_FROM_ADDRESS"] = stack.get("from_address") or DEV_FROM_ADDRESS  # the stack's site
    for field, variable in (("database_url", "DATABASE_URL"), ("temporal_address", "TEMPORAL_ADDRESS"),
                            ("mailgun_base_url", "MAILGUN_BASE_URL"), ("mailgun_api_key", "MAILGUN_API_KEY"),
                            ("mailgun_domain", "MAILGUN_DOMAIN"),
                            ("webhook_signing_key", "MAILGUN_WEBHOOK_SIGNING_KEY"),
                            ("members_link_secret", "PRESSROOM_MEMBERS_LINK_SECRET"),
                            ("address_hash_key", "PRESSROOM_ADDRESS_HASH_KEY"),
                            ("email_provider", "PRESSROOM_EMAIL_PROVIDER")):
        if variable not in os.environ and stack.get(field):
            fallback[_ALIASES[field]] = stack[field]
    for field, value in _profile_values(temporal_profile()).items():
        if _ALIASES[field] not in os.environ:  # a value from the profile file: it names the cluster to use
            fallback[_ALIASES[field]] = value
    values = {**fallback, **{_ALIASES[k]: v for k, v in overrides.items()}}
    _warn_deprecated(os.environ)
    try:
        return Settings(**values)
    except ValidationError as error:
        raise ConfigurationError(describe_validation_error(error)) from None


def describe_validation_error(error: ValidationError) -> str:
    """One line naming the first wrong variable and what is wrong with it."""
    first = error.errors()[0]
    message = first["msg"].removeprefix("Value error, ")
    if not first["loc"]:
        return message  # a rule across variables names them itself

    field = str(first["loc"][0])
    variable = _ALIASES.get(field, field)
    if variable not in os.environ:  # set under a deprecated name: name that one
        variable = next((old for old, new in DEPRECATED_VARIABLES.items() if new == variable and old in os.environ),
                        variable)
    return f"{variable} is invalid: {message}"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once."""
    return load_settings()
