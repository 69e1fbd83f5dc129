"""`pressroom limits …`: the batch size learned per sending domain, the send caps' use, a reset."""

from __future__ import annotations

import typer

from commands import JSON_OPTION, console, print_json, run_async
from operations.limits import reset_sending_limit, sending_limits
from pressroom.readable import when

app = typer.Typer(help="The provider's limits: batch sizes learned per sending domain, and send caps.",
                  no_args_is_help=True)


@app.command("show")
def limits_show(as_json: bool = JSON_OPTION) -> None:
    """Per sending domain: the batch size learned from Mailgun's refusals, the caps and their use."""
    rows = run_async(sending_limits())
    if as_json:
        return print_json({"domains": rows})
    if not rows:
        console.print("no sending domain has a learned batch size or a send cap", highlight=False)
    for row in rows:
        learned = (f"batches of {row['batch_size']:,} (refused {row['refused_size']:,} at "
                   f"{when(row['refused_at'])}: {row['reason']})" if row["batch_size"]
                   else "no batch size learned")
        caps = [(row["hourly_limit"], row["sent_this_hour"], "this hour"),
                (row["daily_limit"], row["sent_today"], "today")]
        if row.get("account_sent_last_24_hours") is not None:  # the provider counts a rolling day for the account
            caps[1] = (row["account_daily_limit"], row["account_sent_last_24_hours"], "in 24 hours (the account's)")
        stated = ", ".join(f"{used:,}/{cap:,} {label}" for cap, used, label in caps if cap) or "no send cap"
        console.print(f"{row['domain']}: {learned}; {stated}", highlight=False, soft_wrap=True)


@app.command("reset")
def limits_reset(domain: str = typer.Argument(..., help="The sending domain whose account left probation.")) -> None:
    """Forget the batch size learned for a domain: later batches start from PRESSROOM_BATCH_SIZE again."""
    run_async(reset_sending_limit(domain))
    console.print(f"{domain}: batch size reset", highlight=False)
