"""`pressroom integrations …`: integrations, their Admin API keys (docs/admin-api.md) and their
webhooks (docs/site-webhooks.md)."""

from __future__ import annotations

import typer

from commands import JSON_OPTION, console, print_json, run_async
from commands.integrations_webhooks import app as webhooks
from operations.integrations import add_integration, list_integrations, remove_integration
from pressroom.readable import when

app = typer.Typer(help="Integrations: their Admin API keys, and their webhooks.", no_args_is_help=True)
app.add_typer(webhooks, name="webhooks")


@app.command("add")
def integrations_add(name: str = typer.Argument(..., help="The integration's name."),
                     as_json: bool = JSON_OPTION) -> None:
    """Add an integration and print its Admin API key (id:secret), shown this once."""
    added = run_async(add_integration(name))
    if as_json:
        return print_json(added.model_dump())
    console.print(f"integration {added.name!r} (slug {added.slug}) added; its Admin API key (keep it secret, it is "
                  "shown once):",
                  highlight=False, markup=False)
    print(added.admin_api_key)


@app.command("list")
def integrations_list(as_json: bool = JSON_OPTION) -> None:
    """The integrations, with their slug (what `webhooks add --integration` takes) and their key's id (never its
    secret)."""
    found = run_async(list_integrations())
    if as_json:
        return print_json([i.model_dump() for i in found])
    if not found:
        console.print("no integrations")
    for i in found:
        console.print(f"{i.name}  slug {i.slug}  key {i.key_id or '-'}  added {when(i.created_at)}",
                      highlight=False, markup=False)


@app.command("remove")
def integrations_remove(name: str = typer.Argument(..., help="The integration (name or slug).")) -> None:
    """Remove an integration and its keys: tokens signed with them are refused at once."""
    run_async(remove_integration(name))
    console.print(f"integration {name!r} removed", highlight=False, markup=False)
