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
                     header_image: str = typer.Option(None, "--header-image", help="An http(s) URL; \"\" removes it."),
                     show_header_icon: bool = typer.Option(None, "--show-header-icon/--no-header-icon"),
                     show_header_title: bool = typer.Option(None, "--show-header-title/--no-header-title"),
                     show_header_name: bool = typer.Option(None, "--show-header-name/--no-header-name"),
                     title_font: str = typer.Option(None, "--title-font", metavar="serif|sans_serif"),
                     title_alignment: str = typer.Option(None, "--title-alignment", metavar="center|left"),
                     show_post_title: bool = typer.Option(None, "--show-post-title/--no-post-title"),
                     show_feature_image: bool = typer.Option(None, "--show-feature-image/--no-feature-image"),
                     body_font: str = typer.Option(None, "--body-font", metavar="serif|sans_serif"),
                     show_byline: bool = typer.Option(None, "--show-byline/--no-byline"),
                     show_excerpt: bool = typer.Option(None, "--show-excerpt/--no-excerpt"),
                     footer: str = typer.Option(None, "--footer", help="Footer HTML (sanitised); \"\" removes it."),
                     show_badge: bool = typer.Option(None, "--show-badge/--no-badge"),
                     background: str = typer.Option(None, "--background-color", metavar="light|dark|#rrggbb"),
                     border: str = typer.Option(None, "--border-color", metavar="auto|accent|#rrggbb|none"),
                     title_colour: str = typer.Option(None, "--title-color", metavar="auto|accent|#rrggbb|none"),
                     link_colour: str = typer.Option(None, "--link-color", metavar="accent|#rrggbb|none"),
                     button_colour: str = typer.Option(None, "--button-color", metavar="auto|accent|#rrggbb|none"),
                     as_json: bool = JSON_OPTION) -> None:
    """Change a newsletter; only the options given (its design's too)."""
    given = {"header_image": header_image, "show_header_icon": show_header_icon,
             "show_header_title": show_header_title, "show_header_name": show_header_name,
             "title_font_category": title_font, "title_alignment": title_alignment,
             "show_post_title_section": show_post_title, "show_feature_image": show_feature_image,
             "body_font_category": body_font, "show_byline": show_byline, "show_excerpt": show_excerpt,
             "footer_content": footer, "show_badge": show_badge, "background_color": background,
             "border_color": border, "title_color": title_colour, "link_color": link_colour,
             "button_color": button_colour}
    # "none" is how a shell says a colour goes back to the reference's default (null).
    design = {k: (None if k.endswith("_color") and v == "none" else v) for k, v in given.items() if v is not None}
    changed = run_async(edit_newsletter(newsletter, name=name, sender_name=sender_name, sender_email=sender_email,
                                        sender_reply_to=reply_to, status=status,
                                        subscribe_on_signup=subscribe_on_signup, design=design))
    if as_json:
        return print_json(changed.model_dump())
    console.print(f"newsletter {changed.id} ({changed.slug}) changed", highlight=False)
