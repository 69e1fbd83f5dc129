"""Which links rendering tracks and how (pure: no database, no provider): the tracked link's form,
what is left alone, the `ref` tag, one redirect per distinct target and email, and the provider's
own click tracking kept off."""

from __future__ import annotations

import pytest

from pressroom.email_rendering import EmailContent, redirect_id, ref_value, render
from pressroom.providers.port import Message
from pressroom.providers.ses.client import SesClient

SITE = "https://site.test"


def content(html: str, *, track: bool = True, ref: str | None = None, visibility: str = "public",
            email_id: str = "e1") -> EmailContent:
    return EmailContent(email_id=email_id, subject="S", html=html, visibility=visibility, post_url=f"{SITE}/post/",
                        upgrade_url=f"{SITE}/#/portal/account/plans", track_clicks=track, site_url=SITE,
                        link_ref=ref)


def tracked(url: str, email_id: str = "e1") -> str:
    return f"{SITE}/r/{redirect_id(email_id, url)}?m={{{{recipient.uuid}}}}"


def test_every_web_link_goes_through_one_redirect_per_target_with_the_readers_uuid():
    html = ('<p><a href="https://a.example/x">x</a> <a href=" https://a.example/x ">again</a> '
            '<a href="HTTP://B.example/">b</a></p>')
    rendered = render(content(html), None)
    assert rendered.html.count(tracked("https://a.example/x")) == 2
    assert tracked("HTTP://B.example/") in rendered.html
    assert dict(rendered.links) == {redirect_id("e1", "https://a.example/x"): "https://a.example/x",
                                    redirect_id("e1", "HTTP://B.example/"): "HTTP://B.example/"}
    assert rendered.variables["uuid"] == ("uuid", "", False)  # the provider fills it per reader
    assert tracked("https://a.example/x") in rendered.text  # the plain-text part carries the same link


@pytest.mark.parametrize("href", ["mailto:editor@example.com", "tel:+123", "#top", "/relative", "javascript:x()",
                                  "%%{unsubscribe_url}%%", "https://a.example/?m=%%{uuid}%%",
                                  "https://a.example/{{recipient.email}}", f"{SITE}/unsubscribe/?uuid=u&key=k",
                                  f"{SITE}/#/portal/account", "https://a.example/a b", "https://a.example:99999/",
                                  "https:///nohost", "https://a.example/" + "x" * 2000])
def test_what_is_not_a_public_web_link_of_the_post_is_left_alone(href):
    rendered = render(content(f'<p><a href="{href}">link</a></p>'), None)
    assert "/r/" not in rendered.html.split('class="footer"')[0] and not rendered.links


def test_the_same_target_is_the_same_redirect_in_every_segment_and_another_email_has_its_own():
    html = ('<p><a href="https://a.example/">all</a></p><div data-gh-segment="status:free">'
            '<a href="https://free.example/">f</a></div><div data-gh-segment="status:-free">'
            '<a href="https://paid.example/">p</a></div><!--members-only--><a href="https://deep.example/">d</a>')
    free, paid = (render(content(html, visibility="paid"), s) for s in ("status:free", "status:-free"))
    assert set(free.links.values()) == {"https://a.example/", "https://free.example/", f"{SITE}/post/"}
    assert set(paid.links.values()) == {"https://a.example/", "https://paid.example/", "https://deep.example/"}
    assert tracked("https://a.example/") in free.html and tracked("https://a.example/") in paid.html
    assert redirect_id("e2", "https://a.example/") != redirect_id("e1", "https://a.example/")


def test_untracked_emails_keep_their_links_and_the_ref_tag_goes_on_outbound_links_only():
    html = ('<a href="https://a.example/x?y=1#frag">a</a><a href="https://site.test/about">own</a>'
            '<a href="https://b.example/?utm_source=s">b</a><a href="https://www.facebook.com/p">fb</a>'
            '<a href="https://c.example/é">c</a>')
    plain = render(content(html, track=False), None)
    assert 'href="https://a.example/x?y=1#frag"' in plain.html and not plain.links
    tagged = render(content(html, track=False, ref=ref_value("The Weekly!")), None)
    assert 'href="https://a.example/x?y=1&amp;ref=the-weekly-newsletter#frag"' in tagged.html
    assert 'href="https://site.test/about"' in tagged.html  # the site's own
    assert 'href="https://b.example/?utm_source=s"' in tagged.html  # already attributed
    assert 'href="https://www.facebook.com/p"' in tagged.html  # a site that refuses a long ref
    assert 'href="https://c.example/%C3%A9?ref=the-weekly-newsletter"' in tagged.html
    both = render(content(html, ref="w-newsletter"), None)
    assert "https://a.example/x?y=1&ref=w-newsletter#frag" in both.links.values()


def test_ses_is_told_to_leave_every_link_alone_when_clicks_are_ours():
    client = SesClient(endpoint="http://127.0.0.1:1", region="us-east-1", access_key_id="k", secret_access_key="s",
                       domain="d.example", configuration_set="c")
    body = render(content('<p><a href="https://a.example/">a</a></p>'), None).html
    untracked = client.prepare(Message(from_address="f@d.example", subject="s", html=body, text="t",
                                       tracking_clicks=False))
    html = untracked.shared["DefaultContent"]["Template"]["TemplateContent"]["Html"]
    assert html.count("<a ses:no-track ") == body.count("<a ") == 3  # the link and the footer's two
    default = client.prepare(Message(from_address="f@d.example", subject="s", html=body, text="t"))
    assert "ses:no-track" not in default.shared["DefaultContent"]["Template"]["TemplateContent"]["Html"]
