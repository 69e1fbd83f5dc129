"""The front door, `pressroom serve`: everything that reaches Pressroom from the internet, in one
stateless server behind the operator's TLS proxy.

- GET /unsubscribe/?uuid=…&key=…[&newsletter=…][&email=…]: a small page (which newsletter, the
  address masked, a button, and "all newsletters"). It never changes anything: mail scanners open
  every link.
- POST /unsubscribe/ (same query): RFC 8058's one-click request (`List-Unsubscribe=One-Click` as a
  form body) and the page's buttons (`scope=all` for every newsletter).
- POST /webhooks/mailgun: the provider's signed events (operations/webhooks.py).
- /ghost/api/admin/…: the reference platform's Admin API (frontdoor/admin_api/, docs/admin-api.md).
- GET /healthz: 200 when PostgreSQL answers, else 503 naming it; Temporal's absence is named with the 200.
- GET /r/{id}?m=…: a newsletter's tracked link, 302 to its stored target (frontdoor/redirects.py).

A link is the reference platform's: `key` is the hex HMAC-SHA256 of the member's uuid keyed with
PRESSROOM_MEMBERS_LINK_SECRET, compared in constant time before the database is asked anything. A
wrong or missing key, a malformed or unknown uuid or newsletter all get the same 404 (no way to
learn who is a member), change nothing, and are counted by reason and logged (rate-limited, the
reason only). A member leaves through `pressroom.store.members.leave`, the statement a
provider's unsubscribe event runs; repeating a request answers 200 and changes nothing more.

Every connection is held to deadlines (frontdoor/deadlines.py): the request head, the body, a
cap on open connections.
"""

from __future__ import annotations

import asyncio
import hmac
import html
import logging
import re
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler
from opentelemetry.trace import SpanKind
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.common import MetricMeter

from frontdoor.admin_api import MAX_BODY_BYTES as ADMIN_MAX_BODY
from frontdoor.admin_api import AdminApi
from frontdoor.deadlines import BodyTooLarge, BodyTooSlow, Connections, read_body, refuse_ambiguous_framing
from frontdoor.pages import Pages, views
from frontdoor.plain import canonical_uuid, page
from frontdoor.receiver import REFUSALS_FLUSH_SECONDS, Receiver, database_unavailable, flush_refusals, metrics_runtime
from frontdoor.redirects import Redirects
from operations.webhooks import LINK_SOURCE
from pressroom import database, tracing
from pressroom.email_rendering import member_key
from pressroom.logs import Refusals, Throttle, mask_lines, since, throttle
from pressroom.settings import Settings, get_settings
from pressroom.store.members import leave_by_link
from pressroom.temporal import SharedClient

if TYPE_CHECKING:
    import asyncpg
    from aiohttp import web

log = logging.getLogger("pressroom.frontdoor")

UNSUBSCRIBE_PATH = "/unsubscribe/"
HEALTH_PATH = "/healthz"
MAX_FORM_BYTES = 4096  # a one-click body or the page's button: a few dozen bytes
SERVER_NAME = "Pressroom"  # not aiohttp's `Python/3.x aiohttp/3.y`: nothing to look up a flaw by
_KEY = re.compile(r"[0-9a-fA-F]{64}")
_EMAIL_ID = re.compile(r"[A-Za-z0-9_-]{1,100}")

_MEMBER = """
SELECT m.id, m.email, n.id AS newsletter_id, n.name AS newsletter_name,
       EXISTS (SELECT 1 FROM members_newsletters mn WHERE mn.member_id = m.id
               AND ($2::uuid IS NULL OR mn.newsletter_id = n.id)) AS subscribed
FROM members m LEFT JOIN newsletters n ON n.uuid = $2::uuid
WHERE m.uuid = $1::uuid"""


class NotAValidLink(Exception):
    """The one answer to every bad link (404); the reason is for the count and the log only."""


@dataclass(frozen=True)
class Link:
    member_uuid: str
    newsletter_uuid: str | None
    email_id: str | None


def mask_address(address: str) -> str:
    """`j•••@e•••.com`: enough for a member to recognise their address, too little to read it."""
    local, _, domain = address.rpartition("@")
    name, dot, tld = domain.rpartition(".")
    shown_domain = f"{name[:1]}•••{dot}{tld}" if name else f"{domain[:1]}•••"
    return f"{local[:1]}•••@{shown_domain}"


class Unsubscribe:
    """GET shows, POST leaves: the members' links."""

    def __init__(self, pool: asyncpg.Pool, settings: Settings, runtime: Any = None) -> None:


        self.pool = pool
        self._secret = settings.require_members_link_secret()
        self.body_seconds = settings.serve_body_timeout_seconds
        self.refusals = Refusals(log, "unsubscribe link")
        self._unavailable = Throttle()
        meter = runtime.metric_meter if runtime is not None else MetricMeter.noop
        self.requests = meter.create_counter("pressroom_unsubscribe_requests", "unsubscribe link requests by outcome")

    def routes(self) -> list:

        return [web.get(UNSUBSCRIBE_PATH, self._unavailable_as_503(self.page)),
                web.post(UNSUBSCRIBE_PATH, self._unavailable_as_503(self.leave))]

    def _unavailable_as_503(self, handler):
        """A database that cannot answer now is "try again" (503), never a refusal of the link."""
        async def answer(request: web.Request) -> web.Response:
            try:
                return await handler(request)
            except Exception as error:
                if not database_unavailable(error):
                    raise
                self.requests.with_additional_attributes({"outcome": "unavailable"}).add(1)
                held = self._unavailable.due()
                if held is not None:
                    log.error("unsubscribe link not handled (503): %s%s", type(error).__name__, since(held))
                return page("Try again", "<p>This cannot be done right now. Please try again in a few "
                                          "minutes.</p>", status=503)
        return answer

    def _link(self, request: web.Request) -> Link:
        """The link's member, checked by its key in constant time; NotAValidLink otherwise."""


        query = request.rel_url.query
        member_uuid = canonical_uuid(query.get("uuid"))
        if member_uuid is None:
            raise NotAValidLink("uuid missing or malformed")
        key = query.get("key")
        if not key:
            raise NotAValidLink("key missing")
        if not _KEY.fullmatch(key) or not hmac.compare_digest(member_key(self._secret, member_uuid), key.lower()):
            raise NotAValidLink("key does not match")
        newsletter = query.get("newsletter")
        newsletter_uuid = canonical_uuid(newsletter) if newsletter else None
        if newsletter and newsletter_uuid is None:
            raise NotAValidLink("newsletter malformed")
        email_id = query.get("email")
        # Only says which email to count the leaving against: ignored unless it looks like an id.
        return Link(member_uuid, newsletter_uuid, email_id if email_id and _EMAIL_ID.fullmatch(email_id) else None)

    async def _member(self, conn, link: Link):
        row = await conn.fetchrow(_MEMBER, link.member_uuid, link.newsletter_uuid)
        if row is None:
            raise NotAValidLink("member unknown")
        if link.newsletter_uuid is not None and row["newsletter_id"] is None:
            raise NotAValidLink("newsletter unknown")
        return row

    def _refused(self, reason: str) -> web.Response:
        kind = self.refusals.refused(reason, 404)
        self.requests.with_additional_attributes({"outcome": "refused", "reason": kind}).add(1)
        return page("Link not valid", "<p>This unsubscribe link is not valid. Use the link in the latest email "
                     "you received, or write to the sender.</p>", status=404)

    async def page(self, request: web.Request) -> web.Response:
        """What the link would do, with buttons; reads only."""
        with _span("GET") as span:
            try:
                link = self._link(request)
                async with self.pool.acquire() as conn:
                    row = await self._member(conn, link)
            except NotAValidLink as refusal:
                span.set_attribute("http.response.status_code", 404)
                return self._refused(str(refusal))
            span.set_attribute("http.response.status_code", 200)
        self.requests.with_additional_attributes({"outcome": "page"}).add(1)
        address = html.escape(mask_address(row["email"]))
        action = html.escape(_action(link, request.rel_url.query["key"]), quote=True)
        if link.newsletter_uuid is not None:
            name = html.escape(row["newsletter_name"])
            state = (f"<p>Stop sending <strong>{name}</strong> to {address}?</p>" if row["subscribed"] else
                     f"<p>{address} no longer receives <strong>{name}</strong>.</p>")
            buttons = (f'<button type="submit" name="scope" value="newsletter">Unsubscribe from {name}</button> '
                       if row["subscribed"] else "")
        else:
            state = f"<p>Stop sending newsletters to {address}?</p>"
            buttons = ""
        buttons += '<button type="submit" name="scope" value="all">Unsubscribe from all newsletters</button>'
        return page("Unsubscribe", f'{state}<form method="post" action="{action}">{buttons}</form>')

    async def leave(self, request: web.Request) -> web.Response:
        """RFC 8058's one-click POST, or the page's button: the member leaves; 200 again on a repeat."""

        with _span("POST") as span:
            try:
                link = self._link(request)
                try:
                    body = await read_body(request, MAX_FORM_BYTES, self.body_seconds)
                except (BodyTooLarge, BodyTooSlow) as error:
                    raise NotAValidLink("body too large" if isinstance(error, BodyTooLarge) else "body too slow") \
                        from None
                every = _scope(body) == "all" or link.newsletter_uuid is None
                row = await leave_by_link(self.pool, link.member_uuid, link.newsletter_uuid, every, link.email_id)
                if row is None:
                    raise NotAValidLink("member unknown")
                if link.newsletter_uuid is not None and row["newsletter_id"] is None:
                    raise NotAValidLink("newsletter unknown")  # and nothing was left
                removed = row["removed"]
            except NotAValidLink as refusal:
                span.set_attribute("http.response.status_code", 404)
                return self._refused(str(refusal))
            span.set_attribute("http.response.status_code", 200)
        self.requests.with_additional_attributes({"outcome": "left" if removed else "already"}).add(1)
        what = "any newsletter" if every else f"<strong>{html.escape(row['newsletter_name'])}</strong>"
        return page("Unsubscribed", f"<p>{html.escape(mask_address(row['email']))} will not receive {what} "
                                     "any more.</p>")


def _action(link: Link, key: str) -> str:
    """The form's target: the link's checked parameters, encoded anew (the query as received, decoded,
    would turn a `%23` into `#` and the browser would drop the rest of the link)."""
    query = {"uuid": link.member_uuid, "key": key, "newsletter": link.newsletter_uuid, "email": link.email_id}
    return f"{UNSUBSCRIBE_PATH}?{urlencode({name: value for name, value in query.items() if value})}"


def _scope(body: bytes) -> str:
    """`all` when the page's "all newsletters" button was pressed; else the link's newsletter."""

    try:
        form = parse_qs(body.decode("ascii"), max_num_fields=4)
    except (UnicodeDecodeError, ValueError):
        return "newsletter"
    return "all" if form.get("scope") == ["all"] else "newsletter"


def _span(method: str):


    # The path only: the query holds the key.
    return tracing.span(f"{method} {UNSUBSCRIBE_PATH}", {"http.request.method": method, "url.path": UNSUBSCRIBE_PATH},
                        kind=SpanKind.SERVER)


class _Protocol(RequestHandler):
    """aiohttp's protocol, but a request it cannot read gets a fixed answer: aiohttp's own quotes the
    request's first bytes (a cookie's session token) back to whoever sent it."""

    def handle_error(self, request, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if status != 500:
            message = f"{status} {HTTPStatus(status).phrase}: the request could not be read\n"
        response = super().handle_error(request, status, exc, message)
        response.headers["Server"] = SERVER_NAME
        return response


async def _server_name(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["Server"] = SERVER_NAME


class FrontDoor:
    """The server's parts: the members' links, the provider's webhooks, health, and the guard."""

    def __init__(self, pool: asyncpg.Pool, settings: Settings, runtime: Any = None) -> None:

        # aiohttp logs each malformed request with its text: one such line every few seconds, masked
        # as it is made (its cookies, a link's key), whatever handler writes it.
        throttle("aiohttp.server")
        mask_lines(("aiohttp.server", "aiohttp.access", "aiohttp.web"), settings.secret_values(),
                   quoting=(HttpProcessingError,))
        # One pool and one Temporal client for the server's life, passed to every route that needs them.
        self.pool = pool
        self.temporal = SharedClient(settings)
        self.unsubscribe = Unsubscribe(pool, settings, runtime)
        self.redirects = Redirects(pool, settings, runtime)
        self.receiver = Receiver(pool, settings, runtime)
        self.pages = Pages(pool, settings, self.temporal)
        self.admin_api = AdminApi(pool, settings, runtime, self.temporal)
        self.redirects.temporal = self.temporal.get  # an automation email's click signals its runs
        self.connections = Connections(settings.serve_header_timeout_seconds, settings.serve_max_connections,
                                       settings.serve_max_connections_per_client, settings.proxy_addresses)
        self._server: asyncio.Server | None = None
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:

        # Each handler holds its own body to its own limit (read_body); this is the largest of them.
        app = web.Application(client_max_size=max(self.receiver.max_body, ADMIN_MAX_BODY),
                              middlewares=[refuse_ambiguous_framing, self.connections.middleware()])
        app.on_response_prepare.append(_server_name)
        app.add_routes([*self.unsubscribe.routes(), *self.receiver.routes(), *views.routes(self.pages),
                        web.get(HEALTH_PATH, self.health), *self.redirects.routes(), *self.admin_api.routes()])
        return app

    async def health(self, request: web.Request) -> web.Response:
        """503 naming PostgreSQL, which every route needs. Temporal is named too, with a 200: only the
        dashboard's sends need it, and a door taken out of the balancer would stop the members'
        links and the provider's webhooks as well."""

        async def postgresql() -> str | None:
            try:
                await asyncio.wait_for(self.pool.fetchval("SELECT 1"), 5)
            except Exception as error:  # noqa: BLE001 (whatever fails, the database is unavailable)
                return f"postgresql unavailable ({error.__class__.__name__})"
            return None

        async def temporal() -> str | None:
            try:
                client = await asyncio.wait_for(self.temporal.get(), 5)
                await asyncio.wait_for(client.workflow_service.get_system_info(GetSystemInfoRequest()), 5)
            except Exception as error:  # noqa: BLE001 (unreachable, refused or slow: named by its class only)
                return f"temporal unavailable ({error.__class__.__name__})"
            return None

        database, workflows = await asyncio.gather(postgresql(), temporal())
        if database:
            return web.Response(status=503, text="; ".join(p for p in (database, workflows) if p))
        return web.Response(text="ok" if workflows is None else f"ok; {workflows}: the dashboard cannot send")

    async def start(self, host: str, port: int) -> None:
        """Listen on host:port (guarded connections); returns once listening."""

        # lingering_time=0: a body a handler refused unread (past its route's limit) is not drained
        # for seconds after the answer; the connection closes instead.
        handling: dict[str, Any] = {"access_log": None, "keepalive_timeout": self.connections.head_seconds,
                                    "lingering_time": 0}
        self._runner = web.AppRunner(self.app(), handle_signals=False, **handling)
        await self._runner.setup()
        server = self._runner.server
        assert server is not None  # made by setup()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self.connections.protocol_factory(lambda: _Protocol(server, loop=loop, **handling)), host, port,
            backlog=1024)

    async def flush_refusals(self) -> None:
        await self.receiver.flush_refusals()
        await flush_refusals(self.pool, LINK_SOURCE, self.unsubscribe.refusals)

    async def flush_refusals_forever(self) -> None:

        while True:
            await asyncio.sleep(REFUSALS_FLUSH_SECONDS)
            await self.flush_refusals()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._runner is not None:
            await self._runner.cleanup()
        await self.redirects.stop()
        await self.flush_refusals()


async def serve(host: str, port: int, settings: Settings | None = None, *, ready=None) -> None:
    """Run the front door until cancelled (SIGINT/SIGTERM in the command)."""

    settings = settings or get_settings()
    pool = await database.connect(settings.require_database(), max_size=20)
    door = FrontDoor(pool, settings, metrics_runtime(settings))
    flusher = asyncio.create_task(door.flush_refusals_forever())
    try:
        await door.start(host, port)
        log.info("front door on http://%s:%d (%s, %s, %s)", host, port, UNSUBSCRIBE_PATH, door.receiver.push.path,
                 HEALTH_PATH)
        if ready is not None:
            ready()
        await asyncio.Event().wait()
    finally:
        flusher.cancel()
        await door.stop()
        await pool.close()
