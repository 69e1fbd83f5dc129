"""The sending domain's reputation, for `pressroom check` and the reports: whether each identity a
send goes out from is verified by the provider, whether its domain publishes DMARC, and the
hard-bounce and complaint rates of the last 30 days against the mailbox providers' lines
(docs/deliverability.md)."""

from __future__ import annotations

from email.utils import parseaddr

import dns.asyncresolver
import dns.exception
import dns.resolver
from pydantic import BaseModel

from operations.check import CheckResult
from pressroom import database
from pressroom.providers.port import ProviderError
from pressroom.providers.wiring import provider_from_settings
from pressroom.settings import Settings

REPUTATION_DAYS = 30
# Every sender in use: each active newsletter's, and the fallback (welcome emails, newsletters without one).
_SENDERS = ("SELECT DISTINCT lower(sender_email) AS sender FROM newsletters "
            "WHERE status = 'active' AND sender_email <> ''")
# The emails sent in the window: recipients sent to, delivered, hard-bounced, and complaints.
_REPUTATION = """
WITH sent AS (SELECT id FROM emails WHERE submitted_at >= now() - make_interval(days => $1)
                                       OR (status = 'submitting' AND created_at >= now() - make_interval(days => $1)))
SELECT (SELECT count(*) FROM email_recipients r JOIN email_batches b ON b.id = r.batch_id
        WHERE r.email_id IN (SELECT id FROM sent) AND b.status = 'submitted') AS sent,
       (SELECT count(*) FROM email_recipients WHERE email_id IN (SELECT id FROM sent) AND delivered_at IS NOT NULL)
         AS delivered,
       (SELECT count(DISTINCT email_recipient_id) FROM email_recipient_failures
        WHERE email_id IN (SELECT id FROM sent) AND severity = 'permanent') AS hard_bounced,
       (SELECT count(*) FROM email_spam_complaint_events WHERE email_id IN (SELECT id FROM sent)) AS complained"""


class Reputation(BaseModel):
    """Hard bounces over the recipients sent to; complaints over the delivered (as mailbox
    providers count them); None while there is nothing to count over."""

    days: int
    sent: int
    delivered: int
    hard_bounced: int
    complained: int
    hard_bounce_rate: float | None
    complaint_rate: float | None


class DmarcRecord(BaseModel):
    domain: str
    found: bool | None  # None: DNS did not answer
    policy: str = ""  # p=none | quarantine | reject
    detail: str = ""


def rates(sent: int, delivered: int, hard_bounced: int, complained: int, days: int = REPUTATION_DAYS) -> Reputation:
    return Reputation(days=days, sent=sent, delivered=delivered, hard_bounced=hard_bounced, complained=complained,
                      hard_bounce_rate=hard_bounced / sent if sent else None,
                      complaint_rate=complained / delivered if delivered else None)


async def site_reputation(settings: Settings, days: int = REPUTATION_DAYS) -> Reputation:
    async with database.connection(settings.require_database()) as conn:
        row = await conn.fetchrow(_REPUTATION, days)
    return rates(row["sent"], row["delivered"], row["hard_bounced"], row["complained"], days)


async def dmarc_record(domain: str, settings: Settings) -> DmarcRecord:
    """The domain's DMARC record (`_dmarc.<domain>` TXT, v=DMARC1), from DNS within the timeout."""
    resolver = dns.asyncresolver.Resolver(configure=not settings.dns_nameservers)
    if settings.dns_nameservers:
        nameservers = [server.strip() for server in settings.dns_nameservers.split(",") if server.strip()]
        resolver.nameservers = [server.partition(":")[0] for server in nameservers]
        resolver.port = int(nameservers[0].partition(":")[2] or 53)
    try:
        answer = await resolver.resolve(f"_dmarc.{domain}", "TXT", lifetime=settings.dns_timeout_seconds)
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
        return DmarcRecord(domain=domain, found=False, detail=f"no DMARC record at _dmarc.{domain}")
    except dns.exception.DNSException as error:
        return DmarcRecord(domain=domain, found=None, detail=f"DNS did not answer for _dmarc.{domain} "
                                                             f"({type(error).__name__})")
    for record in answer:
        text = b"".join(record.strings).decode("ascii", "replace")
        if text.lower().startswith("v=dmarc1"):
            tags = dict(part.strip().partition("=")[::2] for part in text.split(";") if "=" in part)
            return DmarcRecord(domain=domain, found=True, policy=tags.get("p", "").strip().lower(),
                               detail=f"p={tags.get('p', '?').strip()}")
    return DmarcRecord(domain=domain, found=False, detail=f"_dmarc.{domain} holds no v=DMARC1 record")


async def senders_in_use(settings: Settings) -> list[str]:
    async with database.connection(settings.require_database()) as conn:
        rows = await conn.fetch(_SENDERS)
    fallback = parseaddr(settings.from_address)[1].lower()  # "": not set, and no sender of its own to check
    return sorted({row["sender"] for row in rows} | ({fallback} if fallback else set()))


async def check_senders(client, settings: Settings) -> CheckResult:
    """Every identity in use verified by the provider (failing otherwise: its sends are refused), and
    each sender's domain publishing DMARC (warned when not, or when DNS does not say)."""
    senders = await senders_in_use(settings)
    provider = provider_from_settings(settings)
    try:
        states = [await provider.sender_state(sender) for sender in senders]
    except ProviderError as error:
        return CheckResult("Senders", False, f"{provider.title} could not say which senders it verified: {error}")
    finally:
        await provider.aclose()
    unverified = [state for state in states if not state.verified]
    if unverified:
        return CheckResult("Senders", False, "; ".join(f"{state.identity} not verified by {provider.title} "
                                                       f"({state.detail}): its sends are refused"
                                                       for state in unverified))
    domains = sorted({sender.rpartition("@")[2] for sender in senders})
    records = [await dmarc_record(domain, settings) for domain in domains]
    missing = [record for record in records if not record.found]
    verified = ", ".join(sorted({state.identity for state in states}))
    if missing:
        return CheckResult("Senders", True, f"{verified} verified; " + "; ".join(r.detail for r in missing)
                           + " (mailbox providers ask bulk senders for DMARC)", warning=True)
    return CheckResult("Senders", True, f"{verified} verified; DMARC "
                                        + ", ".join(f"{r.domain} {r.detail}" for r in records))


async def check_reputation(client, settings: Settings) -> CheckResult:
    """The last 30 days' complaint and hard-bounce rates against the thresholds: warned at the first,
    failing at the second."""
    r = await site_reputation(settings)
    said = (f"last {r.days} days: complaints {_percent(r.complaint_rate)} of {r.delivered:,} delivered, "
            f"hard bounces {_percent(r.hard_bounce_rate)} of {r.sent:,} sent")
    complaint, bounce = r.complaint_rate or 0.0, r.hard_bounce_rate or 0.0
    if complaint >= settings.complaint_rate_fail or bounce >= settings.hard_bounce_rate_fail:
        return CheckResult("Reputation", False, f"{said}: over {settings.complaint_rate_fail:.1%} complaints or "
                                                f"{settings.hard_bounce_rate_fail:.0%} hard bounces, mailbox "
                                                "providers send this domain's mail to spam")
    if complaint >= settings.complaint_rate_warn or bounce >= settings.hard_bounce_rate_warn:
        return CheckResult("Reputation", True, f"{said}: over {settings.complaint_rate_warn:.1%} complaints or "
                                               f"{settings.hard_bounce_rate_warn:.0%} hard bounces", warning=True)
    return CheckResult("Reputation", True, said)


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.2%}"
