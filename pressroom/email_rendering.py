"""What each reader of a newsletter gets: segments, the paywall, personalisation and plain text.

Pure functions over strings; no I/O. The send activity, `pressroom newsletter preview` and
`pressroom newsletter test` all call `render`, so a preview shows exactly what a batch sends.

An email that tracks clicks has every `http(s)` link of its body (the paywall's invitation too)
rewritten to `{site}/r/{id}?m={member uuid}`: one redirect per distinct target and email, its id
derived from both, so every segment and every worker names the same redirect without asking the
database; the send stores `Rendered.links` before its batches go out (docs/clicks.md).

The post is parsed once by an HTML5 parser (Lexbor, through selectolax) into the tree a mail
client builds from the same bytes, and the body is the serialisation of that tree after cutting.
What we checked is therefore what we send: an unclosed tag cannot make our cut end somewhere else
than the reader's client thinks it does. Markup spelling is normalised (quotes, case, implied end
tags); text, attributes and element order are kept.

Personalisation becomes the provider port's neutral placeholders (`{{recipient.NAME}}`, see
pressroom/providers/port.py): the body is rendered once per segment, the provider turns the
placeholders into its own syntax and fills in each reader's values. A value is HTML-escaped where
it lands in HTML (a name like `Tom <b>` stays text), so every replacement has a plain and an `_html`
twin. Authors may write Mailgun's `%recipient.NAME%` too (posts written for Ghost do).
"""

from __future__ import annotations

import hashlib
import hmac
import html as html_lib
import re
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from email.headerregistry import Address
from functools import cached_property
from typing import Any, NoReturn
from urllib.parse import SplitResult, parse_qsl, quote, quote_plus, urlencode, urlsplit

from email_validator import EmailNotValidError, validate_email
from selectolax.lexbor import LexborHTMLParser, LexborNode

from pressroom.email_template import EmailTemplate, plain_parts, wrap
from pressroom.providers.port import PLACEHOLDER, fill_placeholders, placeholder
from pressroom.recipient_filter import parse, statuses_only

VISIBILITIES = ("public", "members", "paid", "tiers")
FREE, NOT_FREE = "status:free", "status:-free"
# A post for chosen tiers: readers of one of its tiers are a segment of their own, within their status's.
TIERS_SUFFIX = "+tiers"
FREE_OF_TIER, NOT_FREE_OF_TIER = FREE + TIERS_SUFFIX, NOT_FREE + TIERS_SUFFIX
# The bodies a newsletter can have, and which member statuses read each.
SEGMENT_STATUSES = {FREE: frozenset({"free"}), NOT_FREE: frozenset({"paid", "comped"}),
                    FREE_OF_TIER: frozenset({"free"}), NOT_FREE_OF_TIER: frozenset({"paid", "comped"})}
SEGMENT_NAMES = {"free": FREE, "paid": NOT_FREE}  # as the CLI spells them
# `key` is the reference platform's: the member's link key (see `member_key`), for authors' own links.
REPLACEMENTS = ("first_name", "name", "email", "uuid", "key", "status", "unsubscribe_url", "manage_account_url")
# Variables every message carries whether the post uses them or not: the footer and headers need them.
BASE_VARIABLES = ("name", "uuid", "unsubscribe_url")

MEMBERS_ONLY_MARKER = "members-only"
_SEGMENT_ATTRIBUTE = "data-gh-segment"
_SPECIAL = re.compile(r"[&<>\"']")  # what HTML escaping changes
_MAILGUN_FORM = re.compile(r"%recipient\.([A-Za-z0-9_.-]+)%")  # an author's, as Ghost's posts hold it
_QUOTED = r'"([^"]*)"|“([^”]*)”|\'([^\']*)\''
_DOUBLE = re.compile(r"%%\{(.*?)\}%%", re.S)
_DOUBLE_INNER = re.compile(rf"\s*([a-z_]+)\s*(?:,?\s*(?:{_QUOTED}))?\s*", re.S)
_IDS = "|".join(REPLACEMENTS)
# The editor's form, {first_name, "there"}: only known ids, so `{x}` in prose stays prose.
_EDITOR = re.compile(rf"\{{\s*({_IDS})\s*(?:,\s*(?:{_QUOTED}))?\s*\}}")
_EDITOR_CANDIDATE = re.compile(rf"\{{\s*(?:{_IDS})\s*(?:[,\"“'][^{{}}]*)?\}}")


class ContentError(ValueError):
    """The email cannot be rendered as it stands (no HTML, a malformed replacement, a bad segment)."""


# --- filters -------------------------------------------------------------------------------------

def recipient_statuses(expression: str) -> list[str]:
    """Member statuses a filter of status terms selects (`all`, `status:free`, `status:-free,status:comped`,
    …; see pressroom/recipient_filter.py). Anything else is refused (FilterError, a ValueError), never guessed."""
    return sorted(statuses_only(parse(expression)))


def segment_of(status: str) -> str:
    return FREE if status == "free" else NOT_FREE


# --- inputs and outputs --------------------------------------------------------------------------

@dataclass(frozen=True)
class EmailContent:
    """An email as its post and newsletter make it; loaded by the caller."""

    email_id: str
    subject: str
    html: str
    visibility: str  # public | members | paid | tiers
    post_url: str
    upgrade_url: str
    track_clicks: bool = False
    site_url: str = ""  # where the redirects are answered (`pressroom serve` behind it)
    link_ref: str | None = None  # the outbound `ref` tag's value; None: links untagged
    template: EmailTemplate | None = None  # the designed email around the body; None: the body alone


@dataclass(frozen=True)
class Rendered:
    """One segment's message, with a neutral placeholder where each reader's values go."""

    subject: str
    html: str
    text: str
    # placeholder name → (replacement id, fallback, HTML-escaped?)
    variables: Mapping[str, tuple[str, str, bool]] = field(default_factory=dict)
    # redirect id → target: the redirects the tracked links name (none when clicks are not tracked)
    links: Mapping[str, str] = field(default_factory=dict)

    @cached_property
    def size(self) -> int:
        """Bytes held in memory (as UTF-8), what the body cache counts."""
        return sum(len(part.encode()) for part in (self.subject, self.html, self.text))

    def shows(self, replacement: str) -> bool:
        """Whether a placeholder of the message shows this value of the reader's (see REPLACEMENTS)."""
        return any(used == replacement for used, _, _ in self.variables.values())

    @cached_property
    def _placeholders(self) -> tuple[tuple[str, str, str, bool], ...]:
        """`variables` flattened once: a send walks them for every reader."""
        return tuple((name, *spec) for name, spec in self.variables.items())

    def recipient_variables(self, values: Mapping[str, str]) -> dict[str, str]:
        """One reader's value of every placeholder, from their values (see `member_values`)."""
        out = {}
        for name, replacement, fallback, escaped in self._placeholders:
            value = values.get(replacement) or fallback
            out[name] = html_lib.escape(value, quote=True) if escaped and _SPECIAL.search(value) else value
        return out

    def personalise(self, values: Mapping[str, str]) -> tuple[str, str, str]:
        """(subject, html, text) as one reader sees them: the provider's substitution, done here."""
        variables = self.recipient_variables(values)
        return tuple(fill_placeholders(part, variables.__getitem__)  # type: ignore[return-value]
                     for part in (self.subject, self.html, self.text))


def member_key(secret: str, member_uuid: str) -> str:
    """The key of a member's links as the reference platform makes it: lowercase hex HMAC-SHA256 of
    the member's uuid (text), keyed with the members secret's UTF-8 bytes."""
    return hmac.digest(secret.encode(), member_uuid.encode(), "sha256").hex()


def _link_tail(newsletter_uuid: str | None, email_id: str | None) -> str:
    """What follows an unsubscribe link's key: the same for every member of one email."""
    query = {}
    if newsletter_uuid:
        query["newsletter"] = newsletter_uuid
    if email_id:
        query["email"] = email_id
    return f"&{urlencode(query)}" if query else ""


class MemberValues:
    """`member_values` for the members of one email: what they share (the site, the key's secret, the
    link's tail) prepared once, and each member's link key computed once (a send does this for every
    recipient, so it is most of a batch's own work)."""

    def __init__(self, *, site_url: str, link_secret: str, newsletter_uuid: str | None = None,
                 email_id: str | None = None) -> None:
        self._site = site_url.rstrip("/")
        self._secret = link_secret.encode()
        self._tail = _link_tail(newsletter_uuid, email_id)
        self._manage = f"{self._site}/#/portal/account"

    def __call__(self, *, name: str | None, email: str, uuid: str, status: str) -> dict[str, str]:
        words = (name or "").split()  # a line break in a stored name must not reach a header
        key = hmac.digest(self._secret, uuid.encode(), "sha256").hex()
        return {"first_name": words[0] if words else "", "name": " ".join(words), "email": email, "uuid": uuid,
                "key": key, "status": status,
                "unsubscribe_url": f"{self._site}/unsubscribe/?uuid={_query_value(uuid)}&key={key}{self._tail}",
                "manage_account_url": self._manage}


def _query_value(text: str) -> str:
    """`quote_plus(text)`, without its cost for a uuid as the database writes it (letters, digits
    and hyphens, which it leaves as they are): done for every recipient of a send."""
    return text if text.isascii() and text.replace("-", "").isalnum() else quote_plus(text)


def member_values(*, name: str | None, email: str, uuid: str, status: str, site_url: str, link_secret: str,
                  newsletter_uuid: str | None = None, email_id: str | None = None) -> dict[str, str]:
    """What each replacement stands for, for one member. Without `newsletter_uuid` the link leaves
    every newsletter; `email_id` (an email of the emails table) lets its report count who left."""
    return MemberValues(site_url=site_url, link_secret=link_secret, newsletter_uuid=newsletter_uuid,
                        email_id=email_id)(name=name, email=email, uuid=uuid, status=status)


# --- headers: what goes into Subject, From and Reply-To ---------------------------------------------

def header_text(value: str, field: str, email_id: str) -> str:
    """A header's text as the email's row gives it, refused when a line break or another control
    character could end the header or start another."""
    if any(not c.isprintable() and c != "\t" for c in value):
        raise ContentError(f"email {email_id}: the {field} holds a line break or control character")
    return value


def mailbox(name: str | None, address: str, field: str, email_id: str) -> str:
    """`Name <address>` for From or Reply-To, quoted by `email.headerregistry` so that a name with
    quotes or commas stays one address; the address validated by email-validator."""


    name = header_text(name or "", f"{field} name", email_id)
    try:
        # Syntax only, `.test` allowed: the same rules as a recipient's (pressroom/inputs.py).
        address = validate_email(header_text(address, f"{field} address", email_id),
                                 check_deliverability=False, test_environment=True).normalized
        return str(Address(display_name=name, addr_spec=address))
    except (EmailNotValidError, ValueError) as error:
        raise ContentError(f"email {email_id}: the {field} address is not an e-mail address ({error})") from None


# --- segments and the paywall --------------------------------------------------------------------

def _parse(html: str) -> LexborHTMLParser:
    # An explicit <body> keeps a post's own <style> or <title> where it stands instead of in a <head>.
    return LexborHTMLParser("<body>" + html)


def _body(tree: LexborHTMLParser) -> LexborNode:
    """The document's body, which `_parse` always opens."""
    body = tree.body
    assert body is not None
    return body


def _block_statuses(node: LexborNode, email_id: str) -> frozenset[str]:
    value = node.attrs.get(_SEGMENT_ATTRIBUTE) or ""
    try:
        return frozenset(recipient_statuses(value))
    except ValueError:
        raise ContentError(f"email {email_id}: a block's {_SEGMENT_ATTRIBUTE}={value[:40]!r} cannot be parsed: "
                           "use status:free or status:-free") from None


def paywalled(visibility: str, segment: str) -> bool:
    """Who reads only what comes before the members-only marker: free members of a paid post, and
    everyone outside a tiers post's tiers, whatever their status."""
    if visibility == "tiers":
        return not segment.endswith(TIERS_SUFFIX)
    return visibility == "paid" and SEGMENT_STATUSES.get(segment) == SEGMENT_STATUSES[FREE]


def segments_needed(content: EmailContent) -> bool:
    """Do readers get different bodies? Then batches are built per segment."""
    _check_visibility(content)
    return content.visibility in ("paid", "tiers") or bool(_parse(content.html).css(f"[{_SEGMENT_ATTRIBUTE}]"))


def segments_of(content: EmailContent) -> tuple[str | None, ...]:
    """The bodies the email has: one (None), free and paid, or those two each in and out of the post's tiers."""
    if not segments_needed(content):
        return (None,)
    if content.visibility == "tiers":
        return FREE, NOT_FREE, FREE_OF_TIER, NOT_FREE_OF_TIER
    return FREE, NOT_FREE


def segment_for(content: EmailContent, status: str, *, of_tier: bool = False) -> str | None:
    """The body a member with this status (and of one of the post's tiers, or not) gets: their
    segment's, or the one body when all get the same."""
    if not segments_needed(content):
        return None
    return segment_of(status) + (TIERS_SUFFIX if content.visibility == "tiers" and of_tier else "")


def _check_visibility(content: EmailContent) -> None:
    if content.visibility not in VISIBILITIES:
        raise ContentError(f"email {content.email_id}: post visibility {content.visibility!r} is not one of "
                           + ", ".join(VISIBILITIES))


def _cut_after_marker(body: LexborNode) -> bool:
    """Remove the first members-only marker and everything after it in document order."""
    marker = next((n for n in body.traverse(include_text=True)
                   if n.is_comment_node and (n.comment_content or "").strip().lower() == MEMBERS_ONLY_MARKER), None)
    if marker is None:
        return False
    node: LexborNode | None = marker
    while node is not None and node.mem_id != body.mem_id:
        following = node.next
        while following is not None:
            after = following.next
            following.decompose()
            following = after
        node = node.parent
    marker.decompose()
    return True


def _children(node: LexborNode) -> list[LexborNode]:
    children, child = [], node.first_child
    while child is not None:
        children.append(child)
        child = child.next
    return children


def _call_to_action(content: EmailContent, link=lambda url: url) -> str:
    post, upgrade = (html_lib.escape(link(url), quote=True) for url in (content.post_url, content.upgrade_url))
    readers = "subscribers of its tiers" if content.visibility == "tiers" else "paying subscribers"
    return ('<div class="paywall" style="text-align:center;margin:32px 0;"><hr>'
            f"<p><strong>The rest of this post is for {readers}.</strong></p>"
            f'<p><a href="{upgrade}">Upgrade to keep reading</a></p>'
            f'<p><a href="{post}">Read the post on the site</a></p></div>')


# --- replacements ---------------------------------------------------------------------------------

class _Variables:
    """Names the placeholders of one rendering: one per (replacement, fallback, escaped)."""

    def __init__(self, email_id: str) -> None:
        self.email_id = email_id
        self.names: dict[tuple[str, str], str] = {}
        self.used: dict[str, tuple[str, str, bool]] = {}
        for replacement in BASE_VARIABLES:
            self.placeholder(replacement, "", escaped=False)

    def placeholder(self, replacement: str, fallback: str, *, escaped: bool) -> str:
        key = (replacement, fallback)
        if key not in self.names:
            count = sum(1 for r, _ in self.names if r == replacement)
            self.names[key] = replacement if not fallback and count == 0 else f"{replacement}_{count + 1}"
        name = self.names[key] + ("_html" if escaped else "")
        self.used[name] = (replacement, fallback, escaped)
        return placeholder(name)

    def substitute(self, text: str, *, escaped: bool, editor_form: bool = True) -> str:
        """Every replacement in `text` as a placeholder; a malformed one is a ContentError."""
        if "%" not in text and "{" not in text:
            return text

        def double(match: re.Match) -> str:
            inner = _DOUBLE_INNER.fullmatch(match.group(1))
            if not inner or inner.group(1) not in REPLACEMENTS:
                self._malformed(match.group(0))
            fallback = next((g for g in inner.groups()[1:] if g is not None), "")
            return self.placeholder(inner.group(1), fallback, escaped=escaped)

        def authored(match: re.Match) -> str:
            if match.group(1) not in REPLACEMENTS:
                self._malformed(match.group(0))
            return self.placeholder(match.group(1), "", escaped=escaped)

        def editor(match: re.Match) -> str:
            fallback = next((g for g in match.groups()[1:] if g is not None), "")
            return self.placeholder(match.group(1), fallback, escaped=escaped)

        # Author text may already hold {{recipient.x}} or Mailgun's %recipient.x%: it goes through
        # the same names (escaped where it lands in HTML), so no placeholder reaches the provider
        # that we do not define for every reader.
        text = PLACEHOLDER.sub(authored, text)
        text = _MAILGUN_FORM.sub(authored, text)
        text = _DOUBLE.sub(double, text)
        if "%%{" in text:
            self._malformed(text[text.index("%%{"):])
        if editor_form and "{" in text:
            for candidate in _EDITOR_CANDIDATE.finditer(text):
                if not _EDITOR.fullmatch(candidate.group(0)):
                    self._malformed(candidate.group(0))
            text = _EDITOR.sub(editor, text)
        return text

    def _malformed(self, snippet: str) -> NoReturn:
        snippet = " ".join(snippet.split())
        snippet = snippet if len(snippet) <= 60 else snippet[:59] + "…"
        raise ContentError(f"email {self.email_id}: malformed replacement {snippet!r}: write "
                           '%%{first_name "fallback"}%% or {first_name, "fallback"} with one of '
                           + ", ".join(REPLACEMENTS))


# Where `{name}` is more likely code or CSS than the editor's replacement.
_LITERAL = frozenset({"code", "pre", "kbd", "samp", "style", "script"})


def _in_code(node: LexborNode) -> bool:
    parent = node.parent
    while parent is not None:
        if parent.tag in _LITERAL:
            return True
        parent = parent.parent
    return False


def _personalise_tree(body: LexborNode, variables: _Variables) -> None:
    # Collect first: Lexbor nodes must not change while a traversal walks them.
    for node in list(body.traverse(include_text=True)):
        if node.is_text_node:
            text = node.text_content or ""
            if "%" in text or "{" in text:
                new = variables.substitute(text, escaped=True, editor_form=not _in_code(node))
                if new != text:
                    node.replace_with(new)
        elif node.is_element_node:
            for name, value in list(node.attributes.items()):
                if value and ("%" in value or "{" in value):
                    new = variables.substitute(value, escaped=True)
                    if new != value:
                        node.attrs[name] = new


# --- links: outbound tagging and click tracking ----------------------------------------------------

REDIRECT_PATH = "/r/"
MAX_TARGET_LENGTH = 2000  # the reference platform's `redirects.to`
# Sites that break on a long `ref` (the reference platform's list).
_REF_REFUSED = frozenset({"facebook.com", "www.facebook.com", "web.archive.org", "archive.org",
                          "www.federalreserve.gov", "www.chicagomag.com"})
_URL_SAFE = ":/?#[]@!$&'()*+,;=%~"  # what stays as it is when a non-ASCII target is percent-encoded
_PERSONAL = re.compile(r"\{\{recipient\.|%recipient\.|%%\{")  # a reader's own value: one link per reader
_UNSAFE = re.compile(r"[\x00-\x20\x7f]")  # never in a Location header


def redirect_id(email_id: str, target: str) -> str:
    """The redirect of `target` in email `email_id`: the same for every segment and every worker."""
    return hashlib.sha256(f"{email_id}\n{target}".encode()).hexdigest()[:24]


def ref_value(newsletter_name: str) -> str:
    """`{slug}-newsletter`, the reference platform's `ref` for a newsletter's links."""
    slug = re.sub(r"[^a-z0-9]+", "-", newsletter_name.lower()).strip("-")
    return f"{slug or 'site'}-newsletter"


def _host(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def _web_url(href: str) -> tuple[str, SplitResult] | None:
    """`href` as a target one may redirect to (absolute http(s), no spaces or control characters,
    non-ASCII percent-encoded) with its parts, or None when it is not one."""
    if not href or _PERSONAL.search(href) or _UNSAFE.search(href):
        return None
    try:
        parts = urlsplit(href)
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    url = href if href.isascii() else quote(href, safe=_URL_SAFE)
    return (url, parts) if len(url) <= MAX_TARGET_LENGTH else None


class _Links:
    """Rewrites one rendering's links: tagged with `ref` when outbound, and through a redirect when
    the email tracks clicks; the member's own links (unsubscribe, account) are left alone."""

    def __init__(self, content: EmailContent, variables: _Variables) -> None:
        self.content = content
        self.site = content.site_url.rstrip("/")
        self.site_host = _host(self.site)
        self.tracked: dict[str, str] = {}
        self._done: dict[str, str] = {}  # href → what it became: a post repeats its links
        self._member = placeholder("uuid") if content.track_clicks else ""
        if content.track_clicks:
            variables.placeholder("uuid", "", escaped=False)

    def __call__(self, href: str) -> str:
        done = self._done.get(href)
        if done is None:
            done = self._done[href] = self._rewrite(href)
        return done

    def _rewrite(self, href: str) -> str:
        web = _web_url(href.strip())
        if web is None:
            return href
        url, parts = web
        own = (parts.hostname or "").lower() == self.site_host
        if own and (parts.path.startswith("/unsubscribe") or parts.fragment.startswith("/portal")):
            return href  # the member's own links
        if self.content.link_ref and not own:
            url = _with_ref(url, self.content.link_ref)
        if not self.content.track_clicks:
            return url
        rid = redirect_id(self.content.email_id, url)
        self.tracked[rid] = url
        return f"{self.site}{REDIRECT_PATH}{rid}?m={self._member}"


def _with_ref(url: str, ref: str) -> str:
    parts = urlsplit(url)
    if (parts.hostname or "").lower() in _REF_REFUSED or any(
            key in ("ref", "utm_source", "source") for key, _ in parse_qsl(parts.query, keep_blank_values=True)):
        return url
    head, hash_, fragment = url.partition("#")
    return f"{head}{'&' if parts.query else '?'}ref={quote_plus(ref)}{hash_}{fragment}"


def _rewrite_links(body: LexborNode, links: _Links) -> None:
    for node in body.css("a[href], area[href]"):
        href = node.attrs.get("href") or ""
        new = links(href)
        if new != href:
            node.attrs["href"] = new


# --- rendering ------------------------------------------------------------------------------------

FOOTER_HTML = (f'<p class="footer"><a href="{placeholder("unsubscribe_url_html")}">Unsubscribe</a> · '
               f'<a href="{placeholder("manage_account_url_html")}">Manage your subscription</a></p>')


def render(content: EmailContent, segment: str | None) -> Rendered:
    """The message for one segment (one of SEGMENT_STATUSES, or None when every reader gets the same)."""
    _check_visibility(content)
    if not content.html or not content.html.strip():
        raise ContentError(f"email {content.email_id}: its post has no HTML to send")
    if segment is not None and segment not in SEGMENT_STATUSES:
        raise ContentError(f"email {content.email_id}: unknown segment {segment!r}")
    if segment is None and segments_needed(content):
        # A batch made before its content was segmented: its readers may be free, so they get the
        # free body rather than risk paid text.
        segment = FREE

    tree = _parse(content.html)
    body = _body(tree)
    # <template> content is inert in a browser and shown by clients that do not know the element.
    for node in tree.css("template"):
        node.decompose()
    statuses = {node.mem_id: _block_statuses(node, content.email_id)
                for node in body.css(f"[{_SEGMENT_ATTRIBUTE}]")}  # every block is checked, cut or not
    cut = paywalled(content.visibility, segment or "")
    # The paywall comes first: text after the marker is paid even inside a block for free members.
    # A paid post without a marker is paid from its first word: free members get the invitation only.
    if cut and not _cut_after_marker(body):
        for node in _children(body):
            node.decompose()
    if segment is not None:
        readers = SEGMENT_STATUSES[segment]
        # A block goes to a segment only when every reader in it is in the block's audience.
        unread = {node.mem_id: node for node in body.css(f"[{_SEGMENT_ATTRIBUTE}]")
                  if not readers <= statuses[node.mem_id]}
        # Remove outermost blocks only: removing one destroys the blocks inside it.
        for node in [n for n in unread.values() if not _inside(n, unread)]:
            node.decompose()
    # Comments are invisible but readable in the source; a commented-out paid block is still paid.
    for node in [n for n in body.traverse(include_text=True) if n.is_comment_node]:
        node.decompose()

    variables = _Variables(content.email_id)
    if any(sign in content.html for sign in "%{&"):  # most posts have nothing to personalise: skip the walk
        _personalise_tree(body, variables)
    subject = variables.substitute(content.subject, escaped=False)
    links = _Links(content, variables)
    if content.track_clicks or content.link_ref:
        _rewrite_links(body, links)
    html = (body.inner_html or "") + (_call_to_action(content, links) if cut else "")
    variables.placeholder("unsubscribe_url", "", escaped=True)
    variables.placeholder("manage_account_url", "", escaped=True)
    if content.template is None:
        html += FOOTER_HTML
        plain = html
    else:
        plain = plain_parts(content.template, html, FOOTER_HTML, links)
        html = wrap(content.template, html, FOOTER_HTML, links)
    text = PLACEHOLDER.sub(lambda m: _plain_twin(m, variables), html_to_text(plain))
    return Rendered(subject=subject, html=html, text=text, variables=dict(variables.used), links=links.tracked)


# Gmail shows a message's first 102 KB and clips the rest behind a link (the footer's unsubscribe link with it).
GMAIL_CLIP_BYTES = 102 * 1024


def segment_sizes(content: EmailContent) -> dict[str, int]:
    """Each segment's HTML in bytes as sent (placeholders unfilled: a reader's values change it by a few
    bytes); "all" when every reader gets the same."""
    return {segment or "all": len(render(content, segment).html.encode()) for segment in segments_of(content)}


def clip_warning(email_id: str, sizes: Mapping[str, int]) -> str | None:
    """Why Gmail would clip the email, in one line, or None when every segment fits."""
    over = {segment: size for segment, size in sizes.items() if size > GMAIL_CLIP_BYTES}
    if not over:
        return None
    return (f"email {email_id}: Gmail clips a message past {GMAIL_CLIP_BYTES // 1024} KB, and this one is "
            + ", ".join(f"{size / 1024:,.0f} KB ({segment})" for segment, size in over.items())
            + ": its footer and unsubscribe link will be hidden behind 'View entire message'")


def render_automated(email_id: str, subject: str, html: str, text: str) -> Rendered:
    """An automated email (a welcome email) with its replacements as a newsletter's are: the same
    names, and in its HTML the escaped twin, so a member's name is text there, never markup. It has
    no segments, paywall or footer of ours."""
    body = _body(_parse(html))
    variables = _Variables(email_id)
    _personalise_tree(body, variables)
    return Rendered(subject=variables.substitute(subject, escaped=False), html=body.inner_html or "",
                    text=variables.substitute(text, escaped=False), variables=dict(variables.used))


def _plain_twin(match: re.Match, variables: _Variables) -> str:
    name = match.group(1)
    replacement, fallback, escaped = variables.used[name]
    return variables.placeholder(replacement, fallback, escaped=False) if escaped else match.group(0)


def _inside(node: LexborNode, ids: Mapping[int, LexborNode]) -> bool:
    parent = node.parent
    while parent is not None:
        if parent.mem_id in ids:
            return True
        parent = parent.parent
    return False


# --- plain text -----------------------------------------------------------------------------------

_SKIP = frozenset({"style", "script", "template", "head", "title"})
_BLOCKS = frozenset({"p", "div", "section", "article", "header", "footer", "aside", "nav", "main", "figure",
                     "figcaption", "table", "form", "fieldset", "address", "details", "summary", "dl", "center"})
_WHITESPACE, _SPACES, _SPACED_NEWLINE = re.compile(r"\s+"), re.compile(r" {2,}"), re.compile(r" *\n *")
_TRAILING_SPACE, _BLANK_LINE, _BLANK_LINES = re.compile(r"[ \t]+\n"), re.compile(r"\n{2,}"), re.compile(r"\n{3,}")
_PRE_SPACE = "\x00"  # stands for a space inside <pre> until whitespace is tidied


def html_to_text(html: str) -> str:
    """A plain-text version a reader can follow: paragraphs, `#` headings, `-` and `1.` lists,
    `> ` quotes, and links as `text (url)`."""
    body = _body(_parse(html))
    text = _text_of_children(body, pre=False)
    text = _TRAILING_SPACE.sub("\n", text)
    text = _BLANK_LINES.sub("\n\n", text).strip("\n ")
    return text.replace(_PRE_SPACE, " ") + "\n"


def _text_of_children(node: LexborNode, *, pre: bool) -> str:
    parts = []
    child = node.first_child
    while child is not None:
        parts.append(_text_of(child, pre=pre))
        child = child.next
    return "".join(parts)


def _tidy(inner: str) -> str:
    return _SPACED_NEWLINE.sub("\n", _SPACES.sub(" ", inner)).strip(" \n")


def _text_of(node: LexborNode, *, pre: bool) -> str:
    if node.is_text_node:
        text = node.text_content or ""
        return text.replace(" ", _PRE_SPACE) if pre else _WHITESPACE.sub(" ", text)
    if not node.is_element_node:
        return ""
    tag = node.tag or ""
    if tag in _SKIP:
        return ""
    if (alone := _element_alone(node, tag)) is not None:
        return alone
    if tag in ("ul", "ol"):
        return _list_text(node, numbered=tag == "ol", pre=pre)
    return _around(node, tag, _text_of_children(node, pre=pre))


def _element_alone(node: LexborNode, tag: str) -> str | None:
    """The text of an element read without its children's text as such (a break, a rule, an
    image's alt, preformatted text); None for every other element."""
    if tag == "br":
        return "\n"
    if tag == "hr":
        return "\n\n---\n\n"
    if tag == "img":
        alt = (node.attrs.get("alt") or "").strip()
        return f"[{alt}]" if alt else ""
    if tag == "pre":
        return "\n\n" + _text_of_children(node, pre=True).strip("\n") + "\n\n"
    return None


def _list_text(node: LexborNode, *, numbered: bool, pre: bool) -> str:
    items, number = [], 0
    child = node.first_child
    while child is not None:
        if child.is_element_node and child.tag == "li":
            number += 1
            bullet = f"{number}. " if numbered else "- "
            lines = _BLANK_LINE.sub("\n", _tidy(_text_of_children(child, pre=pre))).split("\n")
            items.append(bullet + ("\n" + " " * len(bullet)).join(lines))
        child = child.next
    return "\n\n" + "\n".join(items) + "\n\n"


def _around(node: LexborNode, tag: str, inner: str) -> str:
    """An element's children's text as its tag sets it out: a link with its address, a heading, a
    quote, a table's cells and rows, a block."""
    if tag == "a":
        href = (node.attrs.get("href") or "").strip()
        label = inner.strip()
        if not href or href.startswith("#") or href == label:
            return inner
        return f"{inner} ({href})" if label else href
    if len(tag) == 2 and tag[0] == "h" and tag[1] in "123456":
        return "\n\n" + "#" * int(tag[1]) + " " + _tidy(inner).replace("\n", " ") + "\n\n"
    if tag == "li":  # outside a list
        return "\n- " + _tidy(inner) + "\n"
    if tag == "blockquote":
        quoted = _BLANK_LINES.sub("\n\n", _tidy(inner))
        return "\n\n" + "\n".join(("> " + line).rstrip() for line in quoted.split("\n")) + "\n\n"
    if tag == "tr":
        return "\n" + inner.strip() + "\n"
    if tag in ("td", "th"):
        return " " + inner.strip() + " "
    if tag in _BLOCKS:
        return "\n\n" + _tidy(inner) + "\n\n"
    return inner


# --- the body cache -------------------------------------------------------------------------------

class BodyCache:
    """Values by key (an email and a segment), least recently used out first, within `max_bytes`.

    The caller says what each value weighs. A value larger than the whole cache is not kept: it is
    rendered again next time rather than pushing out everything else.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Hashable) -> Any | None:
        item = self._items.get(key)
        if item is None:
            return None
        self._items.move_to_end(key)
        return item[0]

    def put(self, key: Hashable, value: Any, size: int) -> None:
        if key in self._items:
            self.bytes -= self._items.pop(key)[1]
        if size > self.max_bytes:
            return
        while self._items and self.bytes + size > self.max_bytes:
            self.bytes -= self._items.popitem(last=False)[1][1]
        self._items[key] = (value, size)
        self.bytes += size
