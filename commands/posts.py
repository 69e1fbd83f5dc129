"""`pressroom posts …`: schedule, unschedule and reconcile posts (one durable timer each)."""

from __future__ import annotations

import sys

import typer

from activities.posts.models import publish_workflow_id
from commands import (
    AFTER_OPTION,
    JSON_OPTION,
    LIMIT_OPTION,
    SINCE_OPTION,
    console,
    plural,
    print_json,
    print_page,
    repeated_filters,
    run_async,
    warn,
)
from operations.authoring import PostChange, add_post, delete_post, edit_post
from operations.finding import list_page
from operations.posts import posts_status, reconcile_posts, schedule_post, unschedule_post
from operations.waiting import no_worker_message
from pressroom.errors import BadInput
from pressroom.inputs import publish_time
from pressroom.readable import when

app = typer.Typer(help="Scheduled posts: one durable timer per post.", no_args_is_help=True)


@app.command("list")
def posts_list(status: str = typer.Option(None, "--status", metavar="draft|scheduled|published|sent",
                                          help="Only this state."),
               newsletter: str = typer.Option(None, "--newsletter", metavar="ID|SLUG", help="Only this newsletter's."),
               since: str = SINCE_OPTION, limit: int = LIMIT_OPTION, after: str = AFTER_OPTION,
               as_json: bool = JSON_OPTION) -> None:
    """Posts, newest first, a page at a time, with their email (`newsletter report EMAIL_ID`)."""
    page = run_async(list_page("post", status=status, newsletter=newsletter, since=since, after=after, limit=limit))
    if as_json:
        return print_json(page)
    again = repeated_filters(status=status, newsletter=newsletter, since=since)
    print_page(page, {"post_id": "post", "title": "title", "status": "status", "publish_at": "publish at",
                      "newsletter": "newsletter", "email_id": "email", "email_status": "email status",
                      "created_at": "created"},
               empty="no posts match", more=f"pressroom posts list{again}")


@app.command("schedule")
def posts_schedule(post_id: str = typer.Argument(..., help="The post (posts.id)."),
                   at: str = typer.Option(..., "--at", help="ISO 8601 with offset, e.g. 2026-12-01T09:00:00+01:00.")
                   ) -> None:
    """Schedule a post (or move it); a time in the past publishes it at once."""
    publish_at = run_async(schedule_post(post_id, at))
    console.print(f"post {post_id} publishes at {when(publish_at)} (workflow {publish_workflow_id(post_id)})",
                  highlight=False)


@app.command("unschedule")
def posts_unschedule(post_id: str = typer.Argument(..., help="The post (posts.id).")) -> None:
    """Set a scheduled post back to draft; its timer ends without publishing."""
    run_async(unschedule_post(post_id))
    console.print(f"post {post_id} is a draft again", highlight=False)


@app.command("reconcile")
def posts_reconcile() -> None:
    """Give every scheduled post its workflow at its time, and stop workflows of posts not scheduled."""
    result = run_async(reconcile_posts())
    console.print(f"{plural(result.started_or_moved, 'scheduled post')} started or moved, "
                  f"{plural(result.stopped, 'stray timer')} stopped", highlight=False)


@app.command("status")
def posts_status_command(post_id: str = typer.Argument(None, help="One post (posts.id); all posts when omitted."),
                         as_json: bool = JSON_OPTION) -> None:
    """Posts by state and the next due; or one post and its timer."""
    status = run_async(posts_status(post_id))
    if as_json:
        return print_json(status)
    if post_id is None:
        console.print(", ".join(f"{n:,} {state}" for state, n in status["counts"].items()) or "no posts",
                      highlight=False)
        if status["overdue"]:
            console.print(f"{plural(status['overdue'], 'scheduled post')} "
                          f"{'is' if status['overdue'] == 1 else 'are'} overdue (is a worker running?)",
                          highlight=False)
        for post in status["next"]:
            console.print(f"next: post {post['post_id']} at {when(post['publish_at'])}", highlight=False)
        for post in status["newsletter_not_going"]:
            warn(f"post {post['post_id']}: its newsletter will not go out: {post['why']}")
        return
    run = status["run"]
    at = when(status["publish_at"]) if status["publish_at"] else "no time"
    console.print(f"post {post_id}: {status['status']} ({at})", highlight=False)
    console.print(f"run: {status['workflow_id']} " + (f"{run['status']} (run {run['run_id']})" if run else "none")
                  + (f", timer at {when(run['timer_at'])}" if run and run["timer_at"] else ""), highlight=False)
    email = status["email"]
    if email and email["email_id"]:
        console.print(f"email: {email['email_id']} {email['status']}", highlight=False)
    if email and email["will_not_go_out"]:
        warn(f"its newsletter will not go out: {email['will_not_go_out']}")
    if run and run["worker_polling"] is False:
        warn(no_worker_message(run["task_queue"]))


def _content(html_file, markdown_file, lexical_file=None, mobiledoc_file=None) -> tuple[str | None, ...]:
    """The post's content from --html, --markdown, --lexical or --mobiledoc FILE (`-` reads stdin)."""
    def read(path) -> str:
        try:
            return sys.stdin.read() if str(path) == "-" else open(path, encoding="utf-8").read()
        except (OSError, UnicodeDecodeError) as error:
            raise BadInput(f"cannot read {path}: {type(error).__name__}") from None

    return tuple(read(path) if path else None for path in (html_file, markdown_file, lexical_file, mobiledoc_file))


def _change(title, html_file, markdown_file, status, at, newsletter, segment, visibility, tiers, lexical_file=None,
            mobiledoc_file=None):
    html, markdown, lexical, mobiledoc = _content(html_file, markdown_file, lexical_file, mobiledoc_file)
    return PostChange(title=title, html=html, markdown=markdown, lexical=lexical, mobiledoc=mobiledoc, status=status,
                      at=publish_time(at) if at else None, newsletter=newsletter, segment=segment,
                      visibility=visibility, tiers=tiers or None)


def _print_post(post, as_json: bool) -> None:
    if as_json:
        return print_json(post.model_dump())
    email = f", email {post.email_id} ({post.email_status})" if post.email_id else ""
    at = f" at {when(post.published_at)}" if post.published_at else ""
    console.print(f"post {post.id} ({post.slug}) {post.status}{at}{email}", highlight=False, markup=False)


_STATUS = typer.Option(None, "--status", metavar="draft|scheduled|published",
                       help="scheduled needs --at; published publishes now (its newsletter goes out).")
_AT = typer.Option(None, "--at", help="ISO 8601 with offset, for --status scheduled; with published, a past "
                                      "time backdates the post.")
_NEWSLETTER = typer.Option(None, "--newsletter", metavar="ID|SLUG", help="Send it as this newsletter's email.")
_SEGMENT = typer.Option(None, "--segment", metavar="FILTER", help="Who gets the email (a recipient filter; all).")
_VISIBILITY = typer.Option(None, "--visibility", metavar="public|members|paid|tiers")
_TIER = typer.Option(None, "--tier", metavar="SLUG", help="A tier the post is for (repeat; --visibility tiers).")
_LEXICAL = typer.Option(None, "--lexical", metavar="FILE", help="The post as the reference editor's Lexical JSON.")
_MOBILEDOC = typer.Option(None, "--mobiledoc", metavar="FILE", help="The post as its older editor's mobiledoc JSON.")


@app.command("add")
def posts_add(title: str = typer.Option(..., "--title"),
              html_file: str = typer.Option(None, "--html", metavar="FILE", help="The post as HTML (sanitised)."),
              markdown_file: str = typer.Option(None, "--markdown", metavar="FILE", help="The post as Markdown."),
              status: str = _STATUS, at: str = _AT, newsletter: str = _NEWSLETTER, segment: str = _SEGMENT,
              visibility: str = _VISIBILITY, tier: list[str] = _TIER, as_json: bool = JSON_OPTION,
              lexical_file: str = _LEXICAL, mobiledoc_file: str = _MOBILEDOC) -> None:
    """Add a post from HTML, Markdown, Lexical or mobiledoc; with --newsletter it gets its email, sent when it is
    published."""
    change = _change(title, html_file, markdown_file, status or "draft", at, newsletter, segment, visibility, tier,
                     lexical_file, mobiledoc_file)
    _print_post(run_async(add_post(change)), as_json)


@app.command("edit")
def posts_edit(post: str = typer.Argument(..., help="The post (id or slug)."),
               title: str = typer.Option(None, "--title"),
               html_file: str = typer.Option(None, "--html", metavar="FILE"),
               markdown_file: str = typer.Option(None, "--markdown", metavar="FILE"),
               status: str = _STATUS, at: str = _AT, newsletter: str = _NEWSLETTER, segment: str = _SEGMENT,
               visibility: str = _VISIBILITY, tier: list[str] = _TIER, as_json: bool = JSON_OPTION,
               lexical_file: str = _LEXICAL, mobiledoc_file: str = _MOBILEDOC) -> None:
    """Change a post: content, audience, newsletter; schedule, publish or unschedule it."""
    change = _change(title, html_file, markdown_file, status, at, newsletter, segment, visibility, tier,
                     lexical_file, mobiledoc_file)
    _print_post(run_async(edit_post(post, change)), as_json)


@app.command("delete")
def posts_delete(post: str = typer.Argument(..., help="The post (id or slug).")) -> None:
    """Delete a post and its unsent email (a post whose email went out stays)."""
    console.print(f"post {run_async(delete_post(post))} deleted", highlight=False)
