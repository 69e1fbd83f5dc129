"""Lexical documents rendered to a post's email and web HTML (pure: the renderer and the post
sanitiser, no database): each core node and card reaches the reader, hostile input does not."""

from __future__ import annotations

import json

import pytest
from selectolax.lexbor import LexborHTMLParser as HTMLParser

from operations.authoring import post_lexical
from pressroom.lexical import LexicalError, render
from tests.authoring.lexical_documents import CARDS, CORE, block, document, every_card, link, text


def seen(html: str) -> tuple[str, list[str], list[str]]:
    tree = HTMLParser(html)
    words = " ".join((tree.body.text(separator=" ") if tree.body else "").split())
    return (words, [a.attributes.get("href") or "" for a in tree.css("a")],
            [i.attributes.get("src") or "" for i in tree.css("img")])


def test_core_nodes_render_as_their_html():
    html = post_lexical(document(*CORE))["email_html"]
    for piece in ("<h2>A heading</h2>", "<strong>bold</strong>", "<em>italic</em>", "<code>code</code>", "<br>",
                  "<blockquote>A quoted line</blockquote>", "<ul><li>first</li><li>second</li></ul>",
                  "<ol><li>one</li></ol>", "<hr>"):
        assert piece in html, piece
    assert 'href="https://example.com/read"' in html


@pytest.mark.parametrize("card", sorted(CARDS))
def test_each_card_reaches_the_email(card):
    email = post_lexical(document(CARDS[card]))["email_html"]
    words, links, images = seen(email)
    expected = {
        "image": lambda: images == ["https://cdn.example.com/photo.jpg"] and "The harbour at dawn" in words
        and 'width="600"' in email,
        "gallery": lambda: images == [f"https://cdn.example.com/g{n}.jpg" for n in range(1, 4)],
        "button": lambda: links == ["https://example.com/more"] and "Read more" in words,
        "callout": lambda: "doors open at nine" in words and "💡" in words,
        "toggle": lambda: "What is included?" in words and "Everything in the box." in words,
        "bookmark": lambda: "<table" in email and "https://example.org/article" in links
        and "An article elsewhere" in words and "Example Org" in words,
        "embed": lambda: links == ["https://www.youtube.com/watch?v=abc"]
        and images == ["https://i.ytimg.com/vi/abc/hqdefault.jpg"] and "iframe" not in email,
        "video": lambda: images == ["https://cdn.example.com/clip.jpg"] and len(links) == 1 and "video" not in
        email.replace("kg-video", ""),
        "audio": lambda: links == ["https://cdn.example.com/episode.mp3"] and "Episode one" in words,
        "file": lambda: links == ["https://cdn.example.com/report.pdf"] and "The report" in words,
        "product": lambda: links == ["https://shop.example.com/mug"] and "A mug" in words and "Buy it" in words,
        "horizontalrule": lambda: "<hr>" in email,
        "html": lambda: "<strong>HTML</strong>" in email,
        "markdown": lambda: "<em>markdown</em>" in email and links == ["https://example.com/md"],
        "email": lambda: "Only in the email" in words,
        "email-cta": lambda: "Join the club" in words and links == ["https://example.com/upgrade"]
        and 'data-gh-segment="status:free"' in email,
        "header": lambda: "Big news" in words and links == ["https://example.com/join"],
    }[card]
    assert expected(), email


def test_the_web_html_differs_where_the_reference_does():
    columns = post_lexical(every_card())
    assert "Only in the email" not in columns["html"] and "Join the club" not in columns["html"]
    assert "Only in the email" in columns["email_html"]
    assert json.loads(columns["lexical"]) == json.loads(every_card())  # kept as sent


def test_a_card_pressroom_cannot_render_is_refused_by_name():
    with pytest.raises(LexicalError, match="'transistor' is not one Pressroom can render"):
        post_lexical(document(CORE[0], {"type": "transistor", "version": 1}))
    with pytest.raises(LexicalError, match="not JSON"):
        render("{nope")
    with pytest.raises(LexicalError, match="must be a document"):
        render('{"root": {}}')
    deep: dict = block("paragraph", text("x"))
    for _ in range(100):
        deep = block("quote", deep)
    with pytest.raises(LexicalError, match="nests deeper"):
        render(document(deep))


def test_hostile_documents_are_escaped_and_sanitised():
    columns = post_lexical(document(
        block("paragraph", text("<script>alert(1)</script>"), link("javascript:alert(1)", text("click"))),
        {"type": "html", "version": 1, "html": '<p onclick="x()">hi</p><script>alert(2)</script>'},
        {"type": "image", "version": 1, "src": 'x" onerror="alert(3)', "alt": "\"><script>", "caption": ""},
    ))
    for html in (columns["html"], columns["email_html"]):
        tree = HTMLParser(html)
        assert not tree.css("script")
        assert not [k for n in tree.css("*") for k in n.attributes if k.startswith("on")]
        assert not [a for a in tree.css("a") if "javascript" in (a.attributes.get("href") or "")]
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # the reader's text kept, as text
