"""Audiences: the recipient filter language against real PostgreSQL, each form checked against a set
computed here in Python from the seeded members; refusals that name what is wrong; and a post for
one tier sent for real (a Temporal server, the simulator over HTTP) to members of several tiers."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.testing import ActivityEnvironment

from activities.newsletter.batches import BatchCreationActivities
from activities.newsletter.models import CreateBatchesInput
from pressroom.dependencies import Dependencies
from pressroom.recipient_filter import FilterError, parse

from .test_send import delivered, run_send

MEMBERS = 84


@dataclass
class Seeded:
    email_id: str
    post_id: str
    ids: dict[int, str]  # member number → id
    status: dict[int, str] = field(default_factory=dict)
    labels: dict[int, set[str]] = field(default_factory=dict)
    tiers: dict[int, set[str]] = field(default_factory=dict)  # tiers not expired


def plan(n: int) -> tuple[str, set[str], dict[str, bool]]:
    """Member n's status, labels and tiers (tier → expired?), by rules unrelated to the filters tested."""
    status = ("free", "paid", "comped")[n % 3]
    labels = {label for label, every in (("vip", 4), ("press", 5), ("beta", 7)) if n % every == 0}
    tiers = {}
    if n % 6 in (1, 2):
        tiers["gold"] = n % 12 == 1  # every other gold member's tier has ended
    if n % 5 in (1, 2):
        tiers["silver"] = False
    return status, labels, tiers


async def seed(db, *, recipient_filter: str = "all", visibility: str = "public", post_tiers: tuple[str, ...] = (),
               html: str = "<p>Hello</p>") -> Seeded:
    tag = uuid.uuid4().hex[:8]
    async with db.acquire() as conn, conn.transaction():
        newsletter_id = await conn.fetchval(
            "INSERT INTO newsletters (name, slug, sender_email) VALUES ('Weekly', $1, 'weekly@example.com') "
            "RETURNING id", f"weekly-{tag}")
        for slug in ("vip", "press", "beta"):
            await conn.execute("INSERT INTO labels (name, slug) VALUES ($1, $1) ON CONFLICT DO NOTHING", slug)
        await conn.execute("INSERT INTO labels (name, slug) VALUES ('Nobody', 'nobody') ON CONFLICT DO NOTHING")
        for slug in ("gold", "silver", "bronze"):
            await conn.execute("INSERT INTO products (name, slug) VALUES ($1, $1) ON CONFLICT DO NOTHING", slug)
        seeded = Seeded(email_id="", post_id="", ids={})
        for n in range(1, MEMBERS + 1):
            status, labels, tiers = plan(n)
            member_id = await conn.fetchval(
                "INSERT INTO members (email, name, status, created_at) VALUES ($1, $2, $3, now() - interval '1 hour') "
                "RETURNING id", f"m{n}-{tag}@example.com", f"Member {n}", status)
            await conn.execute("INSERT INTO members_newsletters (member_id, newsletter_id) VALUES ($1, $2)",
                               member_id, newsletter_id)
            await conn.execute("INSERT INTO members_labels (member_id, label_id) SELECT $1, id FROM labels "
                               "WHERE slug = ANY($2::text[])", member_id, sorted(labels))
            for tier, expired in tiers.items():
                await conn.execute(
                    "INSERT INTO members_products (member_id, product_id, expiry_at) SELECT $1, id, "
                    "CASE WHEN $3 THEN now() - interval '1 day' ELSE now() + interval '30 days' END "
                    "FROM products WHERE slug = $2", member_id, tier, expired)
            seeded.ids[n], seeded.status[n], seeded.labels[n] = member_id, status, labels
            seeded.tiers[n] = {tier for tier, expired in tiers.items() if not expired}
        post_id = await conn.fetchval(
            "INSERT INTO posts (title, slug, html, newsletter_id, visibility, status, published_at) "
            "VALUES ('Issue', $1, $2, $3, $4, 'published', now()) RETURNING id",
            f"issue-{tag}", html, newsletter_id, visibility)
        await conn.execute("INSERT INTO posts_products (post_id, product_id) SELECT $1, id FROM products "
                           "WHERE slug = ANY($2::text[])", post_id, list(post_tiers))
        seeded.email_id = await conn.fetchval(
            "INSERT INTO emails (post_id, newsletter_id, subject, html, plaintext, recipient_filter) "
            "VALUES ($1, $2, 'Issue 1', $3, 'Hello', $4) RETURNING id", post_id, newsletter_id, html, recipient_filter)
        seeded.post_id = post_id
    return seeded


async def create_batches(db, settings, email_id: str, *, chunked: bool = False) -> None:
    activities = BatchCreationActivities(Dependencies(settings=settings, pool=db, provider=None, temporal=None))
    counts = None
    while counts is None or counts.creating:
        counts = await ActivityEnvironment().run(
            activities.create_batches, CreateBatchesInput(email_id=email_id, retry_failed=False, chunked=chunked))


async def recipients(db, email_id: str) -> set[str]:
    return {r["member_id"] for r in await db.fetch("SELECT member_id FROM email_recipients WHERE email_id = $1",
                                                   email_id)}


# Each form of the language, and what it selects by the plain rules of the reference platform.
FORMS = [
    ("all", lambda s, ls, t: True),
    ("status:free", lambda s, ls, t: s == "free"),
    ("status:-free", lambda s, ls, t: s != "free"),
    ("status:[paid,comped]", lambda s, ls, t: s in ("paid", "comped")),
    ("status:-[free,comped]", lambda s, ls, t: s == "paid"),
    ("status:paid,status:comped", lambda s, ls, t: s in ("paid", "comped")),
    ("label:vip", lambda s, ls, t: "vip" in ls),
    ("label:[vip,press]", lambda s, ls, t: bool(ls & {"vip", "press"})),
    ("label:-vip", lambda s, ls, t: "vip" not in ls),
    ("label:-[vip,press]", lambda s, ls, t: not ls & {"vip", "press"}),
    ("label:nobody", lambda s, ls, t: False),
    ("tier:gold", lambda s, ls, t: "gold" in t),  # an ended tier no longer counts
    ("product:gold", lambda s, ls, t: "gold" in t),
    ("tier:-gold", lambda s, ls, t: "gold" not in t),
    ("tier:[gold,silver]", lambda s, ls, t: bool(t & {"gold", "silver"})),
    ("label:vip,tier:gold", lambda s, ls, t: "vip" in ls or "gold" in t),
    ("label:vip+tier:silver", lambda s, ls, t: "vip" in ls and "silver" in t),
    # + binds tighter than ,
    ("label:press,label:vip+tier:silver", lambda s, ls, t: "press" in ls or ("vip" in ls and "silver" in t)),
    ("label:vip+tier:silver,label:press", lambda s, ls, t: ("vip" in ls and "silver" in t) or "press" in ls),
    ("(label:press,label:vip)+tier:silver", lambda s, ls, t: ("press" in ls or "vip" in ls) and "silver" in t),
    ("status:-free+(label:beta,tier:-[gold,silver])",
     lambda s, ls, t: s != "free" and ("beta" in ls or not t & {"gold", "silver"})),
    (" ( status:comped , label:beta ) + label:-vip ",
     lambda s, ls, t: (s == "comped" or "beta" in ls) and "vip" not in ls),
    # The reference's other spellings: quoted values, plural keys, all-of lists.
    ("label:'vip'", lambda s, ls, t: "vip" in ls),
    ("status:'paid'+tiers:'silver'", lambda s, ls, t: s == "paid" and "silver" in t),
    ("labels:[vip+press]", lambda s, ls, t: {"vip", "press"} <= ls),
    ("label:[ vip + press + beta ],tier:gold", lambda s, ls, t: {"vip", "press", "beta"} <= ls or "gold" in t),
    ("products:[gold+silver]", lambda s, ls, t: {"gold", "silver"} <= t),
    ("labels:-['vip',press]+tiers:[silver]", lambda s, ls, t: not ls & {"vip", "press"} and "silver" in t),
]


@pytest.mark.parametrize("chunked", [False, True], ids=["one-statement", "chunked"])
async def test_each_form_selects_the_members_it_names(db, newsletter_settings, chunked):
    settings = newsletter_settings(batch_size=5)  # several batches, and several chunks when chunked
    for recipient_filter, rule in FORMS:
        seeded = await seed(db, recipient_filter=recipient_filter)
        await create_batches(db, settings, seeded.email_id, chunked=chunked)
        expected = {seeded.ids[n] for n in seeded.ids if rule(seeded.status[n], seeded.labels[n], seeded.tiers[n])}
        assert await recipients(db, seeded.email_id) == expected, recipient_filter
        assert expected or recipient_filter == "label:nobody"


@pytest.mark.parametrize("text, words", [
    ("flavour:vanilla", "unknown term 'flavour' at 1"),
    ("status:vip", "unknown status 'vip' at 8"),
    ("label:vip+", "expected a term"),
    ("(label:vip,label:press", "expected ')'"),
    ("label:[vip,press", "expected ',' or ']'"),
    ("label:vip)", "expected ',', '+' or the end at 10"),
    ("label:vip;DROP TABLE members", "character ';' at 10"),
    ('label:"vip"', "double quote at 7; the filter language quotes with '"),
    ("label:'vip", "the quote at 7 is not closed"),
    ("label:''", "empty quotes at 7"),
    ("label:'Press Corps'", "the label 'Press Corps' at 7 is not a slug"),
    ("label:-[vip+press]", "(the reference has no -[a+b])"),
    ("label:[vip,press+beta]", "expected ',' or ']' at 17"),
    ("label:[vip+press,beta]", "expected '+' or ']' at 17"),
    ("'label':vip", "unknown term 'label' at 1"),
    ("", "recipient filter is empty"),
])
def test_what_is_outside_the_grammar_is_refused_by_name(text, words):
    with pytest.raises(FilterError) as refused:
        parse(text)
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_the_tree_follows_precedence_and_parentheses():
    assert str(parse("label:a,label:b+tier:c")) == "label:a,label:b+tier:c"
    assert str(parse("(label:a,label:b)+tier:c")) == "(label:a,label:b)+tier:c"
    assert str(parse("product:[x,y]")) == "tier:[x,y]"
    assert str(parse("labels:[a+b],tiers:'c'")) == "label:a+label:b,tier:c"


@pytest.mark.parametrize("recipient_filter, words", [
    ("label:vip+tier:platinum", "names no tier platinum"),
    ("label:[vip,unheard-of,press],product:gold", "names no label unheard-of"),
    ("label:[nope]+tier:[none]", "names no label nope; no tier none"),
    ("label:vip,size:large", "unknown term 'size'"),
])
async def test_a_filter_naming_what_does_not_exist_fails_the_email_before_anything_is_written(
        db, mailgun, ts_worker, recipient_filter, words):
    client, settings = ts_worker
    seeded = await seed(db, recipient_filter=recipient_filter)
    with pytest.raises(WorkflowFailureError) as failed:
        await run_send(client, settings, seeded.email_id)
    assert words in str(failed.value.cause)
    email = await db.fetchrow("SELECT status, error FROM emails WHERE id = $1", seeded.email_id)
    assert email["status"] == "failed" and words in email["error"]
    assert await db.fetchval("SELECT count(*) FROM email_batches WHERE email_id = $1", seeded.email_id) == 0
    assert mailgun.stats()["messages"] == 0


TIER_POST = ("<p>For everyone: the summary.</p><div data-gh-segment=\"status:-free\"><p>Thanks for paying.</p></div>"
             "<!--members-only--><p>GOLD ONLY: the full analysis.</p>")


@pytest.mark.parametrize("chunked_batches", [False, True])
async def test_a_post_for_one_tier_reaches_its_members_whole_and_nobody_else(db, mailgun, ts_worker,
                                                                            chunked_batches):
    """Gold members (paid and comped, some also silver) read it all; an ended gold tier, silver only,
    free and paid members without a tier read the part before the marker and the invitation."""
    client, settings = ts_worker
    seeded = await seed(db, recipient_filter="status:-free,label:press", visibility="tiers", post_tiers=("gold",),
                        html=TIER_POST)
    if chunked_batches:  # batches written as the chunked creation writes them, then sent
        await create_batches(db, settings, seeded.email_id, chunked=True)
    outcome = await run_send(client, settings, seeded.email_id)
    assert outcome.status == "submitted"
    counts = delivered(mailgun, seeded.email_id)
    emails = {r["id"]: r["email"] for r in await db.fetch("SELECT id, email FROM members WHERE id = ANY($1::text[])",
                                                          list(seeded.ids.values()))}
    audience = {n for n in seeded.ids if seeded.status[n] != "free" or "press" in seeded.labels[n]}
    assert set(counts) == {emails[seeded.ids[n]] for n in audience} and set(counts.values()) == {1}
    gold = {n for n in audience if "gold" in seeded.tiers[n]}
    assert {seeded.status[n] for n in gold} == {"paid", "comped"}  # the tier spans statuses
    assert any(plan(n)[2].get("gold") for n in audience - gold)  # and an ended gold tier is among the rest
    for n in audience:
        [message] = [m for m in mailgun.messages_for(seeded.email_id) if emails[seeded.ids[n]] in m.recipients]
        _, html, text = message.received_by(emails[seeded.ids[n]])
        assert "the summary" in html
        if n in gold:
            assert "GOLD ONLY" in html + text and "Upgrade to keep reading" not in html, n
        else:
            assert "GOLD ONLY" not in html + text and "Upgrade to keep reading" in html, n
        # A block for paying members goes to paying members only, in or out of the tier.
        assert ("Thanks for paying" in html) == (seeded.status[n] != "free"), n
    # One body per segment: no batch mixes readers of the whole post with readers of its start.
    segments = await db.fetch("SELECT b.member_segment, array_agg(r.member_id) AS members FROM email_batches b "
                              "JOIN email_recipients r ON r.batch_id = b.id WHERE b.email_id = $1 "
                              "GROUP BY b.member_segment", seeded.email_id)
    of_tier = {seeded.ids[n] for n in gold}
    for row in segments:
        assert set(row["members"]) <= of_tier if row["member_segment"].endswith("+tiers") \
            else not set(row["members"]) & of_tier, row["member_segment"]

    from operations.reports import newsletter_report

    report = await newsletter_report(seeded.email_id, settings=settings)
    assert {s.segment: s.recipients for s in report.segments} == {
        name: sum(1 for n in audience if (n in gold) == of_post and (seeded.status[n] == "free") == free)
        for name, of_post, free in (("free", False, True), ("paid", False, False), ("paid-tiers", True, False))}


async def test_preview_shows_each_member_what_their_tiers_give_them(db, newsletter_settings):
    from operations.newsletter import preview_email

    settings = newsletter_settings()
    seeded = await seed(db, visibility="tiers", post_tiers=("gold",), html=TIER_POST)
    gold, ended, silver = 7, 13, 6  # paid of gold; paid whose gold tier ended; free of silver only
    assert "gold" in seeded.tiers[gold] and plan(ended)[2] == {"gold": True} and seeded.tiers[silver] == {"silver"}
    for n, whole in ((gold, True), (ended, False), (silver, False)):
        preview = await preview_email(seeded.email_id, member_id=seeded.ids[n], settings=settings)
        assert ("GOLD ONLY" in preview.html) == whole and ("Upgrade to keep reading" in preview.html) != whole, n
        assert ("of the post's tiers" in preview.reader) == whole
    stand_in = await preview_email(seeded.email_id, segment="paid", settings=settings)
    assert "GOLD ONLY" not in stand_in.html


async def test_an_audience_keeps_its_parsed_filter_for_the_lock_to_check(db, monkeypatch):
    """The lock parses the filter once: the audience keeps the tree, and the check that its labels
    and tiers exist reads that tree."""
    from datetime import UTC, datetime

    import activities.newsletter.audience as audiences

    parsed = []
    monkeypatch.setattr(audiences, "parse", lambda text: parsed.append(text) or parse(text))
    await db.execute("INSERT INTO labels (name, slug) VALUES ('vip', 'vip') ON CONFLICT DO NOTHING")
    now = datetime.now(UTC)
    chosen = audiences.audience({"recipient_filter": "label:vip+tier:platinum", "post_id": None,
                                 "newsletter_id": "n1", "created_at": now}, as_of=now, tiers=False)
    async with db.acquire() as conn:
        assert await audiences.missing(conn, chosen.tree) == "no tier platinum"
    assert parsed == ["label:vip+tier:platinum"]


def test_the_reference_parser_accepts_every_form_and_refuses_what_is_refused():
    """@tryghost/nql-lang itself (installed by npm): each form of FORMS parses there too ("all" is the
    reference's word for no filter, not its language), and the reference's own refusals are ours."""
    from tests.reference_js import node

    refused_there = ['label:"vip"', "label:-[vip+press]", "label:[vip,press+beta]", "label:[vip+press,beta]",
                     "label:''", "label:'vip"]
    texts = [text for text, _ in FORMS if text != "all"] + refused_there
    answers = json.loads(node(
        "const nql = require('@tryghost/nql-lang');"
        "const texts = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "const parses = (t) => { try { nql.parse(t); return true; } catch (e) { return false; } };"
        "console.log(JSON.stringify(texts.map(parses)));",
        json.dumps(texts)))
    assert dict(zip(texts, answers, strict=True)) == {text: text not in refused_there for text in texts}
    for text in refused_there:
        with pytest.raises(FilterError):
            parse(text)
