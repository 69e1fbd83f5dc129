"""SNS's signed pushes of SES's events, received on /webhooks/ses by the front door's receiver.

Every SNS message is checked where it enters: its fields, SignatureVersion 2 (SHA256 with RSA over
SNS's canonical string), the signing certificate fetched over HTTPS only from
https://sns.<region>.amazonaws.com (cached per URL), the topic ours, the timestamp fresh. The
development configuration trusts one more certificate, the SES stand-in's own
(PRESSROOM_SES_SNS_DEV_CERTIFICATE), for certificate URLs on the loopback only. Then
* a SubscriptionConfirmation is confirmed here (a GET of its SubscribeURL, on SNS's host only);
* a Send event carrying our marks is kept in `provider_acceptances` by the receiver, what an
  uncertain send is confirmed from (SES has no events API to ask: `acceptance_marks`);
* every other event is stored in `webhook_inbox`, applied like Mailgun's by WebhookInboxWorkflow.
SNS's retries and duplicates (the same MessageId) store nothing and are answered 200, so that SNS
stops sending them; a refusal is answered 400.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
from datetime import datetime
from typing import Any

import httpx
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from pressroom.delivery_events import DeliveryEvent, EventRejected
from pressroom.providers.port import PushedEvent
from pressroom.providers.ses.events import PROVIDER, marks_of, parse_event

log = logging.getLogger("pressroom.webhooks")
# SNS retries a notification for up to an hour by default delivery policy's longest settings; a
# notification older than this is refused, and its MessageId is remembered this long.
SNS_MAX_AGE = 3600

NOTIFICATION = "Notification"
CONFIRMATION = "SubscriptionConfirmation"
_SIGNED = {NOTIFICATION: ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
           CONFIRMATION: ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"),
           "UnsubscribeConfirmation": ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn",
                                       "Type")}
_MESSAGE_ID = re.compile(r"[A-Za-z0-9-]{1,100}")
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
CERTIFICATE_BYTES = 16_384


def string_to_sign(message: dict[str, Any]) -> bytes:
    """SNS's canonical text of a message: its signed fields, in order, "name\\nvalue\\n" each."""
    names = _SIGNED[message["Type"]]
    return "".join(f"{name}\n{message[name]}\n" for name in names
                   if not (name == "Subject" and message.get(name) is None)).encode()


def certificate_url_allowed(url: str, region: str, dev: bool) -> bool:
    """Only SNS's own host of the region over HTTPS; in development also the loopback."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return False
    if parsed.userinfo or parsed.query or parsed.fragment or not parsed.path.endswith(".pem"):
        return False
    if parsed.scheme == "https" and parsed.host == f"sns.{region}.amazonaws.com" and parsed.port in (None, 443):
        return True
    return dev and parsed.host in _LOOPBACK and parsed.scheme in ("http", "https")


class SesPush:
    """SNS notifications of SES's events, received on /webhooks/ses."""

    name = PROVIDER
    path = "/webhooks/ses"
    refused_status = 400
    replay_refused = False  # SNS's retries and duplicates are answered as stored: it stops sending them

    def __init__(self, *, topic_arn: str, region: str, dev_certificate: bytes | None = None,
                 http: httpx.AsyncClient | None = None) -> None:
        self.topic_arn = topic_arn
        self.region = region
        self._dev = x509.load_pem_x509_certificate(dev_certificate) if dev_certificate else None
        self._http = http
        self._certificates: dict[str, x509.Certificate] = {}

    def __repr__(self) -> str:
        return f"SesPush(topic_arn={self.topic_arn!r})"

    def parse_event(self, item: Any) -> DeliveryEvent | EventRejected:
        return parse_event(item)

    def acceptance_marks(self, item: Any, event: DeliveryEvent) -> dict[str, str] | None:
        return marks_of(item["event"]) if event.kind == "accepted" else None

    async def verify(self, body: Any, now: float, max_age: float, retry_window: float | None = None) -> PushedEvent:
        """The port's check, SNS's way: its own age limit (`SNS_MAX_AGE`) rather than Mailgun's."""
        message = self.checked_fields(body)
        certificate = await self.certificate(message["SigningCertURL"])
        pushed = self.verify_with(message, certificate, now, SNS_MAX_AGE)
        if message["Type"] == CONFIRMATION:
            await self._confirm(message)
            return PushedEvent(timestamp=pushed.timestamp, identity=pushed.identity, item=None, said="confirmed")
        if message["Type"] != NOTIFICATION:
            return PushedEvent(timestamp=pushed.timestamp, identity=pushed.identity, item=None)
        return PushedEvent(timestamp=pushed.timestamp, identity=pushed.identity, item=pushed.item,
                           keep_seconds=SNS_MAX_AGE)

    async def _confirm(self, message: dict[str, Any]) -> None:
        url = self.subscribe_url(message)
        async with httpx.AsyncClient(timeout=10.0, follow_redirects=False) as http:
            try:
                response = await http.get(url)
            except httpx.HTTPError as error:
                raise ConnectionError(f"SNS's SubscribeURL did not answer ({type(error).__name__})") from None
        if not response.is_success:
            raise ConnectionError(f"SNS answered the subscription's confirmation with {response.status_code}")
        log.info("SNS subscription to %s confirmed", message["TopicArn"])

    def checked_fields(self, body: Any) -> dict[str, Any]:
        """The message's fields, of the right types and topic, or ValueError (one line)."""
        if not isinstance(body, dict) or body.get("Type") not in _SIGNED:
            raise ValueError("not an SNS message")
        for name in _SIGNED[body["Type"]]:
            if not isinstance(body.get(name), str) and not (name == "Subject" and body.get(name) is None):
                raise ValueError(f"SNS field {name} missing")
        if not _MESSAGE_ID.fullmatch(body["MessageId"]):
            raise ValueError("SNS MessageId malformed")
        if body["TopicArn"] != self.topic_arn:
            raise ValueError("topic not ours")
        if body.get("SignatureVersion") != "2":
            raise ValueError("SignatureVersion is not 2 (set the topic's SignatureVersion attribute to 2)")
        if not isinstance(body.get("Signature"), str) or not isinstance(body.get("SigningCertURL"), str):
            raise ValueError("no signature")
        if not certificate_url_allowed(body["SigningCertURL"], self.region, self._dev is not None):
            raise ValueError("certificate URL not SNS's")
        return body

    async def certificate(self, url: str) -> x509.Certificate:
        """The signing certificate: the development one on the loopback, else fetched (and kept)."""
        if self._dev is not None and httpx.URL(url).host in _LOOPBACK:
            return self._dev
        if url not in self._certificates:
            if self._http is None:
                self._http = httpx.AsyncClient(timeout=10.0, follow_redirects=False)
            try:
                response = await self._http.get(url)
            except httpx.HTTPError as error:
                raise ConnectionError(f"SNS's certificate could not be fetched ({type(error).__name__})") from None
            if response.status_code != 200 or len(response.content) > CERTIFICATE_BYTES:
                raise ValueError(f"SNS's certificate URL answered {response.status_code}")
            try:
                self._certificates[url] = x509.load_pem_x509_certificate(response.content)
            except ValueError:
                raise ValueError("SNS's certificate is not a PEM certificate") from None
        return self._certificates[url]

    def verify_with(self, message: dict[str, Any], certificate: x509.Certificate, now: float,
                    max_age: float) -> PushedEvent:
        """The checked message's signature (SHA256 with RSA) and age; ValueError otherwise."""
        try:
            signature = base64.b64decode(message["Signature"], validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("signature not base64") from None
        key = certificate.public_key()
        if not isinstance(key, rsa.RSAPublicKey):
            raise ValueError("certificate key not RSA")
        try:
            key.verify(signature, string_to_sign(message), padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            raise ValueError("signature does not match") from None
        try:
            timestamp = datetime.fromisoformat(message["Timestamp"].replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise ValueError("timestamp malformed") from None
        if abs(now - timestamp) > max_age:
            raise ValueError("timestamp stale")
        item: Any = None
        if message["Type"] == NOTIFICATION:
            try:
                item = {"notification": message["MessageId"], "event": json.loads(message["Message"])}
            except ValueError:
                item = {"notification": message["MessageId"], "event": None}
        return PushedEvent(timestamp=int(timestamp), identity=message["MessageId"], item=item)

    def subscribe_url(self, message: dict[str, Any]) -> str:
        """Where a checked SubscriptionConfirmation is confirmed: SNS's host of the region only."""
        url = message["SubscribeURL"]
        parsed = httpx.URL(url)
        aws = parsed.scheme == "https" and parsed.host == f"sns.{self.region}.amazonaws.com"
        if not (aws or (self._dev is not None and parsed.host in _LOOPBACK)):
            raise ValueError("SubscribeURL not SNS's")
        return url

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
