"""Differential: each card rendered for email by the reference's own renderer (npm's
@tryghost/kg-lexical-html-renderer with kg-default-nodes, target email) and by Pressroom's; what a
reader sees (links and images in order, the card's words) must agree, not the bytes."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from selectolax.lexbor import LexborHTMLParser

from operations.authoring import post_lexical
from tests.authoring.lexical_documents import CARDS, CORE, document
from tests.reference_js import node

POST_URL = "https://site.example.com/p/"
RENDER = """
const {LexicalHTMLRenderer} = require('@tryghost/kg-lexical-html-renderer');
const {DEFAULT_NODES} = require('@tryghost/kg-default-nodes');
let input = ''; process.stdin.on('data', (d) => { input += d; });
process.stdin.on('end', async () => {
    const renderer = new LexicalHTMLRenderer({nodes: DEFAULT_NODES});
    const out = [];
    for (const doc of JSON.parse(input)) {
        out.push(await renderer.render(doc, {target: 'email', postUrl: process.argv[1]}));
    }
    process.stdout.write(JSON.stringify(out));
});
"""
DOCUMENTS = {"core": document(*CORE), **{name: document(card) for name, card in CARDS.items()}}


def seen(html: str) -> dict:
    """Each link and each picture once, in order (the reference repeats a card's link on its parts and
    draws some pictures as backgrounds over a spacer image), and the words."""
    tree = LexborHTMLParser(html)
    body = tree.body
    words = set((body.text(separator=" ") if body else "").split())
    images = []
    for element in tree.css("*"):
        src = element.attributes.get("src") if element.tag == "img" else None
        background = re.search(r"background(?:-image)?:\s*url\(['\"]?([^'\")]+)", element.attributes.get("style") or "")
        for found in (src, background.group(1) if background else None):
            if found and "spacergif" not in found and "static.ghost.org" not in found:  # its own icons
                images.append(found)
    return {"links": list(dict.fromkeys(a.attributes.get("href") for a in tree.css("a"))),
            "images": list(dict.fromkeys(images)), "words": words}


@pytest.fixture(scope="module")
def reference() -> dict[str, str]:
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip("node and npm are needed to run the reference's renderer")
    rendered = json.loads(node(RENDER, json.dumps(list(DOCUMENTS.values())), POST_URL))
    return dict(zip(DOCUMENTS, rendered, strict=True))


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_a_reader_sees_what_the_reference_renders(reference, name):
    ours = seen(post_lexical(DOCUMENTS[name], POST_URL)["email_html"])
    theirs = seen(reference[name])
    assert ours["links"] == theirs["links"], (name, reference[name])
    assert ours["images"] == theirs["images"], (name, reference[name])
    assert theirs["words"] <= ours["words"] | {"·", "•"}, (theirs["words"] - ours["words"], reference[name])
