"""`pressroom limits …`: the batch size learned per sending domain, the send caps' use, a reset."""

from __future__ import annotations

import typer

from commands import console, run_async
from operations.limits import reset_sending_limit, sending_limits

app = typer.Typer(help="The provider's limits: batch sizes learned per sending domain, and send caps.",
                  no_args_is_help=True)


@app.command("show")
def limits_show() -> None:
    """Per sending domain: the batch size learned from Mailgun's refusals, the caps and their use."""
    for row in run_async(sending_limits()):
        learned = (f"batches of {row['batch_size']:,} (refused {row['refused_size']:,} at "
                   f"{row['refused_at']:%Y-%m-%d %H:%M} UTC: {row['reason']})" if row["batch_size"]
                   else "no batch size learned")
        caps = ", ".join(f"{used:,}/{cap:,} {label}" for cap, used, label in (
            (row["hourly_limit"], row["sent_this_hour"], "this hour"), (row["daily_limit"], row["sent_today"], "today"))
            if cap) or "no send cap"
        console.print(f"{row['domain']}: {learned}; {caps}", highlight=False, soft_wrap=True)


@app.command("reset")
def limits_reset(domain: str = typer.Argument(..., help="The sending domain whose account left probation.")) -> None:
    """Forget the batch size learned for a domain: later batches start from PRESSROOM_BATCH_SIZE again."""
    run_async(reset_sending_limit(domain))
    console.print(f"{domain}: batch size reset", highlight=False)
