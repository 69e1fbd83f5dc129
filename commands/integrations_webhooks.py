"""`pressroom integrations webhooks …`: an integration's webhooks, the site's events sent to them, their attempts."""

from __future__ import annotations

import typer

from commands import JSON_OPTION, console, print_json, run_async
from operations.site_webhooks import create_webhook, delete_webhook, list_webhooks, webhook_attempts
from pressroom.readable import when

app = typer.Typer(help="The site's events (member.added, post.published, …) sent to integrations' webhooks.",
                  no_args_is_help=True)


@app.command("add")
def webhooks_add(event: str = typer.Argument(..., help="The site's event, e.g. member.added or post.published."),
                 target_url: str = typer.Argument(..., metavar="URL", help="Where it is sent (https://)."),
                 integration: str = typer.Option(..., "--integration", metavar="ID|SLUG",
                                                 help="The integration the webhook belongs to."),
                 name: str = typer.Option(None, "--name", help="A name to know it by."),
                 secret: str = typer.Option(None, "--secret", envvar="PRESSROOM_WEBHOOK_SECRET",
                                            help="Signs each request (X-Ghost-Signature); or set "
                                                 "PRESSROOM_WEBHOOK_SECRET."),
                 as_json: bool = JSON_OPTION) -> None:
    """Subscribe a webhook to one of the site's events."""
    webhook = run_async(create_webhook(event, target_url, integration, name=name, secret=secret))
    if as_json:
        return print_json(webhook)
    signed = "signed" if webhook.has_secret else "unsigned"
    console.print(f"webhook {webhook.id}: {webhook.event}, {signed}", highlight=False, markup=False)


@app.command("list")
def webhooks_list(integration: str = typer.Option(None, "--integration", metavar="ID|SLUG",
                                                  help="Only this integration's."),
                  as_json: bool = JSON_OPTION) -> None:
    """Webhooks with their event, target and last attempt."""
    webhooks = run_async(list_webhooks(integration))
    if as_json:
        return print_json(webhooks)
    if not webhooks:
        console.print("no webhooks")
    for w in webhooks:
        last = f"last {when(w.last_triggered_at)} {w.last_triggered_status or ''} {w.last_triggered_error or ''}"
        last = last.rstrip()
        console.print(f"{w.id}  {w.event:<22} {w.target_url}  {last}", highlight=False, markup=False)


@app.command("remove")
def webhooks_remove(webhook_id: str = typer.Argument(..., metavar="ID")) -> None:
    """Remove a webhook; its events not yet delivered are skipped."""
    skipped = run_async(delete_webhook(webhook_id))
    console.print(f"webhook {webhook_id} removed; {skipped:,} undelivered events skipped", highlight=False)


@app.command("attempts")
def webhooks_attempts(failed: bool = typer.Option(False, "--failed", help="Only attempts not delivered."),
                      webhook: str = typer.Option(None, "--webhook", metavar="ID", help="Only this webhook's."),
                      limit: int = typer.Option(50, "--limit", min=1, max=1000, help="How many, newest first."),
                      as_json: bool = JSON_OPTION) -> None:
    """Recent attempts with their answer or error (`outbox requeue ID` sends a refused one again)."""
    attempts = run_async(webhook_attempts(failed=failed, webhook=webhook, limit=limit))
    if as_json:
        return print_json(attempts)
    if not attempts:
        console.print("no attempts")
    for a in attempts:
        console.print(f"{when(a.attempted_at)}  {a.outcome:<9} {a.status_code or '-':>4}  {a.event:<22} "
                      f"webhook {a.webhook_id} entry {a.outbox_id} #{a.attempt} {a.duration_ms} ms  {a.error or ''}"
                      f"{f'  answer: {a.answer}' if a.answer else ''}",
                      highlight=False, markup=False)
