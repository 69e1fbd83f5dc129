"""A local Amazon SES (API v2) and SNS of our own, over real HTTP, with the documented worst cases.

Tests start it in-process on a random port (`running_ses_simulator()`); it plays:

* `POST /v2/email/outbound-bulk-emails` (SendBulkEmail) and `POST /v2/email/outbound-emails`
  (SendEmail, one destination): every request's SigV4 signature checked (service "ses", the
  region, the key pair the simulator was made with; 403 `SignatureDoesNotMatch` /
  `InvalidClientTokenId` otherwise), at most 50 destinations (400 `BadRequestException`), each
  destination answered apart (`SUCCESS` and its MessageId, or `MESSAGE_REJECTED` for an address in
  `refused`). The inline template is filled per destination (`{{{name}}}`, `\\{{` literal), so
  `received(address)` is what the reader reads; replacement headers are kept per destination.
* `GET|DELETE /v2/email/suppression/addresses/{address}`: the account's suppression list.
* `GET|POST /_sim/follow`: readers and mail scanners following the delivered copies' tracked links
  (devstack/link_followers.py).
* SNS at `POST /sns` (Action=Subscribe, signed for service "sns"): a subscription is confirmed by
  a GET of the SubscribeURL the simulator sends in a SubscriptionConfirmation.
* SES's events (Send, Delivery, and Bounce / Complaint / Open / Reject on demand) as SNS
  notifications of one topic, SignatureVersion 2 (SHA256 with RSA) with a certificate of its own
  (`certificate_pem`, served at `/sns/cert.pem`), which only the development configuration trusts.
  `notifications(visible_only=True)` hands them to a test; `push_to_subscribers()` POSTs them.

Worst cases (`SesFaults`): throttling (429 TooManyRequestsException, "Maximum sending rate
exceeded."), the daily quota ("Daily message quota exceeded."), 500 before or after accepting, an
answer lost after accepting (the connection dropped), a recipient limit of the account, and for
the pushes: delay, duplicates, reordering.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import hmac
import itertools
import json
import os
import re
import signal
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote
from xml.sax.saxutils import escape as xml_escape

import aiohttp
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from devstack.files import private_file
from devstack.link_followers import Following, LinkFollowers

MAX_DESTINATIONS = 50
_AUTH = re.compile(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
                   r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})")
_PLACEHOLDER = re.compile(r"(?<!\\)\{\{\{([A-Za-z0-9_]+)\}\}\}")
_SIGNED_FIELDS = {"Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
                  "SubscriptionConfirmation": ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token",
                                               "TopicArn", "Type")}


@dataclass
class SesFaults:
    """What goes wrong; counts are of the next send calls, used up as they happen."""

    throttled: int = 0  # 429 "Maximum sending rate exceeded."
    daily_quota: bool = False  # every send: 429 "Daily message quota exceeded."
    server_errors: int = 0  # 500, nothing accepted
    errors_after_accept: int = 0  # 500 after accepting
    lost_answers: int = 0  # accepted, then the connection is dropped
    # The next this many destinations at odd places of a call (2nd, 4th, ...) are answered
    # ACCOUNT_THROTTLED in a call that accepts the others: a documented per-destination status.
    throttled_destinations: int = 0
    recipient_limit: int | None = None  # more destinations than this: 400 LimitExceededException
    events_delay: float = 0.0  # a notification is visible this long after its event
    duplicate_pushes: bool = False  # every notification pushed twice
    reorder_pushes: bool = False  # notifications pushed newest first
    latency_ms: float = 0.0  # added to every send call, before it is answered


@dataclass
class Delivered:
    """One accepted copy: one destination of a send call."""

    message_id: str
    address: str
    subject: str
    html: str
    text: str
    headers: dict[str, str]
    tags: dict[str, str]
    accepted_at: float


@dataclass
class _Notification:
    """An event's notification; signed when first read or pushed (an RSA signature per event would
    cost a send more than everything else the stand-in does)."""

    visible_at: float
    unsigned: dict[str, Any]
    signer: Any
    kind: str = ""
    tags: dict[str, str] = field(default_factory=dict)  # the copy's, to find an email's notifications
    taken_by: set[str] = field(default_factory=set)  # the endpoints that answered 2xx
    _body: dict[str, Any] | None = None

    @property
    def body(self) -> dict[str, Any]:
        if self._body is None:
            self._body = self.signer(self.unsigned)
        return self._body


def _fill(template: str, values: dict[str, Any]) -> str:
    return _PLACEHOLDER.sub(lambda match: str(values.get(match.group(1), "")), template).replace("\\{{", "{{")


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _sign(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def sigv4_signature(*, secret: str, method: str, path: str, query: str, headers: dict[str, str],
                    signed_headers: list[str], body: bytes, amz_date: str, region: str, service: str) -> str:
    """SigV4 written out from AWS's specification (not botocore's code): what the client's signer
    must have produced."""
    canonical_query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}"
                               for k, v in sorted(parse_qsl(query, keep_blank_values=True)))
    canonical_headers = "".join(f"{name}:{' '.join(headers.get(name, '').split())}\n" for name in signed_headers)
    canonical = "\n".join((method, quote(unquote(path), safe="/~"), canonical_query, canonical_headers,
                           ";".join(signed_headers), hashlib.sha256(body).hexdigest()))
    scope = f"{amz_date[:8]}/{region}/{service}/aws4_request"
    to_sign = "\n".join(("AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()))
    key = _sign(_sign(_sign(_sign(f"AWS4{secret}".encode(), amz_date[:8]), region), service), "aws4_request")
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def _certificate() -> tuple[rsa.RSAPrivateKey, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns.simulator.test")])
    now = datetime.now(UTC)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(days=1))
                   .not_valid_after(now + timedelta(days=30)).sign(key, hashes.SHA256()))
    return key, certificate.public_bytes(serialization.Encoding.PEM)


class SesSimulator:
    def __init__(self, *, region: str = "us-east-1", access_key_id: str = "AKIASIMULATOR",
                 secret_access_key: str = "simulator-secret", domain: str = "ses.simulator.test",
                 configuration_set: str = "pressroom", account: str = "123456789012",
                 topic: str = "pressroom-ses-events") -> None:
        self.region, self.access_key_id, self.secret_access_key = region, access_key_id, secret_access_key
        self.domain, self.configuration_set = domain, configuration_set
        self.topic_arn = f"arn:aws:sns:{region}:{account}:{topic}"
        self._key, self.certificate_pem = _certificate()
        self.base_url = ""
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task] = set()
        self.links = LinkFollowers()
        self.reset()

    def reset(self) -> None:
        self.faults = SesFaults()
        self.offset = 0.0
        self.delivered: list[Delivered] = []
        self.suppressed: dict[str, str] = {}  # address → BOUNCE | COMPLAINT
        self.refused: set[str] = set()  # destinations answered MESSAGE_REJECTED
        self.refused_for_now: set[str] = set()  # destinations always answered TRANSIENT_FAILURE
        self.subscriptions: dict[str, dict[str, Any]] = {}  # endpoint → {"arn", "token", "confirmed"}
        self.send_confirmations = True  # off: a test's made-up endpoints are never called
        self.max_24_hour_send, self.max_send_rate = 50_000.0, 14.0  # the account's quota (GetAccount)
        # On: a call's notifications are pushed to the subscribers before the call is answered, as if SNS
        # took no time, so a test on the time-skipping server (where a confirm window passes in an
        # instant) never races the pushes.
        self.auto_push = False
        self.opens = False  # on: every delivered copy is opened too (the development stack's readers)
        # The account's identities (a domain or an address) → verified for sending. SES refuses mail
        # from an address whose identity (itself or its domain) is not verified; `check_senders` on
        # plays that refusal (off by default: most tests send from example.com).
        self.identities: dict[str, bool] = {self.domain: True}
        self.check_senders = False
        self.links.following = Following()  # readers and scanners following the copies' tracked links
        self._notifications: list[_Notification] = []
        self._ids = itertools.count()
        self.requests = {"send": 0, "refused_signature": 0, "refused_for_now": 0}

    # --- for tests ---

    def now(self) -> float:
        return datetime.now(UTC).timestamp() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds

    def set_faults(self, **changes: Any) -> None:
        for name, value in changes.items():
            if not hasattr(self.faults, name):
                raise ValueError(f"no fault {name!r}")
            setattr(self.faults, name, value)

    def suppress(self, address: str, reason: str = "BOUNCE") -> None:
        self.suppressed[address.casefold()] = reason

    def sent_last_24_hours(self) -> int:
        """What GetAccount reports: the copies accepted in the rolling day, by the stand-in's clock."""
        since = self.now() - 86_400
        return sum(1 for copy in self.delivered if copy.accepted_at > since)

    def received(self, address: str) -> tuple[str, str, str]:
        copy = next(d for d in self.delivered if d.address == address)
        return copy.subject, copy.html, copy.text

    def notifications(self, *, visible_only: bool = True) -> list[dict[str, Any]]:
        """The signed SNS notifications visible now (after `events_delay`), as SNS would POST them."""
        now = self.now()
        return [n.body for n in self._notifications if not visible_only or n.visible_at <= now]

    def unpushed(self, email_id: str, kind: str = "Send") -> int:
        """How many `kind` events of the email's copies some confirmed subscriber has not taken yet."""
        endpoints = [endpoint for endpoint, s in self.subscriptions.items() if s["confirmed"]]
        return sum(1 for n in self._notifications
                   if n.kind == kind and n.tags.get("email-id") == email_id and not n.taken_by.issuperset(endpoints))

    def add_event(self, kind: str, copy: Delivered, **detail: Any) -> None:
        """An SES event of `kind` (Send, Delivery, Bounce, Complaint, Open, Reject, Rendering Failure)
        for one copy, now."""
        moment = self.now()
        event: dict[str, Any] = {
            "eventType": kind,
            "mail": {"timestamp": _iso(copy.accepted_at), "messageId": copy.message_id, "source": self.domain,
                     "destination": [copy.address],
                     "tags": {name: [value] for name, value in copy.tags.items()}}}
        if kind == "Delivery":
            event["delivery"] = {"timestamp": _iso(moment), "recipients": [copy.address]}
        elif kind == "Bounce":
            event["bounce"] = {"bounceType": detail.get("bounce_type", "Permanent"), "bounceSubType": "General",
                               "timestamp": _iso(moment), "bouncedRecipients": [{
                                   "emailAddress": copy.address, "status": "5.1.1",
                                   "diagnosticCode": "smtp; 550 5.1.1 user unknown"}]}
        elif kind == "Complaint":
            event["complaint"] = {"timestamp": _iso(moment), "complainedRecipients": [{"emailAddress": copy.address}]}
        elif kind == "Open":
            event["open"] = {"timestamp": _iso(moment), "ipAddress": "192.0.2.1", "userAgent": "sim"}
        elif kind == "Reject":
            event["reject"] = {"reason": "Bad content"}
        elif kind == "Rendering Failure":
            event["failure"] = {"templateName": "pressroom-newsletter",
                                "errorMessage": "Attribute 'name' is not present in the rendering data."}
        else:
            event["send"] = {}
        notification = _Notification(moment + self.faults.events_delay,
                                     self._unsigned("Notification", json.dumps(event), subject=None), self._sign_body,
                                     kind, copy.tags)
        self._notifications.append(notification)

    # --- signing ---

    def _signed_message(self, kind: str, message: str, *, subject: str | None = None,
                        **extra: str) -> dict[str, Any]:
        return self._sign_body(self._unsigned(kind, message, subject=subject, **extra))

    def _unsigned(self, kind: str, message: str, *, subject: str | None = None, **extra: str) -> dict[str, Any]:
        body: dict[str, Any] = {"Type": kind, "MessageId": str(uuid.uuid4()), "TopicArn": self.topic_arn,
                                "Message": message, "Timestamp": _iso(self.now()), "SignatureVersion": "2",
                                "SigningCertURL": f"{self.base_url}/sns/cert.pem", **extra}
        if kind == "Notification":
            body["Subject"] = subject
            body["UnsubscribeURL"] = f"{self.base_url}/sns/unsubscribe"
        return body

    def _sign_body(self, body: dict[str, Any]) -> dict[str, Any]:
        kind = body["Type"]
        text = "".join(f"{name}\n{body[name]}\n" for name in _SIGNED_FIELDS[kind]
                       if not (name == "Subject" and body.get(name) is None))
        body["Signature"] = base64.b64encode(self._key.sign(text.encode(), padding.PKCS1v15(),
                                                            hashes.SHA256())).decode()
        return body

    def _check_signature(self, request: web.Request, body: bytes, service: str) -> web.Response | None:
        match = _AUTH.fullmatch(request.headers.get("Authorization", ""))
        amz_date = request.headers.get("X-Amz-Date", "")
        if match is None or not amz_date:
            self.requests["refused_signature"] += 1
            return _error(403, "MissingAuthenticationTokenException", "Missing Authentication Token")
        key_id, date, region, signed_service, signed_headers, given = match.groups()
        if key_id != self.access_key_id:
            self.requests["refused_signature"] += 1
            return _error(403, "InvalidClientTokenId", "The security token included in the request is invalid.")
        expected = sigv4_signature(
            secret=self.secret_access_key, method=request.method, path=request.raw_path.split("?")[0],
            query=request.query_string, headers={k.lower(): v for k, v in request.headers.items()},
            signed_headers=signed_headers.split(";"), body=body, amz_date=amz_date, region=self.region,
            service=service)
        if (date != amz_date[:8] or region != self.region or signed_service != service
                or "host" not in signed_headers.split(";") or not hmac.compare_digest(expected, given)):
            self.requests["refused_signature"] += 1
            return _error(403, "SignatureDoesNotMatch", "The request signature we calculated does not match")
        return None

    # --- the server ---

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        app = web.Application(client_max_size=40 * 1024 * 1024)
        app.add_routes([
            web.post("/v2/email/outbound-bulk-emails", self._send_bulk),
            web.post("/v2/email/outbound-emails", self._send_one),
            web.get("/v2/email/account", self._account),
            web.get("/v2/email/identities/{identity}", self._identity),
            web.get("/v2/email/suppression/addresses/{address}", self._suppression),
            web.delete("/v2/email/suppression/addresses/{address}", self._suppression),
            web.post("/sns", self._sns),
            web.get("/sns/confirm", self._confirm),
            web.get("/sns/cert.pem", self._cert),
            web.get("/_sim/follow", self._follow),
            web.post("/_sim/follow", self._follow),
        ])
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        await web.SockSite(self._runner, sock).start()
        self.base_url = f"http://{host}:{sock.getsockname()[1]}"
        return self.base_url

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await self.links.close()
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _send_bulk(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if refused := self._check_signature(request, body, "ses"):
            return refused
        self.requests["send"] += 1
        try:
            call = json.loads(body)
            entries = call["BulkEmailEntries"]
            content = call["DefaultContent"]["Template"]["TemplateContent"]
            if not isinstance(entries, list) or not entries:
                raise ValueError
        except (ValueError, KeyError, TypeError):
            return _error(400, "BadRequestException", "BulkEmailEntries and DefaultContent are required")
        return await self._accept(request, call, content, entries)

    async def _send_one(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if refused := self._check_signature(request, body, "ses"):
            return refused
        self.requests["send"] += 1
        try:
            call = json.loads(body)
            simple = call["Content"]["Simple"]
            content = {"Subject": simple["Subject"]["Data"], "Html": simple["Body"]["Html"]["Data"],
                       "Text": simple["Body"]["Text"]["Data"]}
            entry = {"Destination": call["Destination"],
                     "ReplacementHeaders": simple.get("Headers", [])}
        except (ValueError, KeyError, TypeError):
            return _error(400, "BadRequestException", "Destination and Content are required")
        response = await self._accept(request, {**call, "DefaultEmailTags": call.get("EmailTags", [])}, content,
                                      [entry])
        if isinstance(response, web.Response) and response.status == 200:
            result = json.loads(response.body)["BulkEmailEntryResults"][0]
            if result["Status"] != "SUCCESS":
                return _error(400, "MessageRejected", "Email address is not verified.")
            return web.json_response({"MessageId": result["MessageId"]})
        return response

    def sender_verified(self, address: str) -> bool:
        return self.identities.get(address.casefold()) is True \
            or self.identities.get(address.rpartition("@")[2].casefold()) is True

    async def _identity(self, request: web.Request) -> web.Response:
        if refused := self._check_signature(request, await request.read(), "ses"):
            return refused
        identity = request.match_info["identity"].casefold()
        if identity not in self.identities:
            return _error(404, "NotFoundException", f"Email identity {identity} does not exist.")
        verified = self.identities[identity]
        return web.json_response({
            "IdentityType": "EMAIL_ADDRESS" if "@" in identity else "DOMAIN",
            "VerifiedForSendingStatus": verified, "VerificationStatus": "SUCCESS" if verified else "PENDING",
            "DkimAttributes": {"SigningEnabled": True, "Status": "SUCCESS" if verified else "PENDING"},
            "MailFromAttributes": {"MailFromDomain": "", "MailFromDomainStatus": "SUCCESS" if verified else "PENDING",
                                   "BehaviorOnMxFailure": "USE_DEFAULT_VALUE"}})

    async def _accept(self, request: web.Request, call: dict[str, Any], content: dict[str, str],
                      entries: list[dict[str, Any]]) -> web.StreamResponse:
        faults = self.faults
        sender = str(call.get("FromEmailAddress", ""))
        if self.check_senders and not self.sender_verified(sender.rpartition("<")[2].rstrip(">")):
            return _error(400, "MessageRejected", "Email address is not verified. The following identities failed "
                                                  f"the check in region {self.region.upper()}: {sender}")
        if faults.latency_ms:
            await asyncio.sleep(faults.latency_ms / 1000)
        refused = self._whole_call_refused(len(entries))
        if refused is not None:
            return refused
        tags = {tag["Name"]: tag["Value"] for tag in call.get("DefaultEmailTags", [])}
        results = [self._entry_result(place, entry, content, tags) for place, entry in enumerate(entries)]
        if self.auto_push:
            with contextlib.suppress(aiohttp.ClientError):  # the receiver is down: as with SNS, the send goes on
                await self.push_to_subscribers()
        if faults.errors_after_accept:
            faults.errors_after_accept -= 1
            return _error(500, "InternalFailure", "An internal error occurred.")
        if faults.lost_answers:
            faults.lost_answers -= 1
            if request.transport is not None:
                request.transport.abort()  # accepted, but the client never hears so
            return web.Response(status=500)
        return web.json_response({"BulkEmailEntryResults": results})

    def _whole_call_refused(self, destinations: int) -> web.Response | None:
        """The refusals SES gives a whole SendBulkEmail call before it looks at any entry."""
        faults = self.faults
        if destinations > MAX_DESTINATIONS:
            return _error(400, "BadRequestException", f"Too many destinations: at most {MAX_DESTINATIONS}")
        if faults.recipient_limit is not None and destinations > faults.recipient_limit:
            return _error(400, "LimitExceededException", "Too many destinations for this account's sending limits")
        if faults.daily_quota:
            return _error(429, "TooManyRequestsException", "Daily message quota exceeded.")
        if faults.throttled:
            faults.throttled -= 1
            return _error(429, "TooManyRequestsException", "Maximum sending rate exceeded.")
        if faults.server_errors:
            faults.server_errors -= 1
            return _error(500, "InternalFailure", "An internal error occurred.")
        return None

    def _entry_result(self, place: int, entry: dict[str, Any], content: dict[str, str],
                      tags: dict[str, str]) -> dict[str, str]:
        """One destination of a bulk call: refused, refused for now, throttled, or delivered (with its events)."""
        faults = self.faults
        address = entry["Destination"]["ToAddresses"][0]
        if address.casefold() in self.refused:
            return {"Status": "MESSAGE_REJECTED", "Error": "Email address is not verified."}
        if address.casefold() in self.refused_for_now:
            self.requests["refused_for_now"] += 1
            return {"Status": "TRANSIENT_FAILURE", "Error": f"Temporary failure for {address}."}
        if faults.throttled_destinations and place % 2 == 1:
            faults.throttled_destinations -= 1
            self.requests["refused_for_now"] += 1
            return {"Status": "ACCOUNT_THROTTLED", "Error": "Maximum sending rate exceeded."}
        replacement = (entry.get("ReplacementEmailContent") or {}).get("ReplacementTemplate") or {}
        values = json.loads(replacement.get("ReplacementTemplateData") or "{}")
        copy = Delivered(
            message_id=f"0100{next(self._ids):012x}-{uuid.uuid4()}-000000", address=address,
            subject=_fill(content.get("Subject", ""), values), html=_fill(content.get("Html", ""), values),
            text=_fill(content.get("Text", ""), values),
            headers={h["Name"]: h["Value"] for h in entry.get("ReplacementHeaders", [])}, tags=tags,
            accepted_at=self.now())
        self.delivered.append(copy)
        self.add_event("Send", copy)
        self.add_event("Delivery", copy)
        if address.casefold() in self.suppressed:
            self.add_event("Bounce", copy)
        else:
            if self.opens:
                self.add_event("Open", copy)
            self.links.delivered(copy.message_id, copy.html)
        return {"Status": "SUCCESS", "MessageId": copy.message_id}

    async def _follow(self, request: web.Request) -> web.Response:
        """GET|POST /_sim/follow: readers and scanners following tracked links (devstack/link_followers.py)."""
        if request.method == "POST":
            try:
                changes = await request.json()
                if not isinstance(changes, dict):
                    raise ValueError("send a JSON object")
                self.links.following.update(changes)
            except ValueError as error:
                return web.json_response({"message": str(error)}, status=400)
        return web.json_response(self.links.stats())

    async def _account(self, request: web.Request) -> web.Response:
        if refused := self._check_signature(request, await request.read(), "ses"):
            return refused
        return web.json_response({"SendQuota": {"Max24HourSend": self.max_24_hour_send,
                                                "MaxSendRate": self.max_send_rate,
                                                "SentLast24Hours": self.sent_last_24_hours()},
                                  "SendingEnabled": True, "ProductionAccessEnabled": True})

    async def _suppression(self, request: web.Request) -> web.Response:
        if refused := self._check_signature(request, await request.read(), "ses"):
            return refused
        address = request.match_info["address"].casefold()
        reason = self.suppressed.get(address)
        if reason is None:
            return _error(404, "NotFoundException", "Email address is not on the suppression list")
        if request.method == "DELETE":
            del self.suppressed[address]
            return web.json_response({})
        return web.json_response({"SuppressedDestination": {"EmailAddress": request.match_info["address"],
                                                            "Reason": reason}})

    async def _sns(self, request: web.Request) -> web.Response:
        body = await request.read()
        if refused := self._check_signature(request, body, "sns"):
            return refused
        form = dict(parse_qsl(body.decode()))
        if form.get("Action") == "ListSubscriptionsByTopic" and form.get("TopicArn") == self.topic_arn:
            members = "".join(f"<member><Endpoint>{xml_escape(endpoint)}</Endpoint><SubscriptionArn>"
                              f"{s['arn'] if s['confirmed'] else 'PendingConfirmation'}</SubscriptionArn></member>"
                              for endpoint, s in self.subscriptions.items())
            return web.Response(content_type="text/xml", text=(
                '<ListSubscriptionsByTopicResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/">'
                f"<ListSubscriptionsByTopicResult><Subscriptions>{members}</Subscriptions>"
                "</ListSubscriptionsByTopicResult></ListSubscriptionsByTopicResponse>"))
        if form.get("Action") != "Subscribe" or form.get("TopicArn") != self.topic_arn \
                or form.get("Protocol") not in ("http", "https") or not form.get("Endpoint"):
            return _error(400, "InvalidParameter", "Subscribe needs our TopicArn, http(s) and an Endpoint")
        endpoint = form["Endpoint"]
        known = self.subscriptions.get(endpoint)
        if known is None:
            known = self.subscriptions[endpoint] = {"arn": f"{self.topic_arn}:{uuid.uuid4()}",
                                                    "token": uuid.uuid4().hex, "confirmed": False}
            if self.send_confirmations:
                self._background(self._send_confirmation(endpoint, known["token"]))
        arn = known["arn"] if known["confirmed"] else "pending confirmation"
        return web.Response(content_type="text/xml", text=(
            '<SubscribeResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/"><SubscribeResult>'
            f"<SubscriptionArn>{arn}</SubscriptionArn></SubscribeResult></SubscribeResponse>"))

    async def _send_confirmation(self, endpoint: str, token: str) -> None:
        body = self._signed_message(
            "SubscriptionConfirmation", f"You have chosen to subscribe to the topic {self.topic_arn}.",
            Token=token, SubscribeURL=f"{self.base_url}/sns/confirm?Token={token}")
        with contextlib.suppress(aiohttp.ClientError):  # not reachable yet: confirm by hand, as with SNS
            await self._post(endpoint, body)

    async def _confirm(self, request: web.Request) -> web.Response:
        token = request.query.get("Token", "")
        for subscription in self.subscriptions.values():
            if subscription["token"] == token:
                subscription["confirmed"] = True
                return web.Response(content_type="text/xml", text="<ConfirmSubscriptionResponse/>")
        return _error(404, "NotFound", "no such subscription token")

    async def _cert(self, request: web.Request) -> web.Response:
        return web.Response(body=self.certificate_pem, content_type="application/x-pem-file")

    # --- pushing ---

    async def push_forever(self, every: float = 0.2) -> None:
        """Push what became visible (late events included) to the subscribers, until cancelled."""
        while True:
            with contextlib.suppress(aiohttp.ClientError):  # the receiver is down: SNS tries again, and so does this
                await self.push_to_subscribers()
            await asyncio.sleep(every)

    def _background(self, work) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post(self, endpoint: str, body: dict[str, Any]) -> int:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        async with self._session.post(endpoint, data=json.dumps(body), headers={
                "Content-Type": "text/plain; charset=UTF-8", "x-amz-sns-message-type": body["Type"],
                "x-amz-sns-message-id": body["MessageId"], "x-amz-sns-topic-arn": self.topic_arn}) as response:
            return response.status

    async def push_to_subscribers(self) -> dict[str, int]:
        """POST every visible notification to each confirmed subscription that has not taken it (2xx)
        yet, with the duplicate / reorder switches; the answers' counts by status ("unreachable":
        no answer). As with SNS, an endpoint that is down holds back no other endpoint."""
        endpoints = [endpoint for endpoint, s in self.subscriptions.items() if s["confirmed"]]
        due = [n for n in self._notifications if n.visible_at <= self.now() and not n.taken_by.issuperset(endpoints)]
        if self.faults.reorder_pushes:
            due.reverse()
        counts: dict[str, int] = {}
        down: set[str] = set()  # not tried again in this round
        for notification in due:
            for endpoint in endpoints:
                if endpoint in notification.taken_by or endpoint in down:
                    continue
                taken = True
                for _ in range(2 if self.faults.duplicate_pushes else 1):
                    try:
                        status = str(await self._post(endpoint, notification.body))
                    except (TimeoutError, aiohttp.ClientError):
                        status = "unreachable"
                        down.add(endpoint)
                    counts[status] = counts.get(status, 0) + 1
                    taken = taken and status.isdigit() and 200 <= int(status) < 300
                if taken:
                    notification.taken_by.add(endpoint)
        return counts


def _error(status: int, kind: str, message: str) -> web.Response:
    return web.json_response({"message": message}, status=status, headers={"x-amzn-ErrorType": f"{kind}:"})


@asynccontextmanager
async def running_ses_simulator(**kwargs: Any) -> AsyncIterator[SesSimulator]:
    simulator = SesSimulator(**kwargs)
    await simulator.start()
    try:
        yield simulator
    finally:
        await simulator.stop()


DEVELOPMENT_SENDER_DOMAINS = ("example.com", "demo.pressroom.test")
# The secret key comes from the environment: a command line is readable by every local account.
SECRET_KEY_VARIABLE = "PRESSROOM_SES_SIMULATOR_SECRET_KEY"


async def _serve(args: argparse.Namespace, secret: str) -> None:

    simulator = SesSimulator(region=args.region, access_key_id=args.access_key_id, secret_access_key=secret,
                             domain=args.domain)
    simulator.opens = True
    # The development site sends from example.com (PRESSROOM_FROM_ADDRESS's default) and the demo's
    # newsletter from its own domain, both verified here as a site verifies its domains; any other
    # sender is refused, as SES refuses it.
    for domain in DEVELOPMENT_SENDER_DOMAINS:
        simulator.identities[domain] = True
    simulator.check_senders = True
    # Written before the port opens, so whoever waits for the port finds it. The receiver trusts it
    # only through PRESSROOM_SES_SNS_DEV_CERTIFICATE, and only for certificate URLs on the loopback.
    private_file(args.certificate_out, simulator.certificate_pem.decode())
    url = await simulator.start(args.host, args.port)
    print(f"SES stand-in for {args.domain} on {url}, topic {simulator.topic_arn}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(number, stop.set)
    pushing = loop.create_task(simulator.push_forever())
    await stop.wait()
    pushing.cancel()
    await simulator.stop()


def main(argv: list[str] | None = None) -> None:

    parser = argparse.ArgumentParser(prog="python -m devstack.ses_simulator",
                                     description="A local Amazon SES and SNS topic for development.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--access-key-id", default="AKIASIMULATOR")
    parser.add_argument("--domain", default="ses.pressroom.test")
    parser.add_argument("--certificate-out", type=Path, required=True,
                        help="where to write the certificate its SNS notifications are signed with")
    args = parser.parse_args(argv)
    secret = os.environ.get(SECRET_KEY_VARIABLE, "")
    if not secret:
        parser.error(f"{SECRET_KEY_VARIABLE} is not set: the secret access key the stand-in accepts")
    asyncio.run(_serve(args, secret))


if __name__ == "__main__":
    main()
