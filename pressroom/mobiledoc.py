"""The reference editor's older documents, mobiledoc 0.3, rendered to HTML for email and for the web.

Its sections (paragraphs, headings, quotes, lists, images) and inline markups are rendered here; its
cards carry the same payloads as Lexical's cards of the same meaning, so each goes through the
Lexical card renderer (pressroom/lexical.py): one email rendering per card, whichever editor wrote
it. The document is hostile: text escaped, attributes quoted, the result sanitised by the post path
as any post HTML; a section, markup, atom or card Pressroom does not know is refused by name.
"""

from __future__ import annotations

import json
from typing import Any

from pressroom.lexical import LexicalError, Target, _text, _url, card_renderer

_SECTION_TAGS = {"p": "p", "h1": "h1", "h2": "h2", "h3": "h3", "h4": "h4", "h5": "h5", "h6": "h6",
                 "blockquote": "blockquote", "pull-quote": "blockquote", "aside": "blockquote"}
_MARKUP_TAGS = frozenset({"a", "b", "strong", "i", "em", "u", "s", "del", "sub", "sup", "code", "mark"})
# Mobiledoc's card names where Lexical's differ; an embed's kind is its payload's `type` there.
_CARD_NAMES = {"hr": "horizontalrule", "code": "codeblock"}
_CARDS = frozenset({"image", "gallery", "button", "callout", "toggle", "bookmark", "embed", "video", "audio", "file",
                    "product", "hr", "html", "markdown", "email", "email-cta", "header", "paywall", "code"})


class MobiledocError(LexicalError):
    """The document is not mobiledoc 0.3, or holds a section, markup, atom or card Pressroom cannot render."""


def document(source: str | dict) -> dict:
    """The mobiledoc (as sent: text or an object), its shape checked."""
    try:
        value = json.loads(source) if isinstance(source, str) else source
    except json.JSONDecodeError as error:
        raise MobiledocError(f"mobiledoc is not JSON: {error.msg} at character {error.pos}") from None
    except (ValueError, RecursionError):
        raise MobiledocError("mobiledoc is not JSON") from None
    if not isinstance(value, dict) or not str(value.get("version", "")).startswith("0.3"):
        raise MobiledocError('mobiledoc must be a version 0.3 document {"version": "0.3.1", "sections": [...]}')
    for part in ("atoms", "cards", "markups", "sections"):
        if not isinstance(value.get(part, []), list):
            raise MobiledocError(f"mobiledoc {part} must be a list")
    return value


class _Renderer:
    def __init__(self, doc: dict, target: Target, post_url: str) -> None:
        self.markups: list = doc.get("markups", [])
        self.atoms: list = doc.get("atoms", [])
        self.cards_of: list = doc.get("cards", [])
        self.cards = card_renderer(target, post_url)

    def section(self, section: Any) -> str:
        if not isinstance(section, list) or not section or not isinstance(section[0], int):
            raise MobiledocError("every mobiledoc section must be a list starting with its type")
        kind = section[0]
        if kind == 1 and len(section) >= 3:
            tag = _SECTION_TAGS.get(str(section[1]).lower())
            if tag is None:
                raise MobiledocError(f"the mobiledoc section {str(section[1])[:20]!r} is not one Pressroom can render")
            alt = ' class="kg-blockquote-alt"' if str(section[1]).lower() == "aside" else ""
            return f"<{tag}{alt}>{self.markers(section[2])}</{tag}>"
        if kind == 3 and len(section) >= 3 and str(section[1]).lower() in ("ul", "ol") \
                and isinstance(section[2], list):
            tag = str(section[1]).lower()
            return f"<{tag}>" + "".join(f"<li>{self.markers(item)}</li>" for item in section[2]) + f"</{tag}>"
        if kind == 2 and len(section) >= 2:
            return f'<img src="{_url(section[1])}" alt="">'
        if kind == 10 and len(section) >= 2:
            return self.card(section[1])
        raise MobiledocError(f"the mobiledoc section type {kind} is not one Pressroom can render")

    def markers(self, markers: Any) -> str:
        """The inline content: each marker opens markups, shows its text or atom, then closes some."""
        if not isinstance(markers, list):
            raise MobiledocError("a mobiledoc section's markers must be a list")
        out, open_tags = [], []
        for marker in markers:
            if not (isinstance(marker, list) and len(marker) == 4 and marker[0] in (0, 1)
                    and isinstance(marker[1], list) and isinstance(marker[2], int)):
                raise MobiledocError("every mobiledoc marker must be [type, opened markups, closed count, value]")
            for index in marker[1]:
                tag, html = self.markup(index)
                out.append(html)
                open_tags.append(tag)
            out.append(_text(marker[3]) if marker[0] == 0 else self.atom(marker[3]))
            if marker[2] > len(open_tags) or marker[2] < 0:
                raise MobiledocError("a mobiledoc marker closes more markups than are open")
            for _ in range(marker[2]):
                out.append(f"</{open_tags.pop()}>")
        out.extend(f"</{tag}>" for tag in reversed(open_tags))
        return "".join(out)

    def markup(self, index: Any) -> tuple[str, str]:
        markup = self.markups[index] if isinstance(index, int) and 0 <= index < len(self.markups) else None
        if not isinstance(markup, list) or not markup:
            raise MobiledocError(f"a mobiledoc marker names markup {str(index)[:10]}, which the document does not have")
        tag = str(markup[0]).lower()
        if tag not in _MARKUP_TAGS:
            raise MobiledocError(f"the mobiledoc markup {tag[:20]!r} is not one Pressroom can render")
        if tag != "a":
            return tag, f"<{tag}>"
        pairs = markup[1] if len(markup) > 1 and isinstance(markup[1], list) else []
        attributes = dict(zip(pairs[::2], pairs[1::2], strict=False))
        return tag, f'<a href="{_url(attributes.get("href"))}">'

    def atom(self, index: Any) -> str:
        atom = self.atoms[index] if isinstance(index, int) and 0 <= index < len(self.atoms) else None
        if not isinstance(atom, list) or not atom:
            raise MobiledocError(f"a mobiledoc marker names atom {str(index)[:10]}, which the document does not have")
        if atom[0] == "soft-return":
            return "<br>"
        raise MobiledocError(f"the mobiledoc atom {str(atom[0])[:40]!r} is not one Pressroom can render")

    def card(self, index: Any) -> str:
        card = self.cards_of[index] if isinstance(index, int) and 0 <= index < len(self.cards_of) else None
        if not isinstance(card, list) or not card or not isinstance(card[0], str):
            raise MobiledocError(f"a mobiledoc section names card {str(index)[:10]}, which the document does not have")
        name = card[0]
        if name not in _CARDS:
            raise MobiledocError(f"the mobiledoc card {name[:40]!r} is not one Pressroom can render")
        payload = card[1] if len(card) > 1 and isinstance(card[1], dict) else {}
        node = {**payload, "type": _CARD_NAMES.get(name, name)}
        if name == "embed":
            node["embedType"] = payload.get("type")
        return self.cards.card(node)


def render(source: str | dict, target: Target = "email", post_url: str = "") -> str:
    """The document as HTML for `target` (not yet sanitised: the post path sanitises it)."""
    doc = document(source)
    sections = doc.get("sections", [])
    renderer = _Renderer(doc, target, post_url)
    # The editor keeps a blank paragraph at the end of a document; the reference does not render it.
    if sections and sections[-1] in ([1, "p", []], [1, "P", []]):
        sections = sections[:-1]
    return "".join(renderer.section(section) for section in sections)

