"""The reference editor's Lexical documents rendered to HTML: its email rendering of each card
(a video is a linked thumbnail, a toggle is opened, a bookmark is a table) and its web rendering.

The document is hostile: every text is escaped here and every attribute quoted; the result still
goes through the post sanitiser (operations/authoring.py) as any post HTML does. A node or card
this module does not know is refused by name (LexicalError), never dropped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from html import escape
from typing import Any, Literal

from markdown_it import MarkdownIt

from pressroom.errors import BadInput

Target = Literal["email", "web"]
MAX_DEPTH = 64  # Lexical nests lists in lists; deeper than this is no editor's document


class LexicalError(BadInput):
    """The document is not Lexical, or holds a node or card Pressroom cannot render."""


# The text format bits Lexical keeps on each text node, outermost first.
_FORMATS = ((1, "strong"), (2, "em"), (4, "s"), (8, "u"), (16, "code"), (32, "sub"), (64, "sup"), (128, "mark"))


def _attr(value: Any) -> str:
    return escape(str(value or ""), quote=True)


def _text(value: Any) -> str:
    return escape(str(value or ""), quote=False)


def _url(value: Any) -> str:
    """A link or image address as an attribute; anything but http(s)/mailto/relative is left empty
    (the sanitiser would drop it anyway; empty keeps the reader's text)."""
    text = str(value or "").strip()
    lowered = text.lower()
    if lowered.startswith(("http://", "https://", "mailto:", "/", "#")) or (text and ":" not in text.split("/")[0]):
        return _attr(text)
    return ""


def _size(value: Any) -> str:
    return str(int(value)) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else ""


def _img(src: Any, alt: Any = "", width: Any = None, height: Any = None, target: Target = "email") -> str:
    w, h = _size(width), _size(height)
    if target == "email" and w and int(w) > 600:  # the email column is 600 px wide
        h = str(round(int(h) * 600 / int(w))) if h else ""
        w = "600"
    sizes = (f' width="{w}"' if w else "") + (f' height="{h}"' if h else "")
    return f'<img src="{_url(src)}" alt="{_attr(alt)}"{sizes}>'


def _caption(caption: Any) -> str:
    # Captions are the editor's HTML (links, bold); the sanitiser checks them with the rest.
    return f"<figcaption>{caption}</figcaption>" if caption else ""


class _Renderer:
    def __init__(self, target: Target, post_url: str) -> None:
        self.target = target
        self.post_url = post_url
        self.cards: dict[str, Callable[[dict], str]] = {
            "image": self.image, "gallery": self.gallery, "button": self.button, "callout": self.callout,
            "toggle": self.toggle, "bookmark": self.bookmark, "embed": self.embed, "video": self.video,
            "audio": self.audio, "file": self.file, "product": self.product, "horizontalrule": self.divider,
            "html": self.html, "markdown": self.markdown, "email": self.email, "email-cta": self.email_cta,
            "header": self.header, "paywall": self.paywall, "codeblock": self.codeblock,
            "aside": self.aside, "signup": self.signup,
        }

    # --- core nodes --------------------------------------------------------------------------

    def children(self, node: dict, depth: int) -> str:
        kids = node.get("children") or []
        if not isinstance(kids, list):
            raise LexicalError(f"a {node.get('type')} node's children must be a list")
        return "".join(self.node(kid, depth + 1) for kid in kids)

    def card(self, node: dict) -> str:
        """One card on its own (a mobiledoc card's payload as its Lexical node); an unknown one refused."""
        kind = node.get("type")
        if kind not in self.cards:
            raise LexicalError(f"the card {str(kind)[:40]!r} is not one Pressroom can render")
        return self.cards[kind](node)

    def node(self, node: Any, depth: int = 0) -> str:
        if depth > MAX_DEPTH:
            raise LexicalError(f"the document nests deeper than {MAX_DEPTH} levels")
        if not isinstance(node, dict) or not isinstance(node.get("type"), str):
            raise LexicalError("every Lexical node must be an object with a type")
        kind = node["type"]

        def inner() -> str:
            return self.children(node, depth)

        if kind in ("paragraph", "extended-text"):
            return f"<p>{inner()}</p>"
        if kind in ("heading", "extended-heading"):
            tag = node.get("tag") if node.get("tag") in ("h1", "h2", "h3", "h4", "h5", "h6") else "h2"
            return f"<{tag}>{inner()}</{tag}>"
        if kind in ("quote", "extended-quote"):
            return f"<blockquote>{inner()}</blockquote>"
        if kind == "list":
            tag = "ol" if node.get("listType") == "number" else "ul"
            start = node.get("start")
            first = f' start="{start}"' if tag == "ol" and isinstance(start, int) and start != 1 else ""
            return f"<{tag}{first}>{inner()}</{tag}>"
        if kind == "listitem":
            return f"<li>{inner()}</li>"
        if kind in ("link", "autolink"):
            return f'<a href="{_url(node.get("url"))}">{inner()}</a>'
        if kind in ("text", "extended-text-node", "tab"):
            return self.text(node)
        if kind == "linebreak":
            return "<br>"
        if kind in self.cards:
            return self.cards[kind](node)
        raise LexicalError(f"the Lexical node or card {kind[:40]!r} is not one Pressroom can render")

    def text(self, node: dict) -> str:
        if node.get("type") == "tab":
            return "\t"
        html = _text(node.get("text"))
        bits: int = node["format"] if isinstance(node.get("format"), int) else 0
        for bit, tag in reversed(_FORMATS):
            if bits & bit:
                html = f"<{tag}>{html}</{tag}>"
        return html

    # --- cards ---------------------------------------------------------------------------------

    def image(self, n: dict) -> str:
        img = _img(n.get("src"), n.get("alt"), n.get("width"), n.get("height"), self.target)
        if n.get("href"):
            img = f'<a href="{_url(n.get("href"))}">{img}</a>'
        return f'<figure class="kg-card kg-image-card">{img}{_caption(n.get("caption"))}</figure>'

    def gallery(self, n: dict) -> str:
        images = [i for i in (n.get("images") or []) if isinstance(i, dict) and i.get("src")]
        rows: dict[int, list[dict]] = {}
        for position, image in enumerate(images):
            row: int = image["row"] if isinstance(image.get("row"), int) else position // 3
            rows.setdefault(row, []).append(image)
        body = "".join(
            '<div class="kg-gallery-row">' + "".join(
                f'<div class="kg-gallery-image">{_img(i.get("src"), i.get("alt"), i.get("width"), i.get("height"), self.target)}</div>'  # noqa: E501
                for i in row) + "</div>" for _, row in sorted(rows.items()))
        return (f'<figure class="kg-card kg-gallery-card"><div class="kg-gallery-container">{body}</div>'
                f'{_caption(n.get("caption"))}</figure>')

    def button(self, n: dict) -> str:
        align = "center" if n.get("alignment") == "center" else "left"
        if self.target == "email":
            return (f'<div class="btn btn-accent"><table border="0" cellspacing="0" cellpadding="0" align="{align}">'
                    f'<tr><td align="center"><a href="{_url(n.get("buttonUrl"))}">{_text(n.get("buttonText"))}</a>'
                    "</td></tr></table></div>")
        return (f'<div class="kg-card kg-button-card kg-align-{align}"><a href="{_url(n.get("buttonUrl"))}" '
                f'class="kg-btn kg-btn-accent">{_text(n.get("buttonText"))}</a></div>')

    def callout(self, n: dict) -> str:
        emoji = f'<div class="kg-callout-emoji">{_text(n.get("calloutEmoji"))}</div>' if n.get("calloutEmoji") else ""
        return f'<div class="kg-card kg-callout-card">{emoji}<div class="kg-callout-text">{n.get("calloutText") or ""}</div></div>'  # noqa: E501

    def toggle(self, n: dict) -> str:
        # In an email there is nothing to click: the toggle is shown opened.
        return (f'<div class="kg-card kg-toggle-card"><h4 class="kg-toggle-heading-text">{n.get("heading") or ""}</h4>'
                f'<div class="kg-toggle-content">{n.get("content") or ""}</div></div>')

    def bookmark(self, n: dict) -> str:
        meta: dict = n["metadata"] if isinstance(n.get("metadata"), dict) else {}
        url = _url(n.get("url"))
        title, description = _text(meta.get("title")), _text(meta.get("description"))
        byline = " · ".join(_text(meta.get(k)) for k in ("publisher", "author") if meta.get(k))
        if meta.get("icon") and self.target == "email":
            byline = _img(meta.get("icon"), "", 20, 20) + byline
        thumbnail = meta.get("thumbnail")
        if self.target == "email":
            thumb = (f'<td class="kg-bookmark-thumbnail" width="140"><a href="{url}">{_img(thumbnail, "", 140)}'
                     '</a></td>' if thumbnail else "")
            return (f'<figure class="kg-card kg-bookmark-card"><table class="kg-bookmark-container" cellpadding="0" '
                    f'cellspacing="0" border="0" width="100%"><tr><td class="kg-bookmark-content">'
                    f'<a href="{url}"><div class="kg-bookmark-title">{title}</div></a>'
                    f'<div class="kg-bookmark-description">{description}</div>'
                    f'<div class="kg-bookmark-metadata">{byline}</div></td>{thumb}</tr></table>'
                    f'{_caption(n.get("caption"))}</figure>')
        thumb = f'<div class="kg-bookmark-thumbnail">{_img(thumbnail, "", target="web")}</div>' if thumbnail else ""
        return (f'<figure class="kg-card kg-bookmark-card"><a class="kg-bookmark-container" href="{url}">'
                f'<div class="kg-bookmark-content"><div class="kg-bookmark-title">{title}</div>'
                f'<div class="kg-bookmark-description">{description}</div>'
                f'<div class="kg-bookmark-metadata">{byline}</div></div>{thumb}</a>'
                f'{_caption(n.get("caption"))}</figure>')

    def embed(self, n: dict) -> str:
        meta: dict = n["metadata"] if isinstance(n.get("metadata"), dict) else {}
        if self.target == "email" and n.get("embedType") == "video" and meta.get("thumbnail_url"):
            # Mail clients play no embedded player: a thumbnail linking to the video.
            inner = f'<a href="{_url(n.get("url"))}">{_img(meta.get("thumbnail_url"), meta.get("title"), 600)}</a>'
        elif self.target == "email" and n.get("embedType") != "video" and not n.get("html"):
            inner = f'<a href="{_url(n.get("url"))}">{_text(meta.get("title") or n.get("url"))}</a>'
        else:
            inner = str(n.get("html") or "")
        return f'<figure class="kg-card kg-embed-card">{inner}{_caption(n.get("caption"))}</figure>'

    def video(self, n: dict) -> str:
        thumbnail = n.get("customThumbnailSrc") or n.get("thumbnailSrc")
        if self.target == "email":
            link = self.playable(n)
            picture = _img(thumbnail, "", n.get("width"), n.get("height")) if thumbnail else "Watch the video"
            return (f'<figure class="kg-card kg-video-card"><a class="kg-video-preview" href="{link}">{picture}</a>'
                    f'{_caption(n.get("caption"))}</figure>')
        poster = f' poster="{_url(thumbnail)}"' if thumbnail else ""
        return (f'<figure class="kg-card kg-video-card"><video src="{_url(n.get("src"))}"{poster} controls></video>'
                f'{_caption(n.get("caption"))}</figure>')

    def playable(self, n: dict) -> str:
        """Where an email's audio, video or file card links: nothing plays in a mail client, so the
        post's page (as the reference does), else the file itself."""
        return _url(self.post_url or n.get("src")) if self.target == "email" else _url(n.get("src"))

    def audio(self, n: dict) -> str:
        link = self.playable(n)
        seconds = int(n["duration"]) if isinstance(n.get("duration"), (int, float)) else 0
        length = f" • {seconds // 60}:{seconds % 60:02d}" if seconds else ""
        return (f'<div class="kg-card kg-audio-card"><a href="{link}">'
                f'{_text(n.get("title") or "Listen to the audio")}</a>'
                f'<div class="kg-audio-duration">Click to play audio{length}</div></div>')

    def file(self, n: dict) -> str:
        title = n.get("fileTitle") or n.get("fileName") or "Download the file"
        caption = (f'<div class="kg-file-card-caption">{_text(n.get("fileCaption"))}</div>'
                   if n.get("fileCaption") else "")
        size = n["fileSize"] if isinstance(n.get("fileSize"), int) else 0
        shown = f" • {round(size / 1024)} KB" if size else ""
        details = f'<div class="kg-file-card-metadata">{_text(n.get("fileName"))}{shown}</div>'
        return (f'<div class="kg-card kg-file-card"><a href="{self.playable(n)}">{_text(title)}</a>'
                f'{caption}{details}</div>')

    def product(self, n: dict) -> str:
        image = (f'<div class="kg-product-card-image">{_img(n.get("productImageSrc"), "", n.get("productImageWidth"), n.get("productImageHeight"), self.target)}</div>'  # noqa: E501
                 if n.get("productImageSrc") else "")
        button = (f'<a href="{_url(n.get("productUrl"))}" class="kg-product-card-button">'
                  f'{_text(n.get("productButton"))}</a>' if n.get("productButtonEnabled") and n.get("productUrl")
                  else "")
        return (f'<div class="kg-card kg-product-card">{image}<h4 class="kg-product-card-title">'
                f'{n.get("productTitle") or ""}</h4><div class="kg-product-card-description">'
                f'{n.get("productDescription") or ""}</div>{button}</div>')

    def divider(self, n: dict) -> str:
        return "<hr>"

    def html(self, n: dict) -> str:
        return str(n.get("html") or "")

    def markdown(self, n: dict) -> str:
        return MarkdownIt("commonmark", {"html": False}).enable("table").enable("strikethrough").render(
            str(n.get("markdown") or ""))

    def email(self, n: dict) -> str:
        return str(n.get("html") or "") if self.target == "email" else ""

    def email_cta(self, n: dict) -> str:
        if self.target != "email":
            return ""
        segment = n.get("segment")
        button = ('<div class="btn btn-accent"><table border="0" cellspacing="0" cellpadding="0"><tr>'
                  f'<td align="center">'
                  f'<a href="{_url(n.get("buttonUrl"))}">{_text(n.get("buttonText"))}</a></td></tr></table></div>'
                  if n.get("showButton") and n.get("buttonUrl") else "")
        rule = "<hr>" if n.get("showDividers") else ""
        # The segment travels as the attribute the email's segment rendering already reads.
        marker = f' data-gh-segment="{_attr(segment)}"' if segment in ("status:free", "status:-free") else ""
        return f'<div class="kg-card kg-cta-card"{marker}>{rule}{n.get("html") or ""}{button}{rule}</div>'

    def header(self, n: dict) -> str:
        background = n.get("backgroundImageSrc")
        image = (f'<div class="kg-header-card-image">{_img(background, "", target=self.target)}</div>'
                 if background else "")
        button = (f'<a href="{_url(n.get("buttonUrl"))}" class="kg-header-card-button">{_text(n.get("buttonText"))}</a>'
                  if n.get("buttonEnabled") and n.get("buttonUrl") else "")
        heading = n.get("header") or n.get("heading") or ""
        sub = n.get("subheader") or n.get("subheading") or ""
        return (f'<div class="kg-card kg-header-card">{image}<h2 class="kg-header-card-header">{heading}</h2>'
                f'<h3 class="kg-header-card-subheader">{sub}</h3>{button}</div>')

    def paywall(self, n: dict) -> str:
        return "<!--members-only-->"

    def codeblock(self, n: dict) -> str:
        return f'<pre><code>{_text(n.get("code"))}</code></pre>{_caption(n.get("caption"))}'

    def aside(self, n: dict) -> str:
        return f"<blockquote>{self.children(n, 1)}</blockquote>"

    def signup(self, n: dict) -> str:
        # A sign-up form is for the site's visitors; the reference leaves it out of emails.
        if self.target == "email":
            return ""
        return (f'<div class="kg-card kg-signup-card"><h2>{n.get("header") or ""}</h2>'
                f'<p>{n.get("subheader") or ""}</p></div>')


def card_renderer(target: Target, post_url: str = "") -> _Renderer:
    """The card renderers alone, for documents whose cards are Lexical's under another format (mobiledoc)."""
    return _Renderer(target, post_url)


def document(source: str | dict) -> dict:
    """The Lexical document (as sent: text or an object), its shape checked."""
    try:
        value = json.loads(source) if isinstance(source, str) else source
    except json.JSONDecodeError as error:
        raise LexicalError(f"lexical is not JSON: {error.msg} at character {error.pos}") from None
    except (ValueError, RecursionError):
        raise LexicalError("lexical is not JSON") from None
    root = value.get("root") if isinstance(value, dict) else None
    if not isinstance(root, dict) or not isinstance(root.get("children"), list):
        raise LexicalError('lexical must be a document {"root": {"children": [...]}}')
    return value


def render(source: str | dict, target: Target = "email", post_url: str = "") -> str:
    """The document as HTML for `target` (not yet sanitised: the post path sanitises it)."""
    root = document(source)["root"]
    renderer = _Renderer(target, post_url)
    return "".join(renderer.node(child, 1) for child in root["children"])
