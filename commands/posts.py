"""`pressroom posts …`: schedule, unschedule and reconcile posts (one durable timer each)."""

from __future__ import annotations

import typer

from commands import console, run_async
from operations.posts import reconcile_posts, schedule_post, unschedule_post

app = typer.Typer(help="Scheduled posts: one durable timer per post.", no_args_is_help=True)


@app.command("schedule")
def posts_schedule(post_id: str = typer.Argument(..., help="The post (posts.id)."),
                   at: str = typer.Option(..., "--at", help="ISO 8601 with offset, e.g. 2026-12-01T09:00:00+01:00.")
                   ) -> None:
    """Schedule a post (or move it); a time in the past publishes it at once."""
    publish_at = run_async(schedule_post(post_id, at))
    console.print(f"post {post_id} publishes at {publish_at.isoformat()} (workflow post-publish-{post_id})",
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
