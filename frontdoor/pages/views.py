"""The dashboard's pages: newsletters, an email's report, members, a member's story, health; and the
confirmation pages of the actions with consequences. Each reads or calls one operation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from frontdoor.pages import _HERE, HEADERS, ROOT, SIGNED, Pages, redirect
from frontdoor.pages.charts import opens_chart
from operations.authoring import DESIGN_FIELDS, list_newsletters
from operations.check import check_report, run_checks
from operations.finding import list_page
from operations.member_search import search_members
from operations.members import delete_member, member_profile, resubscribe_member, unsubscribe_member
from operations.newsletter import cancel_newsletter, email_sizes, newsletter_status, start_newsletter
from operations.outbox import outbox_status
from operations.readiness import RUNNING_CHECKS
from operations.reports import click_rates, newsletter_report, sent_counts
from pressroom.errors import BadInput
from pressroom.inputs import PATH_ID

if TYPE_CHECKING:
    from operations.answers import EmailReport


# Ids in paths are checked by their route: a segment of another shape (a percent-encoded `/` or
# `?`) is a 404, so a page's form and links, built from the matched id, name the id shown.
_ID = PATH_ID


def routes(pages: Pages) -> list[web.RouteDef]:
    """The dashboard's routes: all the server registers for it."""
    staff = pages.staff_only
    return [
        web.get(f"{ROOT}", _to_newsletters),
        web.get(f"{ROOT}/", _to_newsletters),
        web.get(f"{ROOT}/sign-in", pages.sign_in_page),
        web.post(f"{ROOT}/sign-in", pages.sign_in),
        web.post(f"{ROOT}/sign-out", staff(pages.sign_out)),
        web.get(f"{ROOT}/static/{{name:pages\\.css|progress\\.js}}", _static),
        web.get(f"{ROOT}/newsletters", staff(lambda r: newsletters(pages, r))),
        web.get(f"{ROOT}/emails/{{email_id:{_ID}}}", staff(lambda r: report(pages, r))),
        web.get(f"{ROOT}/emails/{{email_id:{_ID}}}/status.json", staff(lambda r: status_json(pages, r))),
        web.get(f"{ROOT}/emails/{{email_id:{_ID}}}/cancel", staff(lambda r: confirm_cancel(pages, r))),
        web.post(f"{ROOT}/emails/{{email_id:{_ID}}}/cancel", staff(lambda r: cancel(pages, r))),
        web.get(f"{ROOT}/emails/{{email_id:{_ID}}}/send", staff(lambda r: confirm_send(pages, r))),
        web.post(f"{ROOT}/emails/{{email_id:{_ID}}}/send", staff(lambda r: send(pages, r))),
        web.get(f"{ROOT}/members", staff(lambda r: members(pages, r))),
        web.get(f"{ROOT}/members/{{member_id:{_ID}}}", staff(lambda r: member(pages, r))),
        web.get(f"{ROOT}/members/{{member_id:{_ID}}}/{{action:delete|unsubscribe|resubscribe}}",
                staff(lambda r: confirm_member_action(pages, r))),
        web.post(f"{ROOT}/members/{{member_id:{_ID}}}/{{action:delete|unsubscribe|resubscribe}}",
                 staff(lambda r: member_action(pages, r))),
        web.get(f"{ROOT}/health", staff(lambda r: health(pages, r))),
    ]


async def _to_newsletters(request: web.Request) -> web.Response:
    return redirect(f"{ROOT}/newsletters")


async def _static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    kind = "text/css" if name.endswith(".css") else "text/javascript"
    return web.Response(text=(_HERE / "static" / name).read_text(), content_type=kind,
                        headers={**HEADERS, "Cache-Control": "max-age=300"})


# --- newsletters and an email ----------------------------------------------------------------------

async def newsletters(pages: Pages, request: web.Request) -> web.Response:
    page = await list_page("email", after=request.query.get("after") or None, settings=pages.settings)
    sent = await sent_counts([row.email_id for row in page.items], settings=pages.settings)
    clicks = await click_rates(page.items, settings=pages.settings)
    return pages.render(request, "newsletters.html", page=page, sent=sent, clicks=clicks,
                        newsletters=await list_newsletters(settings=pages.settings), design_fields=DESIGN_FIELDS)


async def report(pages: Pages, request: web.Request) -> web.Response:
    email_id = request.match_info["email_id"]
    answer: EmailReport = await newsletter_report(email_id, settings=pages.settings)
    earlier = []
    if answer.newsletter_id:
        listed = await list_page("email", newsletter=answer.newsletter_id, limit=50, settings=pages.settings)
        older = [row for row in listed.items if row.created_at < answer.created_at]
        earlier = older[:5]
    return pages.render(request, "report.html", report=answer, earlier=earlier,
                        chart=opens_chart(answer.opens_over_time), sending=answer.status in ("pending", "submitting"),
                        size=await email_sizes(email_id, settings=pages.settings))


async def status_json(pages: Pages, request: web.Request) -> web.Response:
    """What `newsletter status --json` says: the report page's script polls it while an email sends."""
    status = await newsletter_status(request.match_info["email_id"], client=await _client(pages),
                                     settings=pages.settings)
    return pages.json(status)


async def _client(pages: Pages):
    try:
        return await pages.temporal()
    except Exception:  # noqa: BLE001 (Temporal unreachable: the status says so from PostgreSQL's view)
        return None


async def confirm_cancel(pages: Pages, request: web.Request) -> web.Response:
    email_id = request.match_info["email_id"]
    return pages.render(request, "confirm.html", title=f"Cancel the send of email {email_id}?",
                        consequence="Batches already accepted by the provider stay sent; no batch starts after this.",
                        action=f"{ROOT}/emails/{email_id}/cancel", button="Cancel the send",
                        back=f"{ROOT}/emails/{email_id}")


async def cancel(pages: Pages, request: web.Request) -> web.Response:
    email_id = request.match_info["email_id"]
    signed = request[SIGNED]
    # Recorded by the staff member's id: an address never goes into a run's history.
    await cancel_newsletter(email_id, by=signed.session.staff_id, client=await pages.temporal(),
                            settings=pages.settings)
    return redirect(f"{ROOT}/emails/{email_id}")


async def confirm_send(pages: Pages, request: web.Request) -> web.Response:
    email_id = request.match_info["email_id"]
    return pages.render(request, "confirm.html", title=f"Send email {email_id} again?",
                        consequence="Only the members who have not been sent it get it: nobody gets it twice.",
                        action=f"{ROOT}/emails/{email_id}/send", button="Send it", back=f"{ROOT}/emails/{email_id}")


async def send(pages: Pages, request: web.Request) -> web.Response:
    email_id = request.match_info["email_id"]
    await start_newsletter(email_id, client=await pages.temporal(), settings=pages.settings)
    return redirect(f"{ROOT}/emails/{email_id}")


# --- members ---------------------------------------------------------------------------------------

async def members(pages: Pages, request: web.Request) -> web.Response:
    text, recipient_filter = request.query.get("q", ""), request.query.get("filter", "")
    problem, page = None, None
    try:
        page = await search_members(text, recipient_filter, after=request.query.get("after") or None,
                                    settings=pages.settings)
    except BadInput as error:
        problem = str(error)
    return pages.render(request, "members.html", page=page, q=text, filter=recipient_filter, problem=problem)


async def member(pages: Pages, request: web.Request) -> web.Response:
    profile = await member_profile(request.match_info["member_id"], emails=20, settings=pages.settings)
    return pages.render(request, "member.html", member=profile, done=request.query.get("done"))


_MEMBER_ACTIONS = {
    "delete": ("Delete member {id} and their personal data?",
               "Their address and name are removed everywhere; sent emails keep only the member id. "
               "This cannot be undone.", "Delete the member"),
    "unsubscribe": ("Unsubscribe member {id} from every newsletter?",
                    "Recorded as an operator's unsubscribe; they can be resubscribed.", "Unsubscribe"),
    "resubscribe": ("Resubscribe member {id}?",
                    "Lifts Pressroom's suppression of their address and takes it off the provider's lists.",
                    "Resubscribe"),
}


async def confirm_member_action(pages: Pages, request: web.Request) -> web.Response:
    member_id, action = request.match_info["member_id"], request.match_info["action"]
    title, consequence, button = _MEMBER_ACTIONS[action]
    return pages.render(request, "confirm.html", title=title.format(id=member_id), consequence=consequence,
                        action=f"{ROOT}/members/{member_id}/{action}", button=button,
                        back=f"{ROOT}/members/{member_id}")


async def member_action(pages: Pages, request: web.Request) -> web.Response:
    member_id, action = request.match_info["member_id"], request.match_info["action"]
    if action == "delete":
        await delete_member(member_id, settings=pages.settings)
        return redirect(f"{ROOT}/members?deleted={member_id}")
    if action == "unsubscribe":
        await unsubscribe_member(member_id, settings=pages.settings)
    else:
        await resubscribe_member(member_id, settings=pages.settings)
    return redirect(f"{ROOT}/members/{member_id}?done={action}")


# --- health ----------------------------------------------------------------------------------------

_REFUSALS = """
SELECT provider AS source, reason, count AS n, last_at FROM webhook_refusals ORDER BY count DESC LIMIT 20"""


async def health(pages: Pages, request: web.Request) -> web.Response:
    checks = check_report(await run_checks(pages.settings, RUNNING_CHECKS))  # what `pressroom check` says
    outbox = await outbox_status(pages.settings)
    refusals = await _refusals(pages)
    return pages.render(request, "health.html", checks=checks, outbox=outbox, refusals=refusals)


async def _refusals(pages: Pages) -> list[dict]:
    """The front door's refused requests by source and reason, as `webhooks status` counts them."""
    return [dict(row) for row in await pages.pool.fetch(_REFUSALS)]
