"""The editors' dashboard under /pressroom/: server-rendered pages behind a staff sign-in.

Every page reads the operations the CLI reads (operations/answers.py's models), so a figure on a
page is the figure `--json` prints; every action goes through the CLI's operation after a
confirmation page whose form is POSTed. A GET never changes anything.

- Sessions: a random token in an HttpOnly, SameSite=Lax cookie, its SHA-256 on the server
  (operations/staff.py); signing out deletes it. The cookies are Secure when PRESSROOM_SITE_URL is
  https://, never by the request's Host (a proxy sends its own upstream's, any client writes one).
- CSRF: every POST carries a token; before sign-in it is the sign-in cookie's value (double
  submit), after it an HMAC of the session token, compared in constant time.
- Failed sign-ins are slowed per client address and per account (SignInThrottle); every refusal
  of a sign-in reads the same.
- Headers: a Content-Security-Policy allowing only this server's stylesheet and one script, no
  framing, no-store caching, no referrer.
- No member address or name in any log line: errors are logged by their type only.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode

from aiohttp import web
from jinja2 import Environment, FileSystemLoader, select_autoescape

from frontdoor.deadlines import BodyTooLarge, BodyTooSlow, client_address, read_body
from operations.answers import Answer
from operations.staff import Busy, Session, session_of, sign_in, sign_out
from pressroom import database
from pressroom.errors import PressroomError
from pressroom.readable import when
from pressroom.settings import Settings
from pressroom.temporal import SharedClient

if TYPE_CHECKING:
    import asyncpg

log = logging.getLogger("pressroom.pages")

ROOT = "/pressroom"
SESSION_COOKIE = "pressroom_session"
SIGN_IN_COOKIE = "pressroom_sign_in"
MAX_FORM_BYTES = 4096
_HERE = Path(__file__).parent

HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; "
                               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}
SIGN_IN_REFUSED = "That address and password do not sign you in. Try again in a minute."


def slowing_key(address: str) -> str:
    """The key failed sign-ins are counted under: the address, or an IPv6 address's /64 (one host
    is given a whole /64 to choose from)."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return f"address:{address}"
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is None:
        return f"address:{ipaddress.ip_network(f'{parsed}/64', strict=False)}"
    return f"address:{parsed}"


class SignInThrottle:
    """Failed sign-ins slowed per client address (an IPv6 client by its /64), never per account, so
    that an attacker cannot hold the owner out: after FREE failures, each further
    try within the window is refused unanswered for 2^(failures - FREE) seconds (at most MAX_WAIT).
    Kept in the server's memory: one server process guards its own door."""

    FREE = 5
    MAX_WAIT = 300.0
    WINDOW = 900.0

    def __init__(self) -> None:
        self._failures: dict[str, tuple[int, float]] = {}  # key → (failures, last failure at)

    def _wait(self, key: str, now: float) -> float:
        count, last = self._failures.get(key, (0, 0.0))
        if now - last > self.WINDOW:
            return 0.0
        if count < self.FREE:
            return 0.0
        # the exponent capped: 2.0 ** 1030 overflows, and 2 ** 9 is already past MAX_WAIT
        return max(0.0, last + min(self.MAX_WAIT, 2.0 ** min(count - self.FREE, 16)) - now)

    def allowed(self, *keys: str) -> bool:
        now = time.monotonic()
        return all(self._wait(key, now) == 0 for key in keys)

    def failed(self, *keys: str) -> None:
        now = time.monotonic()
        if len(self._failures) > 100_000:  # a flood of addresses: forget the oldest half
            for key, _ in sorted(self._failures.items(), key=lambda item: item[1][1])[:50_000]:
                del self._failures[key]
        for key in keys:
            count, last = self._failures.get(key, (0, 0.0))
            self._failures[key] = ((0 if now - last > self.WINDOW else count) + 1, now)

    def succeeded(self, *keys: str) -> None:
        for key in keys:
            self._failures.pop(key, None)


@dataclass(frozen=True)
class Signed:
    session: Session
    csrf: str


SIGNED = web.RequestKey("signed", Signed)
FORM = web.RequestKey("form", dict)


def csrf_of(token: str) -> str:
    return hmac.new(token.encode(), b"pressroom csrf", hashlib.sha256).hexdigest()


class Pages:
    """What every page does (render, sign in and out, guard); the routes are views.py's."""

    def __init__(self, pool: asyncpg.Pool, settings: Settings, temporal: SharedClient | None = None) -> None:
        self.pool = pool
        self.settings = settings
        self._temporal = temporal or SharedClient(settings)
        self.secure_cookies = settings.site_url.lower().startswith("https://")
        self.throttle = SignInThrottle()
        self.templates = Environment(loader=FileSystemLoader(_HERE / "templates"),
                                     autoescape=select_autoescape(default=True, default_for_string=True))
        self.templates.filters["when"] = when
        self.templates.filters["figure"] = _figure
        self.templates.filters["rate"] = _rate

    # --- what every page does ---------------------------------------------------------------------

    def render(self, request: web.Request, template: str, status: int = 200, **values: Any) -> web.Response:
        signed = request.get(SIGNED)
        text = self.templates.get_template(template).render(
            root=ROOT, signed=signed.session if signed else None, csrf=signed.csrf if signed else None, **values)
        return web.Response(status=status, text=text, content_type="text/html", headers=HEADERS)

    def json(self, answer: Answer | dict) -> web.Response:
        data = answer.as_json() if isinstance(answer, Answer) else answer
        return web.json_response(data, headers=HEADERS)

    async def signed(self, request: web.Request) -> Signed | None:
        token = request.cookies.get(SESSION_COOKIE)
        session = await session_of(self.pool, token)
        return Signed(session, csrf_of(token)) if session and token else None

    async def form(self, request: web.Request) -> dict[str, str]:
        """The POSTed form's fields (one value each), within the size and time limits."""
        try:
            body = await read_body(request, MAX_FORM_BYTES, self.settings.serve_body_timeout_seconds)
            fields = parse_qs(body.decode("utf-8"), max_num_fields=20, strict_parsing=False)
        except BodyTooLarge:
            raise web.HTTPRequestEntityTooLarge(MAX_FORM_BYTES, MAX_FORM_BYTES + 1, text="the form is too large") \
                from None
        except (BodyTooSlow, UnicodeDecodeError, ValueError):
            return {}
        return {name: values[0] for name, values in fields.items()}

    def staff_only(self, handler):
        """Signed-in staff only (else to the sign-in page); a POST must carry the session's CSRF token."""
        async def guarded(request: web.Request) -> web.StreamResponse:
            signed = await self.signed(request)
            if signed is None:
                if request.path.endswith(".json"):
                    return web.json_response({"error": "sign in first"}, status=401, headers=HEADERS)
                return redirect(f"{ROOT}/sign-in?{urlencode({'next': request.path_qs})}")
            request[SIGNED] = signed
            if request.method == "POST":
                form = await self.form(request)
                if not hmac.compare_digest(form.get("csrf", ""), signed.csrf):
                    return self.render(request, "refused.html", status=403)
                request[FORM] = form
            try:
                with database.pool_lent(self.pool):  # the operations borrow the server's connections
                    return await handler(request)
            except PressroomError as error:  # the operation's own one-line answer (no address in it)
                return self.render(request, "problem.html", status=400, problem=str(error))
            except Exception as error:
                # The route's pattern, never the path: a path may hold an address someone typed.
                log.error("page %s failed: %s", request.match_info.route.resource.canonical if
                          request.match_info.route.resource else "?", type(error).__name__)
                raise
        return guarded

    # --- signing in and out ---------------------------------------------------------------------

    async def sign_in_page(self, request: web.Request, refused: bool = False) -> web.Response:
        token = request.cookies.get(SIGN_IN_COOKIE) or secrets.token_urlsafe(24)
        response = self.render(request, "sign_in.html", status=403 if refused else 200,
                               csrf_sign_in=token, next=_next(request.query.get("next")),
                               refused=SIGN_IN_REFUSED if refused else None)
        response.set_cookie(SIGN_IN_COOKIE, token, path=ROOT, httponly=True, samesite="Lax",
                            secure=self.secure_cookies, max_age=3600)
        return response

    async def sign_in(self, request: web.Request) -> web.StreamResponse:
        form = await self.form(request)
        cookie = request.cookies.get(SIGN_IN_COOKIE, "")
        email = form.get("email", "").strip().lower()
        keys = (slowing_key(client_address(request, self.settings.proxy_addresses)),)
        if not cookie or not hmac.compare_digest(form.get("csrf", ""), cookie):
            return await self.sign_in_page(request, refused=True)
        if not self.throttle.allowed(*keys):
            self.throttle.failed(*keys)  # hammering while held back holds back longer
            return await self.sign_in_page(request, refused=True)
        try:
            signed = await sign_in(self.pool, email, form.get("password", ""))
        except Busy:
            return web.Response(status=429, text="Too many sign-ins at once; try again in a few seconds.\n",
                                headers={"Retry-After": "2"})
        if signed is None:
            self.throttle.failed(*keys)
            log.info("sign-in refused")  # no address: who tried is not for the log
            return await self.sign_in_page(request, refused=True)
        self.throttle.succeeded(*keys)
        token, session = signed
        response = redirect(_next(form.get("next")))
        response.set_cookie(SESSION_COOKIE, token, path=ROOT, httponly=True, samesite="Lax",
                            secure=self.secure_cookies, max_age=int(session.expires_at.timestamp() - time.time()))
        response.del_cookie(SIGN_IN_COOKIE, path=ROOT)
        return response

    async def sign_out(self, request: web.Request) -> web.StreamResponse:
        await sign_out(self.pool, request.cookies.get(SESSION_COOKIE, ""))
        response = redirect(f"{ROOT}/sign-in")
        response.del_cookie(SESSION_COOKIE, path=ROOT)
        return response

    async def temporal(self) -> Any:
        """The server's one Temporal client (frontdoor/server.py), made at first need."""
        return await self._temporal.get()


def redirect(location: str) -> web.Response:
    """303: after a POST, the browser GETs the page that shows what happened."""
    return web.Response(status=303, headers={**HEADERS, "Location": location})


def _next(value: str | None) -> str:
    """Where to go after signing in: a path of the dashboard only (never another site)."""
    # Printable and without spaces: a line break would split the Location header.
    if value and value.startswith(f"{ROOT}/") and not value.startswith("//") and "\\" not in value \
            and value.isprintable() and not any(c.isspace() for c in value) and len(value) <= 2000:
        return value
    return f"{ROOT}/newsletters"


def _figure(value) -> str:
    return "-" if value is None else f"{value:,}"


def _rate(value) -> str:
    return "-" if value is None else f"{value:.1f}%"
