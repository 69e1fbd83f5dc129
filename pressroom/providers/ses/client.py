"""Amazon SES (API v2), one implementation of the email provider port.

Requests are signed with botocore's SigV4 signer (the official one) and sent with httpx, the HTTP
client the rest of Pressroom uses: no second HTTP stack, no thread pool around boto3's blocking
calls. A newsletter batch is one `SendBulkEmail` call of at most 50 destinations (SES's limit per
call), the message as an inline template, each reader's values as their replacement data and their
own List-Unsubscribe headers as replacement headers. SES answers each destination apart: a send
returns what was accepted per recipient.

SES has no events API: an uncertain send is confirmed from the Send events Pressroom received
through SNS and kept (`ReceivedEvents`), found by our marks, carried as message tags.
"""

from __future__ import annotations

import dataclasses
import html
import json
import logging
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import httpx
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from pressroom.delivery_events import DeliveryEvent, EventRejected
from pressroom.providers.port import (
    CONFIRM_BY_RECEIVED_EVENTS,
    AccountQuota,
    Capabilities,
    DomainScopedClient,
    EventQuery,
    EventsPage,
    Message,
    PreparedMessage,
    ProviderBadResponse,
    ProviderError,
    ProviderLimits,
    ProviderRateLimited,
    ProviderRejected,
    ProviderUnavailable,
    RecipientLimitExceeded,
    SenderState,
    SendResult,
    TooManyRecipients,
    fill_placeholders,
)
from pressroom.providers.ses.events import PROVIDER, parse_event, tag_value

_ANCHOR = re.compile(r"<a ")

if TYPE_CHECKING:
    from pressroom.providers.received import ReceivedEvents
    from pressroom.providers.ses.settings import SesSettings

SES_MAX_DESTINATIONS = 50  # BulkEmailEntries of one SendBulkEmail call (SES quotas)
SES_MAX_TAGS = 50
LIMITS = ProviderLimits(max_recipients=SES_MAX_DESTINATIONS, max_tags=SES_MAX_TAGS - 4, max_events_page=0)
CAPABILITIES = Capabilities(confirms_by=CONFIRM_BY_RECEIVED_EVENTS, polls_events=False)
DAILY_QUOTA_WAIT = 3600.0  # SES's daily quota is a rolling 24 hours: look again in an hour
# Headers SES sets itself or takes as parameters; a Reply-To header becomes ReplyToAddresses.
_NOT_HEADERS = {"message-id", "reply-to", "from", "to", "subject", "date"}
# Statuses of a destination that say the account, not the reader, stopped it (all destinations alike).
_THROTTLED = {"ACCOUNT_THROTTLED", "ACCOUNT_DAILY_QUOTA_EXCEEDED"}
_TRANSIENT = {"TRANSIENT_FAILURE", "FAILED"}
log = logging.getLogger(__name__)
# Seconds a sending quota read is reused: SentLast24Hours moves with every send (this process's own
# are added to it meanwhile); GetAccount once per admission would be far more than SES's API takes.
QUOTA_TTL = 10.0
QUOTA_RETRY = 60.0
_STATUS = re.compile(r"[A-Z][A-Z_]{0,63}")  # a destination's status, as SES spells them (MESSAGE_REJECTED)
_ERROR_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9]{0,63}")  # x-amzn-ErrorType: ThrottlingException
_ENDPOINT = re.compile(r"<Endpoint>([^<]{1,2048})</Endpoint>")
_NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol,
               httpx.WriteError, httpx.WriteTimeout)


# SES v2's MessageHeader: a name of at most 126 characters, a value of at most 870
# (https://docs.aws.amazon.com/ses/latest/APIReference-V2/API_MessageHeader.html).
HEADER_NAME_LIMIT, HEADER_VALUE_LIMIT = 126, 870


def _within_header_limits(headers: list[dict[str, str]]) -> None:
    """Refused before the call, with the header's name (never its value: it may hold an address)."""
    for header in headers:
        if len(header["Name"]) > HEADER_NAME_LIMIT or len(header["Value"]) > HEADER_VALUE_LIMIT:
            raise ProviderRejected(f"header {header['Name'][:HEADER_NAME_LIMIT]} is {len(header['Value'])} "
                                   f"characters long; SES takes a name of at most {HEADER_NAME_LIMIT} and a value "
                                   f"of at most {HEADER_VALUE_LIMIT}")


def ses_template(text: str) -> str:
    """The port's placeholders in SES's template syntax (Handlebars): `{{{name}}}`, unescaped, since
    the renderer gives each value already escaped for where it goes; a literal `{{` stays literal."""
    return fill_placeholders(text.replace("{{", "\\{{").replace("\\{{recipient.", "{{recipient."),
                             lambda name: f"{{{{{{{name}}}}}}}")


@dataclass(frozen=True)
class SesMessage:
    """The request's shared part, and the headers filled per reader."""

    shared: dict[str, Any]
    headers: dict[str, str]

    @property
    def size(self) -> int:
        return len(json.dumps(self.shared))


def _tags(names: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Name": tag_value(name), "Value": tag_value(value) or "_"} for name, value in names.items()]


class SesClient(DomainScopedClient):
    """One connection pool to SES in one region, sending from one verified domain (the scope).
    SES writes its own Message-ID; `message_id` only names an attempt in our own records."""

    name = PROVIDER
    title = "Amazon SES"
    limits = LIMITS
    capabilities = CAPABILITIES

    def __init__(self, *, endpoint: str, region: str, access_key_id: str, secret_access_key: str,
                 session_token: str = "", domain: str, configuration_set: str, topic_arn: str = "",
                 sns_endpoint: str = "", received: ReceivedEvents | None = None, timeout: float = 30.0,
                 max_connections: int = 20,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.region = region
        self.domain = domain
        self.configuration_set = configuration_set
        self.topic_arn = topic_arn
        self.sns_endpoint = (sns_endpoint or f"https://sns.{region}.amazonaws.com").rstrip("/")
        self.received = received
        self._quota: dict[str, Any] = {}  # the last quota read and when; shared with for_scope's siblings
        self._credentials = Credentials(access_key_id, secret_access_key, session_token or None)
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
                                       limits=httpx.Limits(max_connections=max_connections,
                                                           max_keepalive_connections=max_connections),
                                       transport=transport)

    @classmethod
    def from_settings(cls, ses: SesSettings, received: ReceivedEvents | None = None) -> SesClient:
        ses.require()
        return cls(endpoint=ses.ses_endpoint, region=ses.region, access_key_id=ses.access_key_id,
                   secret_access_key=ses.secret_access_key.get_secret_value(),
                   session_token=ses.session_token.get_secret_value(), domain=ses.domain,
                   configuration_set=ses.configuration_set, topic_arn=ses.topic_arn, sns_endpoint=ses.sns_endpoint,
                   received=received, timeout=ses.timeout_seconds)

    def __repr__(self) -> str:
        return f"SesClient(endpoint={self.endpoint!r}, domain={self.domain!r})"

    def parse_event(self, item: Any) -> DeliveryEvent | EventRejected:
        return parse_event(item)

    # --- sending ---

    def prepare(self, message: Message) -> SesMessage:
        if len(message.tags) > self.limits.max_tags:
            raise ProviderRejected(f"a message takes at most {self.limits.max_tags} tags, got {len(message.tags)}")
        headers = {name: value for name, value in message.headers.items() if name.lower() not in _NOT_HEADERS}
        reply_to = next((value for name, value in message.headers.items() if name.lower() == "reply-to"), None)
        body_html = message.html
        if message.tracking_clicks is False:
            # SES rewrites links when the configuration set publishes clicks, unless a link says not
            # to; Pressroom counts clicks with its own redirects. Lexbor writes every anchor as `<a `.
            body_html = _ANCHOR.sub("<a ses:no-track ", body_html)
        shared: dict[str, Any] = {
            "FromEmailAddress": message.from_address,
            "ConfigurationSetName": self.configuration_set,
            "DefaultContent": {"Template": {
                "TemplateContent": {"Subject": ses_template(message.subject), "Html": ses_template(body_html),
                                    "Text": ses_template(message.text)},
                "TemplateData": "{}"}},
            "DefaultEmailTags": _tags({tag: "1" for tag in message.tags})}
        if reply_to:
            shared["ReplyToAddresses"] = [reply_to]
        return SesMessage(shared, headers)

    async def send(self, message: PreparedMessage, recipients: Mapping[str, Mapping[str, str]], *,
                   mark: Mapping[str, str], message_id: str | None = None, headers: Mapping[str, str] = {},
                   delivery_time: datetime | None = None) -> SendResult:
        """One SendBulkEmail call; `mark` as message tags. SES cannot schedule (`delivery_time`):
        the workflow's own timer has waited for it already when a batch is sent."""
        assert isinstance(message, SesMessage)  # what this provider's prepare() made
        what = f"batch of {len(recipients)} recipients"
        if len(recipients) > SES_MAX_DESTINATIONS:
            raise TooManyRecipients(f"a {what} exceeds SES's limit of {SES_MAX_DESTINATIONS} destinations per call")
        if not recipients:
            raise ProviderRejected("a batch needs at least one recipient")
        own = {**message.headers, **{k: v for k, v in headers.items() if k.lower() not in _NOT_HEADERS}}
        addresses = list(recipients)
        entries = []
        for address in addresses:
            values = recipients[address]
            entry: dict[str, Any] = {
                "Destination": {"ToAddresses": [address]},
                "ReplacementEmailContent": {"ReplacementTemplate": {
                    "ReplacementTemplateData": json.dumps({name: str(v) for name, v in values.items()})}}}
            if own:
                entry["ReplacementHeaders"] = [
                    {"Name": name, "Value": _filled(value, values)}
                    for name, value in own.items()]
                _within_header_limits(entry["ReplacementHeaders"])
            entries.append(entry)
        body = {**message.shared, "DefaultEmailTags": [*message.shared["DefaultEmailTags"], *_tags(mark)],
                "BulkEmailEntries": entries}
        answer = await self._request("POST", "/v2/email/outbound-bulk-emails", what=what, body=body)
        results = answer.get("BulkEmailEntryResults") if isinstance(answer, dict) else None
        if not isinstance(results, list) or len(results) != len(addresses) \
                or not all(isinstance(result, dict) for result in results):
            raise ProviderBadResponse(f"SES accepted the {what} but did not answer for each destination")
        sent = self._outcome(what, addresses, results)
        if self._quota:  # counted until the next reading of the quota includes them
            self._quota["accepted"] = self._quota.get("accepted", 0) + len(sent.accepted)
        return sent

    @staticmethod
    def _outcome(what: str, addresses: list[str], results: list[dict[str, Any]]) -> SendResult:
        accepted, refused, temporarily, statuses = {}, {}, set(), set()
        for address, result in zip(addresses, results, strict=True):  # checked: one answer each
            status = result.get("Status")
            if status == "SUCCESS" and isinstance(result.get("MessageId"), str) and result["MessageId"]:
                accepted[address] = result["MessageId"]
            else:
                # Only the status, which is SES's own word: its Error text may quote the address.
                status = str(status) if _STATUS.fullmatch(str(status)) else "an unknown status"
                statuses.add(status)
                refused[address] = f"SES answered {status}"
                if status in _THROTTLED | _TRANSIENT:
                    temporarily.add(address)
        daily = "ACCOUNT_DAILY_QUOTA_EXCEEDED" in statuses
        # Resent no sooner than SES's window allows: the rolling day's quota frees over an hour or so.
        wait = DAILY_QUOTA_WAIT if daily else 1.0
        answered = SendResult(provider_id=next(iter(accepted.values()), ""), accepted=accepted, refused=refused,
                              refused_temporarily=frozenset(temporarily), retry_after=wait if temporarily else None)
        if accepted:
            return answered
        # Nothing accepted: the account's state speaks for the whole call.
        if statuses <= _THROTTLED:
            error: ProviderError = ProviderRateLimited(
                f"SES refused the {what}: {'the daily sending quota is used up' if daily else 'sending too fast'}",
                retry_after=wait)
        elif statuses <= _THROTTLED | _TRANSIENT:
            error = ProviderUnavailable(f"SES failed every destination of the {what} ({', '.join(sorted(statuses))})",
                                        may_have_been_accepted=False)
        else:
            error = ProviderRejected(f"SES refused every destination of the {what} ({', '.join(sorted(statuses))})")
        error.answered = answered
        raise error

    # --- confirming, events ---

    async def find_accepted(self, *, recipient: str, mark: Mapping[str, str], begin: datetime, end: datetime,
                            message_id: str | None = None) -> str | None:
        """From the Send events received through SNS and kept, by our marks only (SES writes its
        own Message-ID). None: not received yet."""
        if self.received is None:
            raise ProviderUnavailable("SES has no events API and this process keeps no received events: "
                                      "an uncertain send cannot be confirmed here", may_have_been_accepted=False)
        return await self.received.find(PROVIDER, recipient=recipient, mark=mark, begin=begin, end=end)

    async def find_accepted_each(self, *, recipients: Sequence[str], mark: Mapping[str, str], begin: datetime,
                                 end: datetime) -> Mapping[str, str] | None:
        """Each destination is answered apart: the Send events received for each, by our marks."""
        if self.received is None:
            raise ProviderUnavailable("SES has no events API and this process keeps no received events: "
                                      "an uncertain send cannot be confirmed here", may_have_been_accepted=False)
        return await self.received.find_each(PROVIDER, recipients=recipients, mark=mark, begin=begin, end=end)

    async def read_events(self, page: str | None, query: EventQuery) -> EventsPage:
        """Nothing to poll: SES's events all arrive through SNS, on /webhooks/ses."""
        return EventsPage(items=[], next_page=None, last_timestamp=None)

    async def sending_quota(self) -> dict[str, float]:
        """The account's sending quota (GetAccount): the most in 24 hours, the rate, the sent."""
        account = await self._request("GET", "/v2/email/account", what="account query")
        quota = account.get("SendQuota") if isinstance(account, dict) else None
        if not isinstance(quota, dict):
            raise ProviderBadResponse("SES answered the account query without a SendQuota")
        try:
            return {"max_24_hour_send": float(quota["Max24HourSend"]), "max_send_rate": float(quota["MaxSendRate"]),
                    "sent_last_24_hours": float(quota.get("SentLast24Hours", 0))}
        except (KeyError, TypeError, ValueError):
            raise ProviderBadResponse("SES answered the account query with a malformed SendQuota") from None

    async def check_account(self) -> str:
        """Nothing to poll: the account's sending quota (GetAccount), read now."""
        quota = await self.sending_quota()
        return (f"{self!r}: {quota['sent_last_24_hours']:.0f} of {quota['max_24_hour_send']:.0f} sent in 24 h, "
                f"{quota['max_send_rate']:g}/s")

    async def sender_state(self, from_address: str) -> SenderState:
        """SES sends only from a verified identity: the address itself or its domain
        (GetEmailIdentity, VerifiedForSendingStatus), with its DKIM and MAIL FROM states."""
        domain = from_address.rpartition("@")[2]
        for identity in (from_address, domain):
            try:
                found = await self._request("GET", f"/v2/email/identities/{quote(identity, safe='@')}",
                                            what="identity query")
            except ProviderRejected as error:
                if error.status_code == 404:
                    continue
                raise
            found = found if isinstance(found, dict) else {}
            dkim = (found.get("DkimAttributes") or {}).get("Status", "unknown")
            mail_from = (found.get("MailFromAttributes") or {}).get("MailFromDomainStatus")
            detail = f"identity {identity}: DKIM {dkim}" + (f", MAIL FROM {mail_from}" if mail_from else "")
            if found.get("VerifiedForSendingStatus") is True:
                return SenderState(identity, True, detail)
            return SenderState(identity, False, f"{detail}; not verified for sending")
        return SenderState(domain, False, f"neither {domain} nor the address is an identity of this SES account")

    async def account_quota(self, at: datetime | None = None) -> AccountQuota:
        """The sending quota (GetAccount): Max24HourSend (-1: unlimited) caps a rolling day, of which
        SentLast24Hours is used, MaxSendRate a second. A reading is reused for QUOTA_TTL seconds (by
        the wall clock and by `at`'s), with what this process's sends were accepted since added to
        the sent count. Unreadable now: an empty quota, for a minute (the configured caps hold, and
        SES's own refusals still stop a send)."""
        now = time.monotonic()
        kept = self._quota
        if kept and now < kept["until"] and (at is None or (kept["at"] is not None
                                             and abs((at - kept["at"]).total_seconds()) < QUOTA_TTL)):
            quota = kept["quota"]
            if quota.sent_last_24_hours is None or not kept["accepted"]:
                return quota
            return dataclasses.replace(quota, sent_last_24_hours=quota.sent_last_24_hours + kept["accepted"])
        try:
            stated = await self.sending_quota()
        except ProviderError as error:
            log.warning("SES's sending quota cannot be read (%s); the configured caps hold", error)
            quota, ttl = AccountQuota(), QUOTA_RETRY
        else:
            day, rate = stated["max_24_hour_send"], stated["max_send_rate"]
            limited = 0 <= day < math.inf
            quota = AccountQuota(per_day=int(day) if limited else None,
                                 rate_per_second=rate if 0 < rate < math.inf else None,
                                 sent_last_24_hours=int(stated["sent_last_24_hours"]) if limited else None)
            ttl = QUOTA_TTL
        self._quota.update(quota=quota, until=now + ttl, at=at, accepted=0)
        return quota

    # --- suppressions, pushes ---

    async def remove_suppressions(self, address: str) -> list[str]:
        """Take the address off the account's suppression list; the list it was on ("bounces" or
        "complaints", by SES's reason). Safe to repeat."""
        path = f"/v2/email/suppression/addresses/{quote(address, safe='@')}"
        try:
            found = await self._request("GET", path, what="suppression lookup")
        except ProviderRejected as error:
            if error.status_code == 404:
                return []
            raise
        reason = ((found or {}).get("SuppressedDestination") or {}).get("Reason")
        try:
            await self._request("DELETE", path, what="removal from the suppression list")
        except ProviderRejected as error:
            if error.status_code == 404:
                return []
            raise
        return ["complaints" if reason == "COMPLAINT" else "bounces"]

    async def register_push(self, url: str) -> dict[str, str]:
        """SES's events reach us through the configuration set's SNS topic: subscribe `url` to it
        (SNS Subscribe; the receiver confirms the subscription when SNS asks). One subscription
        covers every kind: {"subscription": created (new, awaiting confirmation), added (another
        URL was there) or unchanged (already subscribed)}. Subscribing again is harmless."""
        if not self.topic_arn:
            raise ProviderRejected("PRESSROOM_SES_TOPIC_ARN is not set: there is no topic to subscribe to")
        listed = await self._sns({"Action": "ListSubscriptionsByTopic", "TopicArn": self.topic_arn},
                                 "SNS subscriptions query")
        endpoints = {html.unescape(found) for found in _ENDPOINT.findall(listed)}
        if url in endpoints:
            return {"subscription": "unchanged"}
        await self._sns({"Action": "Subscribe", "TopicArn": self.topic_arn,
                         "Protocol": "https" if url.startswith("https:") else "http", "Endpoint": url},
                        "SNS subscription")
        return {"subscription": "added" if endpoints else "created"}

    async def _sns(self, action: dict[str, str], what: str) -> str:
        """One call of SNS's query API; its XML answer as text (only endpoints are read from it)."""
        form = urlencode({**action, "Version": "2010-03-31"}).encode()
        return await self._request("POST", "", what=what, content=form, base=self.sns_endpoint, service="sns",
                                   content_type="application/x-www-form-urlencoded")

    # --- HTTP and errors ---

    def _signed(self, method: str, url: str, content: bytes, service: str, content_type: str) -> dict[str, str]:
        request = AWSRequest(method=method, url=url, data=content, headers={"Content-Type": content_type} if content
                             else {})
        SigV4Auth(self._credentials, service, self.region).add_auth(request)
        return dict(request.headers.items())

    async def _request(self, method: str, path: str, *, what: str, body: Any = None, content: bytes = b"",
                       base: str | None = None, service: str = "ses",
                       content_type: str = "application/json") -> Any:
        url = f"{base or self.endpoint}{path}"
        content = json.dumps(body).encode() if body is not None else content
        try:
            response = await self._http.request(method, url, content=content or None,
                                                headers=self._signed(method, url, content, service, content_type))
        except httpx.TransportError as error:
            if isinstance(error, _NEVER_SENT):
                raise ProviderUnavailable(f"SES could not be reached at {self.endpoint} ({type(error).__name__}); "
                                          f"the {what} was not sent", may_have_been_accepted=False) from None
            raise ProviderUnavailable(f"SES did not answer the {what} ({type(error).__name__}); "
                                      "it may have been accepted") from None
        if response.is_success and service == "sns":
            return response.text  # SNS's query API answers XML; only the subscription's state is read
        if response.is_success:
            try:
                return response.json() if response.content else {}
            except ValueError:
                raise ProviderBadResponse(f"SES answered the {what} with a body that is not JSON",
                                          status_code=response.status_code) from None
        raise status_error(response, what)


def status_error(response: httpx.Response, what: str) -> ProviderError:
    """SES's error answer (`x-amzn-ErrorType` names it) as the port's error, without the message's
    text where it may quote an address."""
    status = response.status_code
    kind = response.headers.get("x-amzn-ErrorType", "").split(":")[0]
    kind = kind if _ERROR_TYPE.fullmatch(kind) else ""  # a header: only a name of SES's reaches a message
    try:
        said = str((response.json() or {}).get("message", ""))
    except ValueError:
        said = ""
    kind = kind or "an error"
    if status == 429 or kind in ("TooManyRequestsException", "ThrottlingException", "Throttling"):
        daily = "daily" in said.lower()
        return ProviderRateLimited(f"SES throttled the {what} ({kind}{': daily quota' if daily else ''})",
                                   status_code=status, retry_after=DAILY_QUOTA_WAIT if daily else 1.0)
    if status in (401, 403):
        return ProviderRejected(f"SES refused the credentials ({status} {kind}): check AWS_ACCESS_KEY_ID, "
                                "AWS_SECRET_ACCESS_KEY and the key's permissions", status_code=status)
    if kind == "LimitExceededException" and "destination" in said.lower():
        return RecipientLimitExceeded(f"SES refused the {what} for its number of destinations", status_code=status)
    if status >= 500:
        return ProviderUnavailable(f"SES failed the {what} ({status} {kind})", status_code=status)
    return ProviderRejected(f"SES rejected the {what} ({status} {kind})", status_code=status)


def _filled(text: str, values: Mapping[str, Any]) -> str:
    """A header's placeholders filled with one recipient's values (empty when unknown)."""
    return fill_placeholders(text, lambda n: str(values.get(n, "")))
