"""Lexical documents as the reference's editor saves them: every core node and every card, shared by
the renderer's tests and the differential test against the reference's own renderer."""

from __future__ import annotations

import json


def text(value: str, format: int = 0) -> dict:
    return {"type": "text", "text": value, "format": format, "detail": 0, "mode": "normal", "style": "", "version": 1}


def block(kind: str, *children: dict, **extra) -> dict:
    return {"type": kind, "children": list(children), "direction": "ltr", "format": "", "indent": 0, "version": 1,
            **extra}


def link(url: str, *children: dict) -> dict:
    return block("link", *children, url=url, rel=None, target=None, title=None)


CORE = [
    block("heading", text("A heading"), tag="h2"),
    block("paragraph", text("Plain, "), text("bold", 1), text(" and "), text("italic", 2), text(" and "),
          text("code", 16), {"type": "linebreak", "version": 1}, link("https://example.com/read", text("a link"))),
    block("quote", text("A quoted line")),
    block("list", block("listitem", text("first"), value=1), block("listitem", text("second"), value=2),
          listType="bullet", start=1, tag="ul"),
    block("list", block("listitem", text("one"), value=1), listType="number", start=1, tag="ol"),
    {"type": "horizontalrule", "version": 1},
]

CARDS = {
    "image": {"type": "image", "version": 1, "src": "https://cdn.example.com/photo.jpg", "width": 1200,
              "height": 800, "title": "", "alt": "A harbour", "caption": "The harbour at dawn", "cardWidth": "",
              "href": ""},
    "gallery": {"type": "gallery", "version": 1, "caption": "Three views", "images": [
        {"row": 0, "src": f"https://cdn.example.com/g{n}.jpg", "width": 800, "height": 600, "fileName": f"g{n}.jpg",
         "alt": f"View {n}", "caption": ""} for n in range(1, 4)]},
    "button": {"type": "button", "version": 1, "buttonText": "Read more", "alignment": "center",
               "buttonUrl": "https://example.com/more"},
    "callout": {"type": "callout", "version": 1, "calloutText": "<p>Heads up: doors open at nine.</p>",
                "calloutEmoji": "💡", "backgroundColor": "grey"},
    "toggle": {"type": "toggle", "version": 1, "heading": "<span>What is included?</span>",
               "content": "<p>Everything in the box.</p>"},
    "bookmark": {"type": "bookmark", "version": 1, "url": "https://example.org/article", "caption": "",
                 "metadata": {"icon": "https://example.org/icon.png", "title": "An article elsewhere",
                              "description": "What the article is about.", "author": "A. Writer",
                              "publisher": "Example Org", "thumbnail": "https://example.org/thumb.jpg"}},
    "embed": {"type": "embed", "version": 1, "url": "https://www.youtube.com/watch?v=abc", "embedType": "video",
              "html": '<iframe src="https://www.youtube.com/embed/abc"></iframe>', "caption": "",
              "metadata": {"title": "A talk", "thumbnail_url": "https://i.ytimg.com/vi/abc/hqdefault.jpg",
                           "thumbnail_width": 480, "thumbnail_height": 360}},
    "video": {"type": "video", "version": 1, "src": "https://cdn.example.com/clip.mp4", "caption": "A clip",
              "fileName": "clip.mp4", "mimeType": "video/mp4", "width": 640, "height": 360, "duration": 30,
              "thumbnailSrc": "https://cdn.example.com/clip.jpg", "customThumbnailSrc": "", "thumbnailWidth": 640,
              "thumbnailHeight": 360, "cardWidth": "regular", "loop": False},
    "audio": {"type": "audio", "version": 1, "src": "https://cdn.example.com/episode.mp3", "title": "Episode one",
              "duration": 60, "thumbnailSrc": ""},
    "file": {"type": "file", "version": 1, "src": "https://cdn.example.com/report.pdf", "fileTitle": "The report",
             "fileCaption": "Annual figures", "fileName": "report.pdf", "fileSize": 12345},
    "product": {"type": "product", "version": 1, "productImageSrc": "https://cdn.example.com/mug.jpg",
                "productImageWidth": 400, "productImageHeight": 400, "productTitle": "<span>A mug</span>",
                "productDescription": "<p>Holds coffee.</p>", "productRatingEnabled": False, "productStarRating": 5,
                "productButtonEnabled": True, "productButton": "Buy it", "productUrl": "https://shop.example.com/mug"},
    "horizontalrule": {"type": "horizontalrule", "version": 1},
    "html": {"type": "html", "version": 1, "html": "<p>Raw <strong>HTML</strong> card</p>"},
    "markdown": {"type": "markdown", "version": 1, "markdown": "Some *markdown* with [a link](https://example.com/md)"},
    "email": {"type": "email", "version": 1, "html": "<p>Only in the email</p>"},
    "email-cta": {"type": "email-cta", "version": 1, "html": "<p>Join the club</p>", "segment": "status:free",
                  "alignment": "left", "showButton": True, "showDividers": True, "buttonText": "Upgrade",
                  "buttonUrl": "https://example.com/upgrade"},
    "header": {"type": "header", "version": 1, "size": "small", "style": "dark", "buttonEnabled": True,
               "buttonUrl": "https://example.com/join", "buttonText": "Join", "header": "<span>Big news</span>",
               "subheader": "<span>Read all about it</span>", "backgroundImageSrc": ""},
}


def document(*children: dict) -> str:
    return json.dumps({"root": {"children": list(children), "direction": "ltr", "format": "", "indent": 0,
                                "type": "root", "version": 1}})


def every_card() -> str:
    return document(*CORE, *CARDS.values())
