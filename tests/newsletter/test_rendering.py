"""Rendering newsletter content: a corpus of awkward posts, each checked for every kind of reader.

Words in the posts say who may read them: EVERYONE…, PAIDONLY…, FREEONLY…, and NOBODY… (a block
no segment qualifies for, or text past the marker inside a free-only block). COMMENTED… sits in a
comment, which no reader gets. The checks are the same for every post, so a new awkward post is one
line of corpus.
"""

from __future__ import annotations

import hashlib
import hmac
import re

import pytest

from pressroom.email_rendering import (
    FREE,
    NOT_FREE,
    BodyCache,
    ContentError,
    EmailContent,
    html_to_text,
    member_values,
    render,
    segments_needed,
)
from pressroom.providers.port import PLACEHOLDER

CORPUS = {
    "nested blocks": ("public", '<p>EVERYONE1</p><div data-gh-segment="status:-free"><div><span>PAIDONLY1</span>'
                                '</div><p>PAIDONLY2</p></div><div data-gh-segment="status:free"><div><div>FREEONLY1 '
                                '</div></div></div><p>EVERYONE2</p>'),
    "unclosed tags": ("public", '<p>EVERYONE1<div data-gh-segment="status:free"><b>FREEONLY1</div><p>EVERYONE2'
                                '<div data-gh-segment="status:-free"><p>PAIDONLY1<p>PAIDONLY2<ul><li>PAIDONLY3'),
    "formatting element carried over": ("public", '<b data-gh-segment="status:-free">PAIDONLY1<p>PAIDONLY2</p>'
                                                  '<p>PAIDONLY3'),
    "comments": ("public", '<p>EVERYONE1</p><!-- <div data-gh-segment="status:free">COMMENTED1</div> -->'
                           '<div data-gh-segment="status:-free">PAIDONLY1<!-- COMMENTED2 --></div>'
                           '<!--[if mso]><p>COMMENTED3</p><![endif]--><p>EVERYONE2</p>'),
    "uppercase tags and attributes": ("public", '<DIV DATA-GH-SEGMENT="STATUS:-FREE"><P>PAIDONLY1</P></DIV>'
                                                "<Div Data-Gh-Segment='Status:Free'>FREEONLY1</Div><P>EVERYONE1"),
    "attributes in any order": ("public", '<section class="x" id=y data-gh-segment=status:-free style="a:b">PAIDONLY1 '
                                          '</section><p title=\'data-gh-segment="status:free"\'>EVERYONE1</p>'
                                          '<div\ndata-gh-segment = " status:-free "\nclass=z>PAIDONLY2</div>'),
    "segment attributes on void elements": ("public", '<p>EVERYONE1<img src="paid.png" alt="PAIDONLY1" '
                                                      'data-gh-segment="status:-free"><br data-gh-segment='
                                                      '"status:free"><img alt="FREEONLY1" data-gh-segment='
                                                      '"status:free" src=f.png></p>'),
    "equivalent filters": ("public", '<div data-gh-segment="status:paid,status:comped">PAIDONLY1</div>'
                                     '<div data-gh-segment="status:paid, status:comped">PAIDONLY2</div>'
                                     '<div data-gh-segment="status:-paid,status:-comped">EVERYONE1</div>'
                                     '<div data-gh-segment="all">EVERYONE2</div>'
                                     '<div data-gh-segment="status:paid">NOBODY1</div>'),
    "nested opposite blocks": ("public", '<div data-gh-segment="status:-free">PAIDONLY1<div data-gh-segment='
                                         '"status:free">NOBODY1</div><p>PAIDONLY2</p></div>'
                                         '<div data-gh-segment="status:free"><p data-gh-segment="status:-free">'
                                         'NOBODY2</p>FREEONLY1</div>'),
    "lists and tables": ("public", '<ul><li>EVERYONE1<li data-gh-segment="status:-free">PAIDONLY1</ul>'
                                   '<table><tr data-gh-segment="status:-free"><td>PAIDONLY2<tr><td>EVERYONE2</table>'),
    "link wrapping the block": ("public", '<a data-gh-segment="status:-free" href="https://site.test/PAIDONLY1">'
                                          'PAIDONLY2</a><noscript><div data-gh-segment="status:-free">PAIDONLY3'
                                          '</div>EVERYONE1</noscript>'),
    "template": ("public", "<p>EVERYONE1</p><template><p>NOBODY1</p></template>"),
    "paywall": ("paid", "<p>EVERYONE1</p><!--members-only--><p>PAIDONLY1</p>"),
    "several markers": ("paid", "<p>EVERYONE1</p><!--members-only--><p>PAIDONLY1</p><!--members-only-->"
                                "<p>PAIDONLY2</p>"),
    "marker spelled loosely": ("paid", "<p>EVERYONE1</p><!--  MEMBERS-ONLY  --><p>PAIDONLY1</p>"),
    "marker nested deep": ("paid", "<div><section><p>EVERYONE1</p><!--members-only--><p>PAIDONLY1</p></section>"
                                   "<p>PAIDONLY2</p></div><p>PAIDONLY3</p>"),
    "marker inside a paid block": ("paid", '<p>EVERYONE1</p><div data-gh-segment="status:-free">PAIDONLY1 '
                                           '<!--members-only--> PAIDONLY2</div><p>PAIDONLY3</p>'),
    "marker inside a free block": ("paid", '<p>EVERYONE1</p><div data-gh-segment="status:free">FREEONLY1 '
                                           '<!--members-only--> NOBODY1</div><p>PAIDONLY1</p>'),
    "marker in an unclosed paragraph": ("paid", "<p>EVERYONE1 <!--members-only--> PAIDONLY1<p>PAIDONLY2"),
    "paid post without a marker": ("paid", "<h1>PAIDONLY1</h1><p>PAIDONLY2</p>"),
    "marker text escaped is no marker": ("paid", "<p>EVERYONE1 &lt;!--members-only--&gt; EVERYONE2</p>"
                                                 "<!--members-only--><p>PAIDONLY1</p>"),
    "members post keeps the marker open": ("members", "<p>EVERYONE1</p><!--members-only--><p>EVERYONE2</p>"),
    "public post ignores the marker": ("public", "<p>EVERYONE1</p><!--members-only--><p>EVERYONE2</p>"),
    "replacements everywhere": ("paid", '<p>Hi %%{first_name "there"}%%, <a href="https://site.test/r?u=%%{uuid}%%'
                                        '&amp;e=%%{email}%%">EVERYONE1 {name, "reader"}</a></p>'
                                        '<p title="%%{name \'you\'}%%">Status %%{status}%%, {first_name}</p>'
                                        '<a href="%%{manage_account_url}%%">manage</a> '
                                        '<a href="%recipient.unsubscribe_url%">leave</a>'
                                        '<pre>{first_name} stays in code</pre><!--members-only-->'
                                        '<p>PAIDONLY1 {first_name, “friend”}</p>'),
}
SUBJECT = 'News for %%{first_name "you"}%% ({name, "reader"})'
TOKEN = re.compile(r"\b(EVERYONE|PAIDONLY|FREEONLY|NOBODY|COMMENTED)\d+\b")
LINK_SECRET = "s3cret"
NAMED = member_values(name="Ann <Lee>", email="ann@example.com", uuid="u-ann", status="paid",
                      site_url="https://site.test", link_secret=LINK_SECRET, newsletter_uuid="n-1", email_id="e1")
UNNAMED = member_values(name=None, email="x@example.com", uuid="u-x", status="free", site_url="https://site.test",
                        link_secret=LINK_SECRET, email_id="e1")
# The reference platform's key, computed here independently of the renderer.
ANN_KEY = hmac.new(LINK_SECRET.encode("utf-8"), b"u-ann", hashlib.sha256).hexdigest()


def content(visibility: str, html: str, subject: str = SUBJECT) -> EmailContent:
    return EmailContent(email_id="e1", subject=subject, html=html, visibility=visibility,
                        post_url="https://site.test/post/", upgrade_url="https://site.test/#/portal/account/plans")


def tokens(html: str, *kinds: str) -> set[str]:
    return {m.group(0) for m in TOKEN.finditer(html) if m.group(1) in kinds}


@pytest.mark.parametrize("name", list(CORPUS))
def test_each_reader_gets_their_part_and_no_more(name):
    visibility, html = CORPUS[name]
    post = content(visibility, html)
    for segment, mine, others in ((FREE, ("EVERYONE", "FREEONLY"), ("PAIDONLY", "NOBODY", "COMMENTED")),
                                  (NOT_FREE, ("EVERYONE", "PAIDONLY"), ("FREEONLY", "NOBODY", "COMMENTED"))):
        rendered = render(post, segment)
        for values in (NAMED, UNNAMED):
            subject, body, text = rendered.personalise(values)
            leaked = tokens(body + text + subject, *others)
            assert not leaked, f"{name}: {segment} readers got {leaked}"
            missing = tokens(html, *mine) - tokens(text, *mine)
            assert not missing, f"{name}: {segment} readers miss {missing} in their text"
            assert tokens(html, *mine) <= tokens(body, *mine)
            for part in (subject, body, text):
                assert "%recipient." not in part and "{{recipient." not in part and "%%" not in part
    if segments_needed(post):
        free, paid = render(post, FREE), render(post, NOT_FREE)
        # An old batch without a segment gets the free body: it may hold free members.
        assert render(post, None) == free
        assert free != paid or not tokens(html, "PAIDONLY", "FREEONLY")
    else:
        assert render(post, None) == render(post, FREE) == render(post, NOT_FREE)


@pytest.mark.parametrize("name", [n for n, (visibility, _) in CORPUS.items() if visibility == "paid"])
def test_free_readers_of_a_paid_post_get_the_call_to_action(name):
    rendered = render(content(*CORPUS[name]), FREE)
    _, body, text = rendered.personalise(UNNAMED)
    for part in (body, text):
        assert "https://site.test/post/" in part and "https://site.test/#/portal/account/plans" in part
    assert "Upgrade to keep reading (https://site.test/#/portal/account/plans)" in text
    _, paid_body, _ = render(content(*CORPUS[name]), NOT_FREE).personalise(NAMED)
    assert "Upgrade to keep reading" not in paid_body


def test_replacements_resolve_with_each_fallback_and_escape_in_html():
    post = content(*CORPUS["replacements everywhere"])
    subject, body, text = render(post, NOT_FREE).personalise(NAMED)
    assert subject == "News for Ann (Ann <Lee>)"
    assert "Hi Ann, " in body and "EVERYONE1 Ann &lt;Lee&gt;</a>" in body and 'title="Ann &lt;Lee&gt;"' in body
    assert 'href="https://site.test/r?u=u-ann&amp;e=ann@example.com"' in body
    assert "Status paid, Ann" in body and "PAIDONLY1 Ann" in body
    assert 'href="https://site.test/#/portal/account"' in body
    assert f'href="https://site.test/unsubscribe/?uuid=u-ann&amp;key={ANN_KEY}&amp;newsletter=n-1&amp;email=e1"' in body
    assert "<pre>{first_name} stays in code</pre>" in body  # code samples are not replacements
    assert "EVERYONE1 Ann <Lee> (https://site.test/r?u=u-ann&e=ann@example.com)" in text
    assert f"Unsubscribe (https://site.test/unsubscribe/?uuid=u-ann&key={ANN_KEY}&newsletter=n-1&email=e1)" in text

    subject, body, text = render(post, FREE).personalise(UNNAMED)
    assert subject == "News for you (reader)"
    assert "Hi there, " in body and "EVERYONE1 reader</a>" in body and 'title="you"' in body
    assert "Status free, </p>" in body and "friend" not in body  # after the marker: paywalled
    assert "Hi there, EVERYONE1 reader (https://site.test/r?u=u-x&e=x@example.com)" in text


def test_a_placeholder_an_author_wrote_is_escaped_in_html_as_every_replacement_is():
    """{{recipient.name}} in a post is the author's, like %recipient.name%: a member's name lands in
    the HTML as text, never as markup."""
    rendered = render(content("public", "<p>Hi {{recipient.name}} and %recipient.name%</p>"), None)
    _subject, html, text = rendered.personalise(NAMED)
    assert html.startswith("<p>Hi Ann &lt;Lee&gt; and Ann &lt;Lee&gt;</p>") and "Hi Ann <Lee> and Ann <Lee>" in text


def test_a_replacement_written_with_entities_is_still_resolved():
    rendered = render(content("public", "<p>&#37;&#37;&#123;first_name &quot;there&quot;&#125;&#37;&#37;</p>"), None)
    assert rendered.personalise(NAMED)[1].startswith("<p>Ann</p>")
    assert rendered.personalise(UNNAMED)[2].startswith("there\n")


def test_variables_are_what_the_provider_fills_in():
    rendered = render(content(*CORPUS["replacements everywhere"]), NOT_FREE)
    variables = rendered.recipient_variables(NAMED)
    names = PLACEHOLDER.findall(rendered.subject + rendered.html + rendered.text)
    assert names and "%recipient." not in rendered.subject + rendered.html + rendered.text  # neutral, not Mailgun's
    for name in names:
        assert name in variables
    assert variables["name"] == "Ann <Lee>" and variables["uuid"] == "u-ann"
    assert any(v == "Ann &lt;Lee&gt;" for v in variables.values())


@pytest.mark.parametrize("html, subject, words", [
    ("<p>%%{favourite_colour}%%</p>", "s", "malformed replacement '%%{favourite_colour}%%'"),
    ('<p>%%{first_name "there"</p>', "s", "malformed replacement"),
    ("<p>Hi {first_name, there}</p>", "s", "malformed replacement '{first_name, there}'"),
    ('<a href="%recipient.password%">x</a>', "s", "malformed replacement '%recipient.password%'"),
    ('<a href="{{recipient.password}}">x</a>', "s", "malformed replacement '{{recipient.password}}'"),
    ("<p>x</p>", "Hi %%{first_nam}%%", "malformed replacement '%%{first_nam}%%'"),
    ('<div data-gh-segment="label:vip">x</div>', "s", "data-gh-segment='label:vip' cannot be parsed"),
    ("", "s", "its post has no HTML to send"),
    ("  \n ", "s", "its post has no HTML to send"),
])
def test_bad_content_is_one_line_naming_the_problem(html, subject, words):
    with pytest.raises(ContentError) as refused:
        render(content("public", html, subject), NOT_FREE)
    message = str(refused.value)
    assert words in message and message.startswith("email e1: ") and "\n" not in message


def test_unknown_visibility_is_refused():
    with pytest.raises(ContentError, match="visibility 'secret' is not one of public, members, paid"):
        render(content("secret", "<p>x</p>"), FREE)


def test_plain_text_is_legible():
    html = ('<h1>The  title</h1><p>First\n   paragraph with <a href="https://a.test/x">a link</a> and '
            '<a href="https://b.test/">https://b.test/</a>.<br>Second line.</p><h2>Section</h2>'
            '<ul><li>one</li><li>two<ul><li>two-a</li></ul></li></ul><ol><li>first</li><li>second</li></ol>'
            '<blockquote><p>Quoted</p><p>twice</p></blockquote><pre>  indented\n    code</pre><hr>'
            '<style>p { color: red }</style><p><img src="x.png" alt="A chart"></p>')
    assert html_to_text(html) == (
        "# The title\n\n"
        "First paragraph with a link (https://a.test/x) and https://b.test/.\nSecond line.\n\n"
        "## Section\n\n"
        "- one\n- two\n  - two-a\n\n"
        "1. first\n2. second\n\n"
        "> Quoted\n>\n> twice\n\n"
        "  indented\n    code\n\n"
        "---\n\n"
        "[A chart]\n")


def test_body_cache_keeps_recent_bodies_within_its_size():
    cache = BodyCache(max_bytes=100)
    cache.put("a", "A", 40)
    cache.put("b", "B", 40)
    assert cache.get("a") == "A"  # a is now the most recently used
    cache.put("c", "C", 40)  # b goes: 40 + 40 + 40 > 100
    assert cache.get("b") is None and cache.get("a") == "A" and cache.get("c") == "C"
    assert cache.bytes == 80 and len(cache) == 2
    cache.put("huge", "H", 101)  # larger than the cache: not kept, nothing evicted
    assert cache.get("huge") is None and len(cache) == 2
    cache.put("a", "A2", 10)
    assert cache.get("a") == "A2" and cache.bytes == 50


def test_a_rendered_body_knows_its_size_in_bytes():
    rendered = render(content("public", "<p>Grüße</p>", "é"), None)
    assert rendered.size == len(rendered.subject.encode()) + len(rendered.html.encode()) + len(rendered.text.encode())
    assert rendered.size > len(rendered.subject) + len(rendered.html) + len(rendered.text)


def test_random_malformed_posts_never_leak():
    """Hundreds of generated posts of unbalanced markup, checked against an oracle that reads the
    parsed source another way: a word is paid when an ancestor is a block free readers do not get,
    or when it follows the first marker of a paid post."""
    import random

    from pressroom.email_rendering import SEGMENT_STATUSES, _parse, recipient_statuses

    rng = random.Random(13)
    opens = ["<div>", "<p>", "<b>", "<ul><li>", "<li>", "<table><tr><td>", "<span>", "<blockquote>", "<h2>",
             "<a href=x>"]
    closes = ["</div>", "</p>", "</b>", "</li>", "</ul>", "</td>", "</table>", "</span>", "</h2>", "</a>"]
    segments = ['status:free', 'STATUS:-FREE', 'status:-free', 'status:paid,status:comped', 'status:free,status:paid']
    for case in range(300):
        parts, words = [], 0
        for _ in range(rng.randint(3, 25)):
            roll = rng.random()
            if roll < 0.3:
                tag = rng.choice(["div", "p", "b", "section", "li", "img", "td"])
                parts.append(f'<{tag} data-gh-segment="{rng.choice(segments)}">')
            elif roll < 0.5:
                parts.append(rng.choice(opens))
            elif roll < 0.65:
                parts.append(rng.choice(closes))
            elif roll < 0.7:
                parts.append("<!--members-only-->")
            else:
                words += 1
                parts.append(f" W{words}X ")
        html, visibility = "".join(parts), rng.choice(["public", "paid"])
        post = content(visibility, html)

        tree = _parse(html)
        body = tree.body
        seen_marker, audience = False, {}
        for node in body.traverse(include_text=True):
            if node.is_comment_node and (node.comment_content or "").strip() == "members-only":
                seen_marker = True
            if node.is_text_node:
                statuses, parent = set(recipient_statuses("all")), node.parent
                while parent is not None and parent.mem_id != body.mem_id:
                    if "data-gh-segment" in parent.attrs:
                        statuses &= set(recipient_statuses(parent.attrs["data-gh-segment"]))
                    parent = parent.parent
                for word in re.findall(r"W\d+X", node.text_content or ""):
                    audience[word] = (statuses, seen_marker)
        for segment in (FREE, NOT_FREE):
            _, body_html, text = render(post, segment).personalise(NAMED)
            got = set(re.findall(r"W\d+X", body_html)) | set(re.findall(r"W\d+X", text))
            readers = SEGMENT_STATUSES[segment]
            for word, (statuses, after_marker) in audience.items():
                allowed = readers <= statuses and not (segment == FREE and visibility == "paid" and
                                                      (after_marker or "<!--members-only-->" not in html))
                assert (word in got) == allowed, (case, html, visibility, segment, word)


def test_authors_key_replacement_is_the_members_link_key():
    post = content("public", '<p><a href="https://site.test/unsubscribe/?uuid=%%{uuid}%%&amp;key=%%{key}%%">out</a></p>')
    _, body, _ = render(post, None).personalise(NAMED)
    assert f'href="https://site.test/unsubscribe/?uuid=u-ann&amp;key={ANN_KEY}"' in body


def test_a_batchs_values_are_each_members_own_and_the_reference_link():
    """A send prepares what its members share once (MemberValues) and reuses it for every member: each
    member still gets their own values, equal to `member_values`, and the reference platform's link."""
    from urllib.parse import urlencode

    from pressroom.email_rendering import MemberValues

    members = [("Ann <Lee>", "ann@example.com", "u-ann", "paid"), (None, "x@example.com", "u-x", "free"),
               ("  Zoë \n Ünal ", "z@example.com", "0190a8e2-7c1d-7000-8000-000000000001", "comped"),
               # Uuids a link must quote (the database's own need nothing quoted): spaces, '+', '&', non-ASCII.
               ("Q", "q@example.com", "odd uuid+1&x=2", "free"), ("R", "r@example.com", "ünï-1", "free"),
               ("S", "s@example.com", "ABC_def.~-9", "free")]
    for site, newsletter, email_id in (("https://site.test/", "n-1", "e1"), ("https://site.test", None, "e 1&x"),
                                       ("https://site.test", "", None)):
        batch = MemberValues(site_url=site, link_secret=LINK_SECRET, newsletter_uuid=newsletter, email_id=email_id)
        for name, email, uuid, status in members:
            values = batch(name=name, email=email, uuid=uuid, status=status)
            assert values == member_values(name=name, email=email, uuid=uuid, status=status, site_url=site,
                                           link_secret=LINK_SECRET, newsletter_uuid=newsletter, email_id=email_id)
            key = hmac.new(LINK_SECRET.encode("utf-8"), uuid.encode(), hashlib.sha256).hexdigest()
            query = {"uuid": uuid, "key": key, **({"newsletter": newsletter} if newsletter else {}),
                     **({"email": email_id} if email_id else {})}
            assert values["key"] == key
            assert values["unsubscribe_url"] == f"https://site.test/unsubscribe/?{urlencode(query)}"
