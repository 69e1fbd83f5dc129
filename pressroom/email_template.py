"""The designed email around a segment's body: the newsletter's design (schema/0083) laid out as mail
clients need it, a 600 px table with every style inlined (css-inline, html5ever's parser).

Pure: `wrap` takes the body `render` made for one segment (personalised, cut, links rewritten) and
returns the whole document, so the template costs one inlining per segment, never per reader. The
reader's own values stay the provider's placeholders: the inliner only moves CSS into attributes.
"""

from __future__ import annotations

import html as html_lib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import css_inline
import nh3

ACCENT = "#ff1a75"  # the reference platform's default accent colour
_FONTS = {"serif": "Georgia, 'Times New Roman', Times, serif",
          "sans_serif": "-apple-system, BlinkMacSystemFont, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"}
_BACKGROUNDS = {"light": "#ffffff", "dark": "#15212a"}
WIDTH = 600
# The newsletter's columns the template reads (schema/0083_newsletter_design.sql).
DESIGN_COLUMNS = ("header_image", "show_header_icon", "show_header_title", "show_header_name", "title_font_category",
                  "title_alignment", "show_post_title_section", "show_feature_image", "body_font_category",
                  "show_byline", "show_excerpt", "footer_content", "show_badge", "background_color", "border_color",
                  "title_color", "link_color", "button_color")

# Remote stylesheets are never fetched: the document is ours, and a fetch per segment would be a leak.
_INLINER = css_inline.CSSInliner(keep_at_rules=True, load_remote_stylesheets=False, apply_width_attributes=True)


@dataclass(frozen=True)
class EmailTemplate:
    """What the template shows besides the body; a field left empty is not shown."""

    site_title: str
    post_title: str
    site_url: str = ""
    post_url: str = ""  # the post's public page: "view in browser"; "" when it has none
    excerpt: str | None = None
    byline: str | None = None
    feature_image: str | None = None
    feature_image_alt: str | None = None
    feature_image_caption: str | None = None  # HTML, sanitised where the post entered
    newsletter_name: str = ""
    design: Mapping[str, Any] = field(default_factory=dict)  # the newsletter's design columns


def _colour_on(background: str) -> str:
    """Text that reads on `background` (#rrggbb): dark on light, light on dark."""
    red, green, blue = (int(background[i:i + 2], 16) for i in (1, 3, 5))
    return "#15212a" if 0.299 * red + 0.587 * green + 0.114 * blue > 150 else "#ffffff"


def _chosen(value: str | None, *, auto: str, default: str | None) -> str | None:
    if value is None:
        return default
    return {"auto": auto, "accent": ACCENT}.get(value, value)


def _css(design: Mapping[str, Any]) -> str:
    background = _BACKGROUNDS.get(design.get("background_color") or "light", design.get("background_color") or "")
    text = _colour_on(background)
    title = _chosen(design.get("title_color"), auto=text, default=text)
    link = _chosen(design.get("link_color"), auto=text, default=ACCENT)
    button = _chosen(design.get("button_color"), auto=text, default=ACCENT)
    border = _chosen(design.get("border_color"), auto=text, default=None)
    title_font = _FONTS.get(design.get("title_font_category") or "sans_serif", _FONTS["sans_serif"])
    body_font = _FONTS.get(design.get("body_font_category") or "sans_serif", _FONTS["sans_serif"])
    align = "left" if design.get("title_alignment") == "left" else "center"
    muted = "#738a94"
    return f"""
body {{ margin: 0; padding: 0; background-color: {background}; color: {text}; -webkit-text-size-adjust: 100%; }}
table {{ border-collapse: collapse; }}
.wrapper {{ width: 100%; background-color: {background}; }}
.container {{ width: 100%; max-width: {WIDTH}px; background-color: {background};
  {f"border: 1px solid {border};" if border else ""} }}
.content {{ padding: 24px 20px; font-family: {body_font}; font-size: 18px; line-height: 1.6; color: {text};
  overflow-wrap: break-word; word-wrap: break-word; word-break: break-word; }}
.header {{ padding: 24px 20px 8px; text-align: {align}; font-family: {title_font}; color: {text}; }}
.header-image {{ display: block; width: 100%; max-width: {WIDTH}px; height: auto; border: 0; }}
.site-title {{ margin: 8px 0 0; font-size: 16px; font-weight: 700; text-transform: uppercase; letter-spacing: 1px; }}
.newsletter-name {{ margin: 4px 0 0; font-size: 13px; color: {muted}; text-transform: uppercase; }}
.post-title {{ margin: 16px 0 8px; font-family: {title_font}; font-size: 36px; line-height: 1.15; font-weight: 700;
  text-align: {align}; color: {title}; }}
.post-title a {{ color: {title}; text-decoration: none; }}
.excerpt {{ margin: 0 0 8px; font-family: {body_font}; font-size: 19px; text-align: {align}; color: {muted}; }}
.byline {{ margin: 0 0 16px; font-family: {body_font}; font-size: 13px; text-align: {align}; color: {muted}; }}
.view-online {{ font-family: {body_font}; font-size: 12px; text-align: right; color: {muted}; padding: 12px 20px 0; }}
.view-online a {{ color: {muted}; }}
.feature-image {{ display: block; width: 100%; max-width: {WIDTH}px; height: auto; border: 0; }}
.caption {{ padding: 8px 20px 0; font-family: {body_font}; font-size: 13px; text-align: center; color: {muted}; }}
.content img {{ max-width: 100%; height: auto; border: 0; }}
.content a {{ color: {link}; }}
.content pre {{ white-space: pre-wrap; word-break: break-all; font-size: 14px; }}
.content table {{ max-width: 100%; }}
.content iframe, .content video {{ max-width: 100%; }}
.content blockquote {{ margin: 0 0 1em; padding-left: 16px; border-left: 3px solid {link}; }}
.button {{ color: #ffffff; background-color: {button}; }}
.email-footer {{ padding: 24px 20px; font-family: {body_font}; font-size: 13px; line-height: 1.5; text-align: center;
  color: {muted}; }}
.email-footer a {{ color: {muted}; text-decoration: underline; }}
.badge {{ padding: 0 20px 24px; font-family: {body_font}; font-size: 12px; text-align: center; color: {muted}; }}
.badge a {{ color: {muted}; }}
@media only screen and (max-width: 620px) {{
  .post-title {{ font-size: 28px !important; }}
  .content {{ font-size: 17px !important; padding: 20px 16px !important; }}
}}
@media (prefers-color-scheme: dark) {{
  .wrapper, .container, body {{ background-color: #15212a !important; }}
  .content, .header, .post-title, .post-title a {{ color: #ffffff !important; }}
}}
"""


def _e(text: str) -> str:
    return html_lib.escape(text, quote=True)


def _row(inner: str, cls: str = "") -> str:
    return f'<tr><td class="{cls}">{inner}</td></tr>' if cls else f"<tr><td>{inner}</td></tr>"


def _web_url(url: str | None) -> str | None:
    """An image's or a page's address when it is an absolute http(s) one; anything else is not shown."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    return url if parts.scheme in ("http", "https") and parts.hostname else None


def wrap(template: EmailTemplate, body: str, footer: str, link: Callable[[str], str] = lambda url: url) -> str:
    """The whole email: `body` (one segment's) and `footer` (its unsubscribe and manage links) in the
    newsletter's design, with every style inlined. `link` rewrites the template's own links as the
    body's were (click tracking), so "view in browser" counts as a click like any other."""
    design = template.design
    rows = []
    post_url = _web_url(template.post_url)
    if post_url:
        rows.append(_row(f'<a href="{_e(link(post_url))}">View in browser</a>', "view-online"))
    header = []
    header_image = _web_url(design.get("header_image"))
    if header_image:
        header.append(f'<img class="header-image" src="{_e(header_image)}" width="{WIDTH}" alt="">')
    if design.get("show_header_title", True) and template.site_title:
        header.append(f'<p class="site-title">{_e(template.site_title)}</p>')
    if design.get("show_header_name", True) and template.newsletter_name \
            and template.newsletter_name != template.site_title:
        header.append(f'<p class="newsletter-name">{_e(template.newsletter_name)}</p>')
    if design.get("show_post_title_section", True):
        title = _e(template.post_title)
        if post_url:
            title = f'<a href="{_e(link(post_url))}">{title}</a>'
        header.append(f'<h1 class="post-title">{title}</h1>')
        if design.get("show_excerpt", False) and template.excerpt:
            header.append(f'<p class="excerpt">{_e(template.excerpt)}</p>')
        if design.get("show_byline", True) and template.byline:
            header.append(f'<p class="byline">By {_e(template.byline)}</p>')
    if header:
        rows.append(_row("".join(header), "header"))
    feature = _web_url(template.feature_image)
    if design.get("show_feature_image", True) and feature:
        rows.append(_row(f'<img class="feature-image" src="{_e(feature)}" width="{WIDTH}" '
                         f'alt="{_e(template.feature_image_alt or "")}">'))
        if template.feature_image_caption:
            # The caption comes with the post (lexical's columns): cleaned here too, it is HTML.
            rows.append(_row(nh3.clean(template.feature_image_caption, tags={"a", "em", "strong", "b", "i", "span"}),
                             "caption"))
    rows.append(_row(body, "content"))
    footer_parts = [f"<p>{_e(template.site_title)}</p>" if template.site_title else ""]
    if design.get("footer_content"):
        footer_parts.append(str(design["footer_content"]))  # sanitised where it entered (operations/authoring.py)
    footer_parts.append(footer)
    rows.append(_row("".join(footer_parts), "email-footer"))
    if design.get("show_badge", True):
        rows.append(_row("Powered by Pressroom", "badge"))
    document = (
        '<!doctype html><html><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="color-scheme" content="light dark"><meta name="supported-color-schemes" content="light dark">'
        f"<title>{_e(template.post_title)}</title><style>{_css(design)}</style></head><body>"
        + (f'<div style="display:none;max-height:0;overflow:hidden">{_e(template.excerpt)}</div>'
           if template.excerpt else "")
        + '<table class="wrapper" role="presentation" width="100%" cellpadding="0" cellspacing="0" border="0">'
        '<tr><td align="center">'
        f'<table class="container" role="presentation" width="{WIDTH}" cellpadding="0" cellspacing="0" border="0">'
        + "".join(rows) + "</table></td></tr></table></body></html>")
    return _INLINER.inline(document)


def plain_parts(template: EmailTemplate, body: str, footer: str,
                link: Callable[[str], str] = lambda url: url) -> str:
    """The same content as `wrap` without its layout, for the plain-text part: the body first (the
    subject already names the post, and a text reader's preview shows the opening words), then what
    the template's header and footer say, each link written out and rewritten by `link` as in `wrap`."""
    parts = [body, "<hr>"]
    design = template.design
    if design.get("show_byline", True) and template.byline:
        parts.append(f"<p>By {_e(template.byline)}</p>")
    post_url = _web_url(template.post_url)
    if post_url:
        parts.append(f'<p><a href="{_e(link(post_url))}">View in browser</a></p>')
    if template.site_title:
        parts.append(f"<p>{_e(template.site_title)}</p>")
    if design.get("footer_content"):
        parts.append(str(design["footer_content"]))
    parts.append(footer)
    return "".join(parts)
