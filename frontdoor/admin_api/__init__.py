"""The reference platform's Admin API under /ghost/api/admin/, served by `pressroom serve`.

Every request: its token checked first (auth.py), its body read under the front door's deadline
and size limit, then one handler that calls the operation the CLI calls. Every answer is the
reference's envelope; every refusal its error envelope; a route Pressroom does not have answers
which ones it has. No CORS headers: browsers of other origins get nothing.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from temporalio.common import MetricMeter

from frontdoor.admin_api import automations, resources
from frontdoor.admin_api.auth import Caller, Slowdown, authenticate
from frontdoor.admin_api.envelope import ApiError, dumps, invalid, unsupported
from frontdoor.admin_api.recent import MemberReads
from frontdoor.deadlines import BodyTooLarge, BodyTooSlow, client_address, read_body
from operations import authoring, site_webhooks
from operations.members import delete_member
from pressroom.errors import BadInput, NotFound, PressroomError, one_line
from pressroom.inputs import PATH_ID
from pressroom.logs import Refusals
from pressroom.settings import Settings
from pressroom.temporal import SharedClient, TemporalUnavailable

if TYPE_CHECKING:
    import asyncpg
    from aiohttp import web

log = logging.getLogger("pressroom.frontdoor.admin_api")

PREFIX = "/ghost/api/admin/"
MAX_BODY_BYTES = 4 * 1024 * 1024  # a post of a few megabytes of HTML, and its envelope
CALLER = web.RequestKey("caller", Caller)  # the integration whose key signed the request
_ID = rf"(?P<id>{PATH_ID})"
_SLUG = r"(?P<slug>[a-z0-9_-]{1,191})"

# The reference's Admin API resources: one Pressroom does not have answers 501 (not supported
# here), any other path 404 as the reference answers it.
REFERENCE_RESOURCES = frozenset({
    "actions", "authentication", "collections", "comments", "config", "custom_theme_settings", "db", "email_previews",
    "emails", "explore", "feedback", "files", "identities", "images", "integrations", "invites", "labels", "links",
    "mail", "media", "members", "mentions", "newsletters", "notifications", "oembed", "offers", "pages", "posts",
    "recommendations", "redirects", "roles", "schedules", "search-index", "session", "settings", "site", "slugs",
    "snippets", "stats", "tags", "themes", "tiers", "tinybird", "users", "webhooks"})

Handler = Callable[..., Awaitable[tuple[int, Any]]]


class AdminApi:
    def __init__(self, pool: asyncpg.Pool, settings: Settings, runtime: Any = None,
                 temporal: SharedClient | None = None) -> None:

        # The server's pool and Temporal client, passed to every operation a route calls.
        self.pool, self.settings = pool, settings
        self.temporal = temporal or SharedClient(settings)
        self.slowdown = Slowdown()
        self.member_reads = MemberReads()
        self.refusals = Refusals(log, "admin api request")
        meter = runtime.metric_meter if runtime is not None else MetricMeter.noop
        self.requests = meter.create_counter("pressroom_admin_api_requests", "Admin API requests by outcome")
        self.routes_table: list[tuple[str, re.Pattern, Handler]] = [
            ("GET", re.compile(r"site/"), self.site),
            ("GET", re.compile(r"posts/"), self.browse_posts),
            ("POST", re.compile(r"posts/"), self.add_post),
            ("GET", re.compile(rf"posts/slug/{_SLUG}/"), self.read_post),
            ("GET", re.compile(rf"posts/{_ID}/"), self.read_post),
            ("PUT", re.compile(rf"posts/{_ID}/"), self.edit_post),
            ("DELETE", re.compile(rf"posts/{_ID}/"), self.delete_post),
            ("GET", re.compile(r"newsletters/"), self.browse_newsletters),
            ("GET", re.compile(rf"newsletters/{_ID}/"), self.read_newsletter),
            ("POST", re.compile(r"newsletters/"), self.add_newsletter),
            ("PUT", re.compile(rf"newsletters/{_ID}/"), self.edit_newsletter),
            ("GET", re.compile(r"members/"), self.browse_members),
            ("POST", re.compile(r"members/"), self.add_member),
            ("GET", re.compile(rf"members/{_ID}/"), self.read_member),
            ("PUT", re.compile(rf"members/{_ID}/"), self.edit_member),
            ("DELETE", re.compile(rf"members/{_ID}/"), self.delete_member),
            ("GET", re.compile(r"tiers/"), self.browse_tiers),
            ("POST", re.compile(r"tiers/"), self.add_tier),
            ("GET", re.compile(r"labels/"), self.browse_labels),
            ("POST", re.compile(r"labels/"), self.add_label),
            ("GET", re.compile(rf"emails/{_ID}/"), self.read_email),
            ("POST", re.compile(rf"emails/{_ID}/retry/"), self.retry_email),
            ("POST", re.compile(r"webhooks/"), self.add_webhook),
            ("PUT", re.compile(rf"webhooks/{_ID}/"), self.edit_webhook),
            ("DELETE", re.compile(rf"webhooks/{_ID}/"), self.delete_webhook),
            ("GET", re.compile(r"automations/"), self.browse_automations),
            ("GET", re.compile(rf"automations/{_ID}/"), self.read_automation),
            ("PUT", re.compile(rf"automations/{_ID}/"), self.edit_automation),
            ("GET", re.compile(rf"automations/{_ID}/runs/"), self.automation_runs),
            ("GET", re.compile(rf"automations/{_ID}/performance-stats/"), self.automation_performance),
        ]

    def routes(self) -> list:

        return [web.route("*", PREFIX + "{tail:.*}", self.handle)]

    def supported(self) -> str:
        return ", ".join(f"{m} {p.pattern.replace(_ID, '{id}').replace(_SLUG, '{slug}')}"
                         for m, p, _ in self.routes_table)

    async def handle(self, request: web.Request) -> web.Response:
        """Route, authenticate, answer; every failure in the error envelope, never a trace."""
        tail = request.path[len(PREFIX):]
        if tail and not tail.endswith("/"):
            tail += "/"
        try:
            request[CALLER] = await authenticate(self.pool, request.headers.get("Authorization"))
            handler, params = self._route(request.method, tail)
            status, body = await handler(request, **params)
            outcome = "ok"
        except ApiError as error:
            status, body, outcome = error.status, error.body(), error.type
            if error.status in (400, 401, 403):
                self.refusals.refused(error.reason or error.type, error.status)
                await self.slowdown.wait(client_address(request, self.settings.proxy_addresses))
        except Exception as error:  # noqa: BLE001 (every failure gets the reference's error body, never a traceback)
            failure = self._failure(error)
            status, body, outcome = failure.status, failure.body(), failure.type
        self.requests.with_additional_attributes({"outcome": outcome}).add(1)
        return self._answer(status, body, request)

    def _failure(self, error: Exception) -> ApiError:
        """An operation's error in the reference's types; anything else a 500 saying only its type."""
        if isinstance(error, authoring.UpdateCollision):
            return ApiError(409, "UpdateCollisionError", str(error))
        if isinstance(error, NotFound):
            return ApiError(404, "NotFoundError", one_line(str(error)))
        if isinstance(error, BadInput):
            return ApiError(422, "ValidationError", one_line(str(error)))
        if isinstance(error, TemporalUnavailable):
            log.error("admin api request not done: Temporal cannot be reached")
            return ApiError(503, "ServiceUnavailableError", "Publishing and sending cannot be reached right now; "
                            "try again in a few minutes.")
        if isinstance(error, PressroomError):
            return ApiError(500, "InternalServerError", one_line(str(error)))
        log.error("admin api request failed: %s", type(error).__name__)
        return ApiError(500, "InternalServerError", "An unexpected error occurred; it was logged (its type only)")

    def _route(self, method: str, tail: str) -> tuple[Handler, dict]:
        allowed = []
        for route_method, pattern, handler in self.routes_table:
            match = pattern.fullmatch(tail)
            if match:
                if route_method == method:
                    return handler, {k: v for k, v in match.groupdict().items() if v is not None}
                allowed.append(route_method)
        if allowed:
            raise ApiError(405, "MethodNotAllowedError", f"{method} is not supported on /{tail}",
                           context=f"Supported here: {', '.join(allowed)}")
        if tail.split("/", 1)[0] not in REFERENCE_RESOURCES:  # no resource of the reference: as it answers
            raise ApiError(404, "NotFoundError", "Resource not found",
                           context=f"/ghost/api/admin/{tail[:100]} is not a resource of the Admin API")
        raise unsupported(f"{method} /ghost/api/admin/{tail[:100]}", self.supported())

    def _answer(self, status: int, body: Any, request: web.Request) -> web.Response:

        headers = {"Cache-Control": "no-cache, private, no-store, must-revalidate", "X-Content-Type-Options": "nosniff"}
        version = request.headers.get("Accept-Version", "")
        if re.fullmatch(r"v\d{1,2}\.\d{1,3}", version):
            headers["Content-Version"] = version
        if status == 204:
            return web.Response(status=204, headers=headers)
        return web.Response(status=status, text=dumps(body), content_type="application/json", headers=headers)

    async def _body(self, request: web.Request) -> Any:

        try:
            raw = await read_body(request, MAX_BODY_BYTES, self.settings.serve_body_timeout_seconds)
        except BodyTooLarge:
            raise ApiError(413, "RequestEntityTooLargeError", f"the body is larger than {MAX_BODY_BYTES:,} bytes",
                           reason="body too large") from None
        except BodyTooSlow:
            raise ApiError(408, "RequestTimeoutError", "the body did not arrive in time", reason="body too slow") \
                from None
        try:
            return json.loads(raw or b"{}")
        except (ValueError, UnicodeDecodeError):
            raise invalid("the body is not JSON") from None
        except RecursionError:  # thousands of nested arrays: no resource is written so
            raise invalid("the body's JSON is nested too deeply") from None

    # --- handlers: each answers (status, body) ---------------------------------------------------

    async def site(self, request: web.Request) -> tuple[int, Any]:
        return 200, resources.site(self.settings)

    async def browse_posts(self, request: web.Request) -> tuple[int, Any]:
        async with self.pool.acquire() as conn:
            return 200, await resources.browse_posts(conn, request.query, self.settings)

    async def _post_answer(self, post: authoring.Post, request: web.Request, status: int = 200) -> tuple[int, Any]:
        return status, {"posts": [resources.post_json(post, self.settings, resources.formats_of(request.query))]}

    async def read_post(self, request: web.Request, id: str | None = None, slug: str | None = None):
        async with self.pool.acquire() as conn:
            try:
                post = await authoring.read_post(conn, id or slug or "")
            except NotFound:
                raise resources.not_found("post") from None
        if id and post.id != id:  # read by id only: a slug goes through posts/slug/{slug}/
            raise resources.not_found("post")
        return await self._post_answer(post, request)

    async def add_post(self, request: web.Request) -> tuple[int, Any]:
        item = resources.item_of(await self._body(request), "posts")
        async with self.pool.acquire() as conn:
            change = await resources.post_change(conn, item, request.query, adding=True)
        post = await authoring.add_post(change, client=self.temporal, settings=self.settings,
                                        pool=self.pool)
        return await self._post_answer(post, request, 201)

    async def edit_post(self, request: web.Request, id: str) -> tuple[int, Any]:
        item = resources.item_of(await self._body(request), "posts")
        async with self.pool.acquire() as conn:
            if not await conn.fetchval("SELECT EXISTS (SELECT 1 FROM posts WHERE id = $1)", id):
                raise resources.not_found("post")
            change = await resources.post_change(conn, item, request.query, adding=False)
        post = await authoring.edit_post(id, change, client=self.temporal, settings=self.settings,
                                         pool=self.pool)
        return await self._post_answer(post, request)

    async def delete_post(self, request: web.Request, id: str) -> tuple[int, Any]:
        async with self.pool.acquire() as conn:
            if not await conn.fetchval("SELECT EXISTS (SELECT 1 FROM posts WHERE id = $1)", id):
                raise resources.not_found("post")
        await authoring.delete_post(id, client=self.temporal, settings=self.settings, pool=self.pool)
        return 204, None

    async def browse_newsletters(self, request: web.Request) -> tuple[int, Any]:
        async with self.pool.acquire() as conn:
            return 200, await resources.browse_simple(
                conn, request.query, "newsletters", "newsletters",
                lambda r: resources.newsletter_json(authoring.Newsletter(**{**dict(r), "uuid": str(r["uuid"])})),
                resources.NEWSLETTER_FIELDS)

    async def read_newsletter(self, request: web.Request, id: str) -> tuple[int, Any]:
        found = [n for n in await authoring.list_newsletters(settings=self.settings, pool=self.pool) if n.id == id]
        if not found:
            raise resources.not_found("newsletter")
        return 200, {"newsletters": [resources.newsletter_json(found[0])]}

    async def add_newsletter(self, request: web.Request) -> tuple[int, Any]:
        item = resources.item_of(await self._body(request), "newsletters")
        fields = resources.newsletter_fields(item)
        if not fields.get("name"):
            raise invalid("newsletters.name is required", property="name")
        fields.pop("status", None)
        newsletter = await authoring.add_newsletter(fields.pop("name"), slug=resources.text_of(item, "slug"), **fields,
                                                    settings=self.settings, pool=self.pool)
        if request.query.get("opt_in_existing") == "true":
            await authoring.opt_in_existing(newsletter.id, settings=self.settings, pool=self.pool)
        return 201, {"newsletters": [resources.newsletter_json(newsletter)]}

    async def edit_newsletter(self, request: web.Request, id: str) -> tuple[int, Any]:
        item = resources.item_of(await self._body(request), "newsletters")
        try:
            newsletter = await authoring.edit_newsletter(id, **resources.newsletter_fields(item),
                                                         settings=self.settings, pool=self.pool)
        except NotFound:
            raise resources.not_found("newsletter") from None
        return 200, {"newsletters": [resources.newsletter_json(newsletter)]}

    async def browse_members(self, request: web.Request) -> tuple[int, Any]:
        async with self.pool.acquire() as conn:
            return 200, await resources.browse_members(conn, request.query, self.member_reads)

    async def read_member(self, request: web.Request, id: str) -> tuple[int, Any]:
        async with self.pool.acquire() as conn:
            return 200, await resources.read_member(conn, id)

    async def add_member(self, request: web.Request) -> tuple[int, Any]:
        item = resources.item_of(await self._body(request), "members")
        welcome = resources.welcome_asked(request.query)
        async with self.pool.acquire() as conn:
            try:
                member_id = await resources.add_member(conn, item, self.settings, welcome=welcome)
            finally:
                self.member_reads.forget()
            return 201, await resources.read_member(conn, member_id)

    async def edit_member(self, request: web.Request, id: str) -> tuple[int, Any]:
        item = resources.item_of(await self._body(request), "members")
        async with self.pool.acquire() as conn:
            try:
                await resources.edit_member(conn, id, item, self.settings)
            finally:
                self.member_reads.forget()
            return 200, await resources.read_member(conn, id)

    async def delete_member(self, request: web.Request, id: str) -> tuple[int, Any]:

        async with self.pool.acquire() as conn:
            if not await conn.fetchval("SELECT EXISTS (SELECT 1 FROM members WHERE id = $1)", id):
                raise resources.not_found("member")
        try:
            await delete_member(id, settings=self.settings, pool=self.pool)
        finally:
            self.member_reads.forget()
        return 204, None

    async def browse_tiers(self, request: web.Request) -> tuple[int, Any]:
        async with self.pool.acquire() as conn:
            return 200, await resources.browse_simple(conn, request.query, "products", "tiers", resources.tier_json,
                                                      resources.TIER_FIELDS)

    async def add_tier(self, request: web.Request) -> tuple[int, Any]:
        item = resources.item_of(await self._body(request), "tiers")
        fields = resources.tier_fields(item)
        row = await authoring.add_tier(fields["name"] or "", slug=fields["slug"], type=fields["type"] or "paid",
                                       settings=self.settings, pool=self.pool)
        return 201, {"tiers": [resources.tier_json(row)]}

    async def browse_labels(self, request: web.Request) -> tuple[int, Any]:
        async with self.pool.acquire() as conn:
            return 200, await resources.browse_simple(conn, request.query, "labels", "labels", resources.label_json,
                                                      resources.LABEL_FIELDS)

    async def add_label(self, request: web.Request) -> tuple[int, Any]:
        item = resources.item_of(await self._body(request), "labels")
        row = await authoring.add_label(resources.text_of(item, "name") or "", slug=resources.text_of(item, "slug"),
                                        settings=self.settings, pool=self.pool)
        return 201, {"labels": [resources.label_json(row)]}

    async def read_email(self, request: web.Request, id: str) -> tuple[int, Any]:
        async with self.pool.acquire() as conn:
            return 200, await resources.read_email(conn, id)

    async def retry_email(self, request: web.Request, id: str) -> tuple[int, Any]:
        async with self.pool.acquire() as conn:
            await resources.read_email(conn, id)  # 404 first
        await authoring.retry_email(id, client=self.temporal, settings=self.settings, pool=self.pool)
        async with self.pool.acquire() as conn:
            return 200, await resources.read_email(conn, id)

    # --- webhooks (docs/site-webhooks.md): an integration's own, as the reference's API keeps them ---

    async def add_webhook(self, request: web.Request) -> tuple[int, Any]:
        item = resources.item_of(await self._body(request), "webhooks")
        caller = request[CALLER]
        integration = resources.text_of(item, "integration_id") or caller.integration_id or ""
        webhook = await site_webhooks.create_webhook(
            resources.text_of(item, "event") or "", resources.text_of(item, "target_url") or "", integration,
            name=resources.text_of(item, "name"), secret=resources.text_of(item, "secret"),
            api_version=resources.text_of(item, "api_version") or "v5", settings=self.settings, pool=self.pool)
        return 201, {"webhooks": [webhook_json(webhook)]}

    async def _own_webhook(self, request: web.Request, id: str, method: str) -> None:
        """As the reference refuses: an integration's key changes or deletes that integration's
        webhooks only (404 for none, 403 for another's)."""
        caller = request[CALLER]
        if caller.integration_id is None:
            return
        owner = await self.pool.fetchrow("SELECT integration_id FROM webhooks WHERE id = $1", id)
        if owner is None:
            raise ApiError(404, "NotFoundError", "Webhook not found.", reason="webhook unknown")
        if owner["integration_id"] != caller.integration_id:
            raise ApiError(403, "NoPermissionError", f"You do not have permission to {method} this webhook.",
                           context=f"You may only {method} webhooks that belong to the authenticated integration. "
                                   "Check the supplied Admin API Key.", reason="another integration's webhook")

    async def edit_webhook(self, request: web.Request, id: str) -> tuple[int, Any]:
        await self._own_webhook(request, id, "edit")
        item = resources.item_of(await self._body(request), "webhooks")
        webhook = await site_webhooks.edit_webhook(
            id, event=resources.text_of(item, "event"), target_url=resources.text_of(item, "target_url"),
            name=resources.text_of(item, "name"), secret=resources.text_of(item, "secret"),
            api_version=resources.text_of(item, "api_version"), settings=self.settings, pool=self.pool)
        return 200, {"webhooks": [webhook_json(webhook)]}

    async def delete_webhook(self, request: web.Request, id: str) -> tuple[int, Any]:
        await self._own_webhook(request, id, "destroy")
        await site_webhooks.delete_webhook(id, settings=self.settings, pool=self.pool)
        return 204, None


    # --- automations ---

    async def browse_automations(self, request: web.Request) -> tuple[int, Any]:
        return 200, await automations.browse(self.settings)

    async def read_automation(self, request: web.Request, id: str) -> tuple[int, Any]:
        return 200, await automations.read(self.settings, id)

    async def edit_automation(self, request: web.Request, id: str) -> tuple[int, Any]:
        item = resources.item_of(await self._body(request), "automations")
        return 200, await automations.edit(self.settings, id, item)

    async def automation_runs(self, request: web.Request, id: str) -> tuple[int, Any]:
        return 200, await automations.runs(self.settings, id)

    async def automation_performance(self, request: web.Request, id: str) -> tuple[int, Any]:
        return 200, await automations.performance(self.settings, id)


def webhook_json(webhook: site_webhooks.Webhook) -> dict[str, Any]:
    """The reference's shape, less the secret: set by the integration, never shown back."""
    shown = webhook.model_dump(mode="json")
    shown.pop("has_secret")
    return shown
