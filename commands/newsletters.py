"""`pressroom newsletters …`: the site's newsletters (add, list, edit)."""

from __future__ import annotations

import typer

from commands import JSON_OPTION, console, print_json, run_async
from operations.authoring import add_newsletter, edit_newsletter, list_newsletters

app = typer.Typer(help="The site's newsletters: add, list, edit.", no_args_is_help=True)


@app.command("add")
def newsletters_add(name: str = typer.Argument(..., help="The newsletter's name."),
                    slug: str = typer.Option(None, "--slug", help="Its slug (default: from the name)."),
                    sender_name: str = typer.Option(None, "--sender-name"),
                    sender_email: str = typer.Option(None, "--sender-email"),
                    reply_to: str = typer.Option(None, "--reply-to", help="newsletter, support or an address."),
                    no_signup: bool = typer.Option(False, "--no-subscribe-on-signup",
                                                   help="New members are not subscribed to it."),
                    as_json: bool = JSON_OPTION) -> None:
    """Add a newsletter; new members are subscribed to it unless --no-subscribe-on-signup."""
    newsletter = run_async(add_newsletter(name, slug=slug, sender_name=sender_name, sender_email=sender_email,
                                          sender_reply_to=reply_to, subscribe_on_signup=not no_signup))
    if as_json:
        return print_json(newsletter.model_dump())
    console.print(f"newsletter {newsletter.id} ({newsletter.slug}) added", highlight=False)


@app.command("list")
def newsletters_list(as_json: bool = JSON_OPTION) -> None:
    """Every newsletter, oldest first."""
    newsletters = run_async(list_newsletters())
    if as_json:
        return print_json([n.model_dump() for n in newsletters])
    if not newsletters:
        console.print("no newsletters")
    for n in newsletters:
        console.print(f"{n.id}  {n.slug}  {n.status}  {n.name}", highlight=False, markup=False)


@app.command("edit")
def newsletters_edit(newsletter: str = typer.Argument(..., help="The newsletter (id or slug)."),
                     name: str = typer.Option(None, "--name"),
                     sender_name: str = typer.Option(None, "--sender-name"),
                     sender_email: str = typer.Option(None, "--sender-email"),
                     reply_to: str = typer.Option(None, "--reply-to"),
                     status: str = typer.Option(None, "--status", metavar="active|archived"),
                     subscribe_on_signup: bool = typer.Option(None, "--subscribe-on-signup/--no-subscribe-on-signup"),
                     as_json: bool = JSON_OPTION) -> None:
    """Change a newsletter; only the options given."""
    changed = run_async(edit_newsletter(newsletter, name=name, sender_name=sender_name, sender_email=sender_email,
                                        sender_reply_to=reply_to, status=status,
                                        subscribe_on_signup=subscribe_on_signup))
    if as_json:
        return print_json(changed.model_dump())
    console.print(f"newsletter {changed.id} ({changed.slug}) changed", highlight=False)
