"""`pressroom posts …`: schedule, unschedule and reconcile posts (one durable timer each)."""

from __future__ import annotations

import typer

from commands import JSON_OPTION, console, print_json, run_async, warn
from activities.posts import publish_workflow_id
from operations.posts import posts_status, reconcile_posts, schedule_post, unschedule_post
from pressroom.waiting import no_worker_message

app = typer.Typer(help="Scheduled posts: one durable timer per post.", no_args_is_help=True)


@app.command("schedule")
def posts_schedule(post_id: str = typer.Argument(..., help="The post (posts.id)."),
                   at: str = typer.Option(..., "--at", help="ISO 8601 with offset, e.g. 2026-12-01T09:00:00+01:00.")
                   ) -> None:
    """Schedule a post (or move it); a time in the past publishes it at once."""
    publish_at = run_async(schedule_post(post_id, at))
    console.print(f"post {post_id} publishes at {publish_at.isoformat()} (workflow {publish_workflow_id(post_id)})",
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
    console.print(f"{result.started_or_moved} scheduled posts started or moved, {result.stopped} stray timers stopped")


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
            console.print(f"{status['overdue']} scheduled posts are overdue (is a worker running?)", highlight=False)
        for post in status["next"]:
            console.print(f"next: post {post['post_id']} at {post['publish_at'].isoformat()}", highlight=False)
        return
    run = status["run"]
    when = status["publish_at"].isoformat() if status["publish_at"] else "no time"
    console.print(f"post {post_id}: {status['status']} ({when})", highlight=False)
    console.print(f"run: {status['workflow_id']} " + (f"{run['status']} (run {run['run_id']})" if run else "none")
                  + (f", timer at {run['timer_at'].isoformat()}" if run and run["timer_at"] else ""), highlight=False)
    if run and run["worker_polling"] is False:
        warn(no_worker_message(run["task_queue"]))
