"""`pressroom integrations …`: the site's integrations and their webhooks."""

from __future__ import annotations

import typer

from commands.integrations_webhooks import app as webhooks

app = typer.Typer(help="Integrations: the site's outside tools, and their webhooks.", no_args_is_help=True)
app.add_typer(webhooks, name="webhooks")
