"""Mobiledoc documents rendered to a post's email and web HTML (pure: the renderer and the post
sanitiser): sections and markups as their HTML, each card through Lexical's card renderer, and what
Pressroom cannot render refused by name."""

from __future__ import annotations

import json

import pytest
from selectolax.lexbor import LexborHTMLParser as HTMLParser

from operations.authoring import post_lexical, post_mobiledoc
from pressroom.mobiledoc import MobiledocError, render
from tests.authoring import lexical_documents
from tests.authoring.mobiledoc_documents import CARDS, core, document


def test_sections_markups_and_atoms_render_as_their_html():
    html = post_mobiledoc(core())["email_html"]
    for piece in ("<h2>A heading</h2>", "<strong>bold</strong>", "<em>italic</em>", "<code>code</code>", "<br>",
                  "<blockquote>A quoted line</blockquote>", "<ul><li>first</li><li>second</li></ul>",
                  "<ol><li>one</li></ol>", '<blockquote class="kg-blockquote-alt">An aside</blockquote>'):
        assert piece in html, piece
    assert 'href="https://example.com/read"' in html


@pytest.mark.parametrize("card", sorted(set(CARDS) & set(lexical_documents.CARDS)))
def test_each_card_renders_as_the_same_lexical_card(card):
    ours = post_mobiledoc(document(CARDS[card]))
    lexical = post_lexical(lexical_documents.document(lexical_documents.CARDS[card]))
    assert ours["email_html"] == lexical["email_html"] and ours["html"] == lexical["html"]


def test_what_pressroom_cannot_render_is_refused_by_name():
    for doc, words in [
        (document(["transistor", {}]), "the mobiledoc card 'transistor'"),
        (document(sections=[[1, "marquee", []]]), "the mobiledoc section 'marquee'"),
        (document(sections=[[7, "p"]]), "section type 7"),
        (document(sections=[[1, "p", [[0, [0], 1, "x"]]]], markups=[["blink"]]), "markup 'blink'"),
        (document(sections=[[1, "p", [[0, [4], 1, "x"]]]], markups=[]), "names markup 4"),
        (document(sections=[[1, "p", [[1, [], 0, 0]]]], atoms=[["mention", "@x", {}]]), "atom 'mention'"),
        (document(sections=[[1, "p", [[0, [], 3, "x"]]]]), "closes more markups"),
        (json.dumps({"version": "0.2.0", "sections": []}), "version 0.3"),
        ("{nope", "not JSON"),
    ]:
        with pytest.raises(MobiledocError, match=words):
            render(doc)


def test_hostile_documents_are_escaped_and_sanitised():
    columns = post_mobiledoc(document(
        ["html", {"html": '<p onclick="x()">hi</p><script>alert(2)</script>'}],
        ["image", {"src": 'x" onerror="alert(3)', "alt": "\"><script>"}],
        sections=[[1, "p", [[0, [], 0, "<script>alert(1)</script>"], [0, [0], 1, "click"]]], [2, "javascript:x()"]],
        markups=[["a", ["href", "javascript:alert(1)"]]]))
    for html in (columns["html"], columns["email_html"]):
        tree = HTMLParser(html)
        assert not tree.css("script")
        assert not [k for n in tree.css("*") for k in n.attributes if k.startswith("on")]
        assert "javascript" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
