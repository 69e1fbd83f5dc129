"""`pressroom automations …`: member email sequences, their runs and figures (docs/automations.md)."""

from __future__ import annotations

import typer

from commands import JSON_OPTION, console, print_json, run_async
from operations.automations import (
    Automation,
    automation_runs,
    automation_stats,
    edit_automation,
    list_automations,
    set_automation_status,
    show_automation,
)
from pressroom.readable import when

app = typer.Typer(help="Automations: member email sequences, one durable run per member.", no_args_is_help=True)
NAME = typer.Argument(..., metavar="ID", help="The automation's id or slug (welcome-free, welcome-paid, …).")


def _say(text: str) -> None:
    console.print(text, highlight=False, markup=False)


@app.command("list")
def automations_list(as_json: bool = JSON_OPTION) -> None:
    """Every automation: its status, its actions and its runs by state."""
    rows = run_async(list_automations())
    if as_json:
        return print_json([row.as_json() for row in rows])
    for row in rows:
        _say(f"{row.slug:<24} {row.status:<9} {row.actions} actions  in progress {row.in_progress:,}  "
             f"completed {row.completed:,}  exited early {row.exited_early:,}  {row.id}")


def _print_automation(shown: Automation) -> None:
    a = shown.automation
    _say(f"{a.name} ({a.slug}, {a.id}): {a.status}, entered by {', '.join(a.member_statuses)} members at signup")
    position = {action.id: action.position for action in shown.actions}
    for action in shown.actions:
        what = f"wait {action.wait_hours:g} h" if action.type == "wait" else f"send_email {action.subject!r}"
        if action.type == "wait_for_click":
            paths = {e.condition: position.get(e.target_action_id) for e in shown.edges
                     if e.source_action_id == action.id}
            what = (f"wait up to {action.wait_hours:g} h for a click on the email before: clicked → "
                    f"{paths.get('clicked', '-')}, otherwise → {paths.get('not_clicked', '-')}")
        sent = f", sent {action.sent:,}" if action.type == "send_email" else ""
        _say(f"  {action.position}. {what} (revision {action.revision}{sent}, runs here {action.in_progress:,})")


@app.command("show")
def automations_show(name: str = NAME, as_json: bool = JSON_OPTION) -> None:
    """One automation: its path of actions, each with its revision and figures."""
    shown = run_async(show_automation(name))
    if as_json:
        return print_json(shown)
    _print_automation(shown)


@app.command("edit")
def automations_edit(name: str = NAME,
                     action: str = typer.Option(..., "--action", metavar="N", help="The action's position (1, 2, …) "
                                                                                  "or id."),
                     subject: str = typer.Option(None, "--subject", help="A send_email's new subject."),
                     body: str = typer.Option(None, "--body", metavar="HTML", help="A send_email's new body."),
                     wait_hours: float = typer.Option(None, "--wait-hours", help="A wait's new length."),
                     as_json: bool = JSON_OPTION) -> None:
    """Change one action's subject, body or wait (a new revision); runs that have not reached it follow it."""
    shown = run_async(edit_automation(name, action, subject=subject, body=body, wait_hours=wait_hours))
    if as_json:
        return print_json(shown)
    _print_automation(shown)


@app.command("enable")
def automations_enable(name: str = NAME, as_json: bool = JSON_OPTION) -> None:
    """Switch an automation on: members enter it at signup."""
    row = run_async(set_automation_status(name, "active"))
    if as_json:
        return print_json(row)
    _say(f"automation {row.slug} is active")


@app.command("disable")
def automations_disable(name: str = NAME, as_json: bool = JSON_OPTION) -> None:
    """Switch an automation off: nobody enters it, and its runs end at their next step."""
    row = run_async(set_automation_status(name, "inactive"))
    if as_json:
        return print_json(row)
    _say(f"automation {row.slug} is inactive: its {row.in_progress:,} runs in progress end at their next step")


@app.command("runs")
def automations_runs(name: str = NAME,
                     status: str = typer.Option(None, "--status", metavar="STATE",
                                                help="in_progress, completed or exited_early."),
                     as_json: bool = JSON_OPTION) -> None:
    """Its latest fifty runs, newest first, with each one's steps."""
    runs = run_async(automation_runs(name, status))
    if as_json:
        return print_json(runs)
    if not runs.runs:
        _say("no runs")
    for run in runs.runs:
        why = f" ({run.exit_reason})" if run.exit_reason else ""
        _say(f"{run.id}  member {run.member_id or '(deleted)'}  {run.status}{why}  entered {when(run.created_at)}")
        for step in run.steps:
            _say(f"    {step.type:<10} revision {step.revision}  {step.status}"
                 + (f"  path {step.path}" if step.path else "") + (f"  {step.error}" if step.error else ""))


@app.command("stats")
def automations_stats(name: str = NAME, as_json: bool = JSON_OPTION) -> None:
    """Its figures: entries per day, emails sent, members who clicked, click rate."""
    stats = run_async(automation_stats(name))
    if as_json:
        return print_json(stats)
    rate = "-" if stats.click_rate is None else f"{stats.click_rate:.1%}"
    _say(f"sent {stats.sent:,}  clicked {stats.clicked:,}  click rate {rate}  (opens: not counted yet)")
    for day in stats.entries:
        _say(f"  {day.day}  {day.entries:,} entered")
