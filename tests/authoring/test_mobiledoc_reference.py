"""Differential: each mobiledoc card rendered for email by the reference's own renderer (npm's
@tryghost/kg-mobiledoc-html-renderer with kg-default-cards, target email) and by Pressroom's; what a
reader sees (links and images in order, the card's words) must agree, not the bytes."""

from __future__ import annotations

import json
import shutil

import pytest

from operations.authoring import post_mobiledoc
from tests.authoring.mobiledoc_documents import CARDS, core, document
from tests.authoring.test_lexical_reference import POST_URL, seen
from tests.reference_js import node

RENDER = """
const {MobiledocHtmlRenderer} = require('@tryghost/kg-mobiledoc-html-renderer');
const {cards} = require('@tryghost/kg-default-cards');
const softReturn = {name: 'soft-return', type: 'dom', render({env}) { return env.dom.createElement('br'); }};
let input = ''; process.stdin.on('data', (d) => { input += d; });
process.stdin.on('end', () => {
    const renderer = new MobiledocHtmlRenderer({cards, atoms: [softReturn],
        unknownCardHandler({env}) { throw new Error('unknown card ' + env.name); }});
    const out = JSON.parse(input).map((doc) => renderer.render(JSON.parse(doc),
        {target: 'email', postUrl: process.argv[1], siteUrl: process.argv[1]}));
    process.stdout.write(JSON.stringify(out));
});
"""
DOCUMENTS = {"core": core(), **{name: document(card) for name, card in CARDS.items()}}


@pytest.fixture(scope="module")
def reference() -> dict[str, str]:
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip("node and npm are needed to run the reference's renderer")
    rendered = json.loads(node(RENDER, json.dumps(list(DOCUMENTS.values())), POST_URL))
    return dict(zip(DOCUMENTS, rendered, strict=True))


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_a_reader_sees_what_the_reference_renders(reference, name):
    ours = seen(post_mobiledoc(DOCUMENTS[name], POST_URL)["email_html"])
    theirs = seen(reference[name])
    assert ours["links"] == theirs["links"], (name, reference[name])
    assert ours["images"] == theirs["images"], (name, reference[name])
    assert theirs["words"] <= ours["words"] | {"·", "•"}, (theirs["words"] - ours["words"], reference[name])
