"""`pressroom analytics …`: the schedule that fetches Mailgun events into statistics."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import typer
from rich.console import Console
from temporalio.client import WorkflowFailureError

from commands import JSON_OPTION, console, plural, print_json, run_async, warn
from operations.analytics import (
    analytics_backfill,
    analytics_pause,
    analytics_run,
    analytics_schedule,
    analytics_schedule_id,
    analytics_status,
    rejected_events,
)
from pressroom.errors import PressroomError, cause_of
from pressroom.readable import when
from pressroom.settings import get_settings

app = typer.Typer(help="Email analytics: the schedule that fetches Mailgun events into statistics.",
                            no_args_is_help=True)


@app.command("schedule")
def analytics_schedule_command() -> None:
    """Create or update this site's analytics schedule, `email-analytics` on the default task queue (safe to run
    again)."""
    outcome = run_async(analytics_schedule())
    console.print(f"schedule {analytics_schedule_id(get_settings())} {outcome}", highlight=False)


@app.command("run")
def analytics_run_command(wait: bool = typer.Option(False, "--wait", help="Follow the run and print what it did."),
                          as_json: bool = JSON_OPTION) -> None:
    """Start one analytics run now."""
    try:
        result = run_async(analytics_run(wait=wait, say=warn))
    except WorkflowFailureError as error:
        raise PressroomError(f"the analytics run failed: {cause_of(error).message}") from None
    if result is None:
        return console.print("triggered one email-analytics run")
    if as_json:
        return print_json(result.model_dump())
    for phase in result.phases:
        console.print(f"{phase.phase:<14} fetched {phase.events:>7,} events, applied {phase.applied:>7,} "
                      f"({phase.unknown} unknown, {phase.malformed} set aside){_kinds(phase.by_type)}"
                      f"{' capped' if phase.capped else ''}", highlight=False)
    if result.aggregate:
        console.print(f"aggregates     {result.aggregate.emails:,} emails, {result.aggregate.members:,} members "
                      "recomputed", highlight=False)
    console.print(f"run finished: {plural(result.events, 'event')}" + (", capped (a new run continues at once)"
                                                                if result.capped else ""), highlight=False)


@app.command("pause")
def analytics_pause_command() -> None:
    """Pause the schedule (runs in progress finish)."""
    run_async(analytics_pause(True))
    console.print(f"schedule {analytics_schedule_id(get_settings())} paused", highlight=False)


@app.command("unpause")
def analytics_unpause_command() -> None:
    """Resume the schedule."""
    run_async(analytics_pause(False))
    console.print(f"schedule {analytics_schedule_id(get_settings())} unpaused", highlight=False)


@app.command("backfill")
def analytics_backfill_command(
        begin: str = typer.Option(..., "--from", help="ISO 8601 with offset, e.g. 2026-11-01T00:00:00+00:00"),
        end: str = typer.Option(..., "--to", help="ISO 8601 with offset")) -> None:
    """Ask the next runs to re-read Mailgun's events between two times."""
    name = run_async(analytics_backfill(begin, end))
    console.print(f"backfill recorded as {name}; the next run reads it")


@app.command("rejected")
def analytics_rejected_command(limit: int = typer.Option(50, "--limit", min=1, max=10_000, help="How many to list."),
                               as_json: bool = JSON_OPTION) -> None:
    """The delivery events set aside (unusable, never applied, never retried), newest first, with their reason."""
    rejected = run_async(rejected_events(limit=limit))
    if as_json:
        return print_json(rejected)
    console.print(f"{plural(rejected['total'], 'event')} set aside", highlight=False)
    for reason, count in rejected["by_reason"].items():
        console.print(f"{count:>8,}  {reason}", highlight=False)
    for event in rejected["events"]:
        console.print(f"#{event['id']} {when(event['rejected_at'])} {event['provider']} {event['source']} "
                      f"event {event['event_id'] or '(no id)'}: {event['reason']}", highlight=False, markup=False)


@app.command("status")
def analytics_status_command(as_json: bool = JSON_OPTION) -> None:
    """The schedule's state, the last runs, the cursors and their lag."""
    status = run_async(analytics_status())
    print_json(status) if as_json else print_analytics_status(status)


def print_analytics_status(status: dict, console: Console = console) -> None:
    """`analytics status` as lines: schedule, next run, cursors with lag, backfills, the last runs."""
    if not status["exists"]:
        console.print(f"schedule {status['schedule_id']}: not created yet (a `pressroom worker` creates it when "
                      "it starts; `pressroom analytics schedule` creates it now)", highlight=False)
    else:
        console.print(f"schedule {status['schedule_id']}: {'paused' if status['paused'] else 'active'}"
                      f"{' (' + status['note'] + ')' if status['note'] else ''}", highlight=False)
    if status["paused"]:
        console.print("next run: none while paused (`pressroom analytics unpause` resumes it)", highlight=False)
    elif status["next"]:
        console.print(f"next run: {when(status['next'][0])}", highlight=False)
    for name in status["running"]:
        console.print(f"running: {name}", highlight=False)
    for name, cursor in status["cursors"].items():
        console.print(f"cursor {name}: {when(cursor['cursor'])} (lag {cursor['lag_seconds']} s)", highlight=False)
    rejected = status.get("rejected") or {}
    if rejected.get("total"):
        console.print(f"events set aside: {rejected['total']:,} (`pressroom analytics rejected` lists them)",
                      highlight=False)
    for backfill in status["backfills"]:
        console.print(f"backfill {backfill['name']}: {backfill['status']}", highlight=False)
    for run in status["runs"][:5]:
        counts: dict[str, Any] = {}
        for phase in run["phases"]:
            for kind, n in phase["by_type"].items():
                counts[kind] = counts.get(kind, 0) + n
        events = sum(p["events"] for p in run["phases"])
        console.print(f"run {_when_any(run['started_at'])}: {plural(events, 'event')}{_kinds(counts)}, "
                      f"{run.get('events_per_second', 0)} events/s"
                      f"{', capped' if run['capped'] else ''}{', ERROR ' + run['error'] if run['error'] else ''}",
                      highlight=False)


def _when_any(moment) -> str:
    """A run's start as recorded (epoch seconds or ISO 8601), as people read times."""
    if isinstance(moment, (int, float)):
        return when(datetime.fromtimestamp(moment, UTC))
    try:
        return when(moment)
    except (TypeError, ValueError):
        return str(moment)


def _kinds(counts: dict) -> str:
    """Events by kind as words: `: delivered 10, opened 4` (nothing when there are none)."""
    return (": " + ", ".join(f"{kind} {n:,}" for kind, n in sorted(counts.items()))) if counts else ""
