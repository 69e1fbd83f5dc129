"""`pressroom retention …`: recipient rows of old emails folded into their figures and dropped."""

from __future__ import annotations

import typer

from commands import JSON_OPTION, console, print_json, run_async
from operations.retention import retention_status, run_retention

app = typer.Typer(help="Retention: old emails' recipient rows folded into their figures, then dropped.",
                  no_args_is_help=True)


@app.command("run")
def retention_run(days: int = typer.Option(None, "--days", min=0, help="Fold emails older than this many days "
                                                                       "(default PRESSROOM_RECIPIENT_RETENTION_DAYS)."),
                  as_json: bool = JSON_OPTION) -> None:
    """Fold and drop now the recipient rows of emails older than the retention period."""
    result = run_async(run_retention(days))
    if as_json:
        return print_json(result.model_dump(mode="json"))
    if not result.retention_days:
        console.print("retention is off (PRESSROOM_RECIPIENT_RETENTION_DAYS=0): every recipient row is kept",
                      highlight=False)
        return None
    console.print(f"{result.emails_folded:,} emails older than {result.retention_days} days folded: "
                  f"{result.rows_dropped:,} recipient rows dropped in {result.chunks:,} chunks", highlight=False)
    return None


@app.command("status")
def retention_status_command(as_json: bool = JSON_OPTION) -> None:
    """The retention period, emails folded and due, and the recipient rows and bytes that remain."""
    status = run_async(retention_status())
    if as_json:
        return print_json(status)
    days = status["retention_days"]
    console.print(f"retention: {f'{days} days' if days else 'off (rows kept for ever)'}; "
                  f"{status['emails_folded']:,} emails folded, {status['emails_due']:,} due; email_recipients "
                  f"about {max(status['rows_estimate'], 0):,} rows, {status['table_bytes'] / 1e6:,.1f} MB table "
                  f"+ {status['index_bytes'] / 1e6:,.1f} MB indexes", highlight=False)
    return None
