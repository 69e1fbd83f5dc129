"""`pressroom analytics …`: the schedule that fetches Mailgun events into statistics."""

from __future__ import annotations

import typer
from rich.console import Console

from commands import console, run_async
from operations.analytics import (analytics_backfill, analytics_pause, analytics_schedule, analytics_status,
                                  analytics_trigger)

app = typer.Typer(help="Email analytics: the schedule that fetches Mailgun events into statistics.",
                            no_args_is_help=True)


@app.command("schedule")
def analytics_schedule_command() -> None:
    """Create or update the schedule `email-analytics` (safe to run again)."""
    outcome = run_async(analytics_schedule())
    console.print(f"schedule email-analytics {outcome}")


@app.command("run")
def analytics_run_command() -> None:
    """Start one analytics run now."""
    run_async(analytics_trigger())
    console.print("triggered one email-analytics run")


@app.command("pause")
def analytics_pause_command() -> None:
    """Pause the schedule (runs in progress finish)."""
    run_async(analytics_pause(True))
    console.print("schedule email-analytics paused")


@app.command("unpause")
def analytics_unpause_command() -> None:
    """Resume the schedule."""
    run_async(analytics_pause(False))
    console.print("schedule email-analytics unpaused")


@app.command("backfill")
def analytics_backfill_command(
        begin: str = typer.Option(..., "--from", help="ISO 8601 with offset, e.g. 2026-11-01T00:00:00+00:00"),
        end: str = typer.Option(..., "--to", help="ISO 8601 with offset")) -> None:
    """Ask the next runs to re-read Mailgun's events between two times."""
    name = run_async(analytics_backfill(begin, end))
    console.print(f"backfill recorded as {name}; the next run reads it")


@app.command("status")
def analytics_status_command() -> None:
    """The schedule's state, the last runs, the cursors and their lag."""
    print_analytics_status(run_async(analytics_status()))


def print_analytics_status(status: dict, console: Console = console) -> None:
    """`analytics status` as lines: schedule, next run, cursors with lag, backfills, the last runs."""
    console.print(f"schedule email-analytics: {'paused' if status['paused'] else 'active'}"
                  f"{' (' + status['note'] + ')' if status['note'] else ''}", highlight=False)
    if status["next"]:
        console.print(f"next run: {status['next'][0]}", highlight=False)
    for name in status["running"]:
        console.print(f"running: {name}", highlight=False)
    for name, cursor in status["cursors"].items():
        console.print(f"cursor {name}: {cursor['cursor']} (lag {cursor['lag_seconds']} s)", highlight=False)
    for backfill in status["backfills"]:
        console.print(f"backfill {backfill['name']}: {backfill['status']}", highlight=False)
    for run in status["runs"][:5]:
        counts = {}
        for phase in run["phases"]:
            for kind, n in phase["by_type"].items():
                counts[kind] = counts.get(kind, 0) + n
        console.print(f"run {run['started_at']}: {sum(p['events'] for p in run['phases'])} events {counts}, "
                      f"{run.get('events_per_second', 0)} events/s"
                      f"{', capped' if run['capped'] else ''}{', ERROR ' + run['error'] if run['error'] else ''}",
                      highlight=False)
