"""The Admin API's resources through real HTTP, PostgreSQL and the operations the CLI calls: the
reference's envelopes, each error type, browse's options, and what Pressroom refuses by name."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

from operations.integrations import add_integration
from tests.admin_api.conftest import API, token
from tests.admin_api.test_tokens import error_of
from tests.authoring import mobiledoc_documents
from tests.authoring.lexical_documents import every_card


def one(response, resource: str) -> dict:
    body = response.json()
    assert list(body[resource]) and len(body[resource]) == 1, body
    return body[resource][0]


async def test_a_draft_post_from_html_is_sanitised_read_by_id_and_slug_and_deleted(api):
    added = await api.post("posts/", params={"source": "html"}, json={"posts": [{
        "title": "Hostile <b>title</b>", "tags": [], "featured": False,
        "html": '<p onclick="steal()">Hi <a href="javascript:alert(1)">x</a></p><script>alert(1)</script>'
                '<!--members-only--><p>paid part</p>'}]})
    assert added.status_code == 201, added.text
    post = one(added, "posts")
    assert post["status"] == "draft" and post["slug"] == "hostile-b-title-b"
    assert "script" not in post["html"] and "onclick" not in post["html"] and "javascript:" not in post["html"]
    assert "<!--members-only-->" in post["html"]  # the paywall's marker survives
    assert one(await api.get(f"posts/{post['id']}/"), "posts")["id"] == post["id"]
    assert one(await api.get(f"posts/slug/{post['slug']}/"), "posts")["id"] == post["id"]
    deleted = await api.delete(f"posts/{post['id']}/")
    assert deleted.status_code == 204 and not deleted.content
    missing = await api.get(f"posts/{post['id']}/")
    assert missing.status_code == 404 and error_of(missing)["type"] == "NotFoundError"


async def test_an_edit_from_a_stale_copy_is_a_409_and_writes_nothing(api):
    post = one(await api.post("posts/", params={"source": "html"},
                              json={"posts": [{"title": "First", "html": "<p>a</p>"}]}), "posts")
    fresh = await api.put(f"posts/{post['id']}/", json={"posts": [{"title": "Second",
                                                                   "updated_at": post["updated_at"]}]})
    assert fresh.status_code == 200 and one(fresh, "posts")["title"] == "Second"
    stale = await api.put(f"posts/{post['id']}/", json={"posts": [{"title": "Third",
                                                                   "updated_at": post["updated_at"]}]})
    assert stale.status_code == 409 and error_of(stale)["type"] == "UpdateCollisionError"
    assert one(await api.get(f"posts/{post['id']}/"), "posts")["title"] == "Second"


async def test_what_pressroom_does_not_keep_is_refused_by_name(api):
    cases = [
        ({"posts": [{"title": "t", "html": "<p>x</p>"}]}, {}, "html is read only with ?source=html"),
        ({"posts": [{"title": "t", "lexical": '{"root":{}}'}]}, {}, "lexical must be a document"),
        ({"posts": [{"title": "t", "lexical": '{"root":{"children":[{"type":"transistor"}]}}'}]}, {},
         "'transistor' is not one Pressroom can render"),
        ({"posts": [{"title": "t", "mobiledoc": '{"version":"0.2.0"}'}]}, {}, "must be a version 0.3 document"),
        ({"posts": [{"title": "t", "mobiledoc": '{"version":"0.3.1","cards":[["transistor",{}]],'
                                                '"sections":[[10,0]]}'}]}, {},
         "the mobiledoc card 'transistor' is not one Pressroom can render"),
        ({"posts": [{"title": "t", "lexical": '{"root":{"children":[]}}', "mobiledoc": '{"version":"0.3.1"}'}]},
         {}, "as lexical or as mobiledoc, not both"),
        ({"posts": [{"title": "t", "codeinjection_head": "<script>"}]}, {},
         "posts.codeinjection_head is not supported"),
        ({"posts": [{"title": "t", "status": "sent"}]}, {}, "status 'sent' is not one of"),
        ({"posts": [{"title": "t", "status": "scheduled", "published_at": "2001-01-01T00:00:00Z"}]}, {},
         "must be in the future"),
        ({"posts": [{"title": "t"}]}, {"newsletter": "weekly"}, "?newsletter is for a post being published"),
        ({"posts": []}, {}, "the body must be"),
    ]
    for body, params, words in cases:
        refused = await api.post("posts/", params=params, json=body)
        assert refused.status_code == 422, (words, refused.text)
        error = error_of(refused)
        assert error["type"] == "ValidationError" and words in error["message"], (words, error)
    # The fields listed as written are those Pressroom writes: the editor's documents among them.
    listed = error_of(await api.post("posts/", json={"posts": [{"title": "t", "codeinjection_head": "x"}]}))
    assert listed["context"].startswith("posts fields Pressroom writes: "), listed
    written = listed["context"].removeprefix("posts fields Pressroom writes: ").split(", ")
    assert {"lexical", "mobiledoc"} <= set(written) and "codeinjection_head" not in written, listed
    not_json = await api.post("posts/", content=b"{not json", headers={"Content-Type": "application/json"})
    assert not_json.status_code == 422 and error_of(not_json)["message"] == "the body is not JSON"
    too_big = await api.post("posts/", content=b"x" * (5 * 1024 * 1024), headers={"Content-Type": "application/json"})
    assert too_big.status_code == 413 and error_of(too_big)["type"] == "RequestEntityTooLargeError"
    assert (await api.get("posts/", params={"formats": "amp"})).status_code == 422
    assert await db_posts(api) == 0  # nothing partial written


async def db_posts(api) -> int:
    return (await api.get("posts/", params={"limit": "all"})).json()["meta"]["pagination"]["total"]


async def test_a_post_from_lexical_is_kept_as_sent_with_its_web_and_email_html(api, db):
    document = every_card()
    added = await api.post("posts/", json={"posts": [{"title": "Every card", "lexical": document,
                                                      "html": "<p>what the editor read back</p>"}]})
    assert added.status_code == 201, added.text
    post = one(added, "posts")
    assert "Read more" in post["html"] and "Only in the email" not in post["html"]  # the web rendering
    row = await db.fetchrow("SELECT lexical, email_html, plaintext FROM posts WHERE id = $1", post["id"])
    assert row["lexical"] == document and "Only in the email" in row["email_html"]
    assert "kg-bookmark-container" in row["email_html"] and "<table" in row["email_html"]
    assert "Big news" in row["plaintext"]
    read = one(await api.get(f"posts/{post['id']}/", params={"formats": "html,lexical"}), "posts")
    assert read["lexical"] == document
    edited = await api.put(f"posts/{post['id']}/", json={"posts": [{
        "lexical": document.replace("Read more", "Read on"), "updated_at": post["updated_at"]}]})
    assert edited.status_code == 200 and "Read on" in one(edited, "posts")["html"]
    refused = await api.put(f"posts/{post['id']}/", json={"posts": [{"lexical": document.replace(
        '"type": "button"', '"type": "transistor"')}]})
    assert refused.status_code == 422 and "transistor" in error_of(refused)["message"]
    assert "Read on" in await db.fetchval("SELECT email_html FROM posts WHERE id = $1", post["id"])


async def test_a_post_from_mobiledoc_is_kept_as_sent_with_its_web_and_email_html(api, db):
    document = mobiledoc_documents.every_card()
    added = await api.post("posts/", json={"posts": [{"title": "Older post", "mobiledoc": document, "lexical": None,
                                                      "html": "<p>what the editor read back</p>"}]})
    assert added.status_code == 201, added.text
    post = one(added, "posts")
    assert "Read more" in post["html"] and "Only in the email" not in post["html"]  # the web rendering
    assert "<strong>bold</strong>" in post["html"] and "what the editor read back" not in post["html"]
    row = await db.fetchrow("SELECT mobiledoc, lexical, email_html, plaintext FROM posts WHERE id = $1", post["id"])
    assert row["mobiledoc"] == document and row["lexical"] is None and "Only in the email" in row["email_html"]
    # Nothing plays in a mail client: the audio card links to the post's page, as the reference's does.
    assert f'href="{post["url"]}"' in row["email_html"] and "Big news" in row["plaintext"]
    read = one(await api.get(f"posts/{post['id']}/", params={"formats": "html,mobiledoc"}), "posts")
    assert read["mobiledoc"] == document and "lexical" not in read
    refused = await api.put(f"posts/{post['id']}/", json={"posts": [{"mobiledoc": document.replace(
        '["button"', '["transistor"'), "updated_at": post["updated_at"]}]})
    assert refused.status_code == 422 and "'transistor'" in error_of(refused)["message"]
    assert await db.fetchval("SELECT mobiledoc FROM posts WHERE id = $1", post["id"]) == document  # nothing written


async def test_browse_pages_filters_orders_and_projects_posts(api):
    for n in range(5):
        await api.post("posts/", params={"source": "html"}, json={"posts": [{"title": f"Page {n}", "html": "<p/>"}]})
    first = await api.get("posts/", params={"limit": 2, "order": "title asc", "fields": "id,title",
                                            "filter": "status:draft"})
    body = first.json()
    assert [p["title"] for p in body["posts"]] == ["Page 0", "Page 1"] and set(body["posts"][0]) == {"id", "title"}
    assert body["meta"]["pagination"] == {"page": 1, "limit": 2, "pages": 3, "total": 5, "next": 2, "prev": None}
    last = (await api.get("posts/", params={"limit": 2, "page": 3, "order": "title asc"})).json()
    assert [p["title"] for p in last["posts"]] == ["Page 4"] and last["meta"]["pagination"]["prev"] == 2
    every = (await api.get("posts/", params={"limit": "all"})).json()
    assert len(every["posts"]) == 5 and every["meta"]["pagination"]["limit"] == "all"
    for params, option in [({"order": "secret desc"}, "order"), ({"include": "drop_tables"}, "include"),
                           ({"limit": "0"}, "limit"), ({"limit": "5000"}, "limit"), ({"page": "x"}, "page"),
                           ({"fields": "password"}, "fields"), ({"filter": "title:~'x'"}, "filter")]:
        refused = await api.get("posts/", params=params)
        assert refused.status_code == 422 and error_of(refused)["property"] == option, (params, refused.text)


async def test_posts_filter_by_tag_author_and_time_as_the_references_nql(api, db):
    for title, tags, authors, day in [("Old news", ["News"], [], (2025, 6, 1)),
                                      ("New news", ["News", "Long reads"], [], (2026, 2, 1)),
                                      ("Other", [], ["Ada"], (2026, 3, 1))]:
        post = one(await api.post("posts/", params={"source": "html"}, json={"posts": [{
            "title": title, "html": "<p/>", "tags": tags, "authors": authors}]}), "posts")
        await db.execute("UPDATE posts SET published_at = $2 WHERE id = $1", post["id"], datetime(*day, tzinfo=UTC))

    async def titles(text: str) -> list[str]:
        answer = await api.get("posts/", params={"filter": text, "order": "title asc", "limit": "all"})
        assert answer.status_code == 200, answer.text
        return [p["title"] for p in answer.json()["posts"]]

    assert await titles("tag:news") == ["New news", "Old news"]
    other = (await api.get("posts/", params={"filter": "slug:other"})).json()["posts"][0]
    news = (await api.get("posts/", params={"filter": "slug:old-news"})).json()["posts"][0]["tags"][0]
    tagged = one(await api.put(f"posts/{other['id']}/", json={"posts": [{"tags": [{"id": news["id"]}]}]}), "posts")
    assert [t["slug"] for t in tagged["tags"]] == ["news"]  # a tag named by its id, as a client read it
    missing = await api.put(f"posts/{other['id']}/", json={"posts": [{"tags": [{"id": "no-such-id"}]}]})
    assert missing.status_code == 404
    await api.put(f"posts/{other['id']}/", json={"posts": [{"tags": []}]})
    assert await titles("tag:-news") == ["Other"]
    assert await titles("tags:[long-reads],author:ada") == ["New news", "Other"]
    assert await titles("published_at:>'2026-01-01'") == ["New news", "Other"]
    assert await titles("published_at:>='2026-01-01'+published_at:<'2026-03-01 00:00:00'") == ["New news"]
    assert await titles("tag:news+(published_at:<'2026-01-01T00:00:00Z',status:published)") == ["Old news"]
    assert await titles("status:draft+created_at:<='2999-01-01'") == ["New news", "Old news", "Other"]
    for text, words in [("published_at:>'yesterday'", "is not a date or a time"),
                        ("tag:>'news'", "expected a tag value"), ("title:x", "unknown term 'title'"),
                        ("status:gone", "unknown status 'gone'")]:
        refused = await api.get("posts/", params={"filter": text})
        assert refused.status_code == 422 and words in error_of(refused)["message"], refused.text


def test_the_posts_filters_read_as_the_references_nql_reads_them():
    """@tryghost/nql-lang (npm) parses each posts filter Pressroom takes, a time compared as ours is."""
    import json

    from pressroom.recipient_filter import parse_posts
    from tests.reference_js import node

    texts = ["tag:news", "tag:-news", "tags:[long-reads],author:ada", "published_at:>'2026-01-01'",
             "published_at:>='2026-01-01'+published_at:<'2026-03-01 00:00:00'", "updated_at:<='2026-01-01'",
             "tag:news+(published_at:<'2026-01-01T00:00:00Z',status:published)"]
    answers = json.loads(node("const nql = require('@tryghost/nql-lang');"
                              "const texts = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
                              "console.log(JSON.stringify(texts.map((t) => nql.parse(t))));", json.dumps(texts)))
    operators = {">": "$gt", ">=": "$gte", "<": "$lt", "<=": "$lte"}
    for text, theirs in zip(texts, answers, strict=True):
        tree = parse_posts(text)
        if getattr(tree, "compare", ""):
            assert theirs == {tree.key: {operators[tree.compare]: tree.values[0]}}, (text, theirs)


async def test_newsletters_tiers_and_labels(api):
    added = await api.post("newsletters/", json={"newsletters": [{"name": "Daily Notes", "sender_name": "Ed"}]})
    assert added.status_code == 201
    newsletter = one(added, "newsletters")
    assert newsletter["slug"] == "daily-notes" and newsletter["status"] == "active"
    edited = await api.put(f"newsletters/{newsletter['id']}/", json={"newsletters": [{"name": "Daily"}]})
    assert one(edited, "newsletters")["name"] == "Daily"
    assert [n["slug"] for n in (await api.get("newsletters/")).json()["newsletters"]] == ["daily-notes"]
    missing = await api.put("newsletters/nope/", json={"newsletters": [{"name": "x"}]})
    assert missing.status_code == 404 and error_of(missing)["type"] == "NotFoundError"
    tier = one(await api.post("tiers/", json={"tiers": [{"name": "Gold Circle"}]}), "tiers")
    assert tier["slug"] == "gold-circle" and tier["type"] == "paid"
    taken = await api.post("tiers/", json={"tiers": [{"name": "Gold Circle"}]})
    assert taken.status_code == 422 and "taken" in error_of(taken)["message"]
    label = one(await api.post("labels/", json={"labels": [{"name": "Early Birds"}]}), "labels")
    assert label["slug"] == "early-birds"
    assert (await api.get("labels/", params={"filter": "slug:early-birds"})).json()["meta"]["pagination"]["total"] == 1


async def test_members_added_edited_browsed_and_deleted_through_the_operations(api, db):
    ids = []
    for n, labels in enumerate([["VIP"], [{"name": "VIP"}], []]):
        added = await api.post("members/", json={"members": [{"email": f"reader{n}@example.com", "name": f"R {n}",
                                                              "labels": labels}]})
        assert added.status_code == 201, added.text
        ids.append(one(added, "members")["id"])
    # Welcomed through the outbox, as `members add` does.
    assert await db.fetchval("SELECT count(*) FROM outbox WHERE idempotency_key = ANY($1)",
                             [f"member-created-{i}" for i in ids]) == 3
    again = await api.post("members/", json={"members": [{"email": "reader0@example.com"}]})
    assert again.status_code == 422 and error_of(again)["type"] == "ValidationError"
    vips = (await api.get("members/", params={"filter": "label:vip", "order": "email asc"})).json()
    assert [m["email"] for m in vips["members"]] == ["reader0@example.com", "reader1@example.com"]
    assert vips["meta"]["pagination"]["total"] == 2
    searched = (await api.get("members/", params={"search": "reader2"})).json()["members"]
    assert [m["id"] for m in searched] == [ids[2]]
    assert (await api.get("members/", params={"search": "%"})).json()["meta"]["pagination"]["total"] == 0
    bad = await api.get("members/", params={"filter": "shoe_size:42"})
    assert bad.status_code == 422 and error_of(bad)["property"] == "filter"
    edited = one(await api.put(f"members/{ids[2]}/", json={"members": [{
        "note": "a note", "comped": True, "labels": [{"name": "Press"}]}]}), "members")
    assert edited["note"] == "a note" and edited["comped"]
    assert [label["slug"] for label in edited["labels"]] == ["press"]
    assert (await api.delete(f"members/{ids[2]}/")).status_code == 204
    gone = await api.get(f"members/{ids[2]}/")
    assert gone.status_code == 404 and error_of(gone)["type"] == "NotFoundError"


async def test_emails_read_and_retry_refusals(api, db):
    missing = await api.get("emails/nope/")
    assert missing.status_code == 404
    post_id = await db.fetchval("INSERT INTO posts (title, slug, status) VALUES ('p', 'p-retry', 'published') "
                                "RETURNING id")
    email_id = await db.fetchval("INSERT INTO emails (post_id, subject, status) VALUES ($1, 's', 'submitted') "
                                 "RETURNING id", post_id)
    read = one(await api.get(f"emails/{email_id}/"), "emails")
    assert read["status"] == "submitted" and read["subject"] == "s"
    refused = await api.post(f"emails/{email_id}/retry/")
    assert refused.status_code == 422 and "only a failed email" in error_of(refused)["message"]


async def test_members_page_deep_by_keyset_on_created_at(api, db):
    await db.execute("INSERT INTO members (email, created_at) SELECT 'k' || n || '@example.com', "
                     "'2026-01-01T00:00:00Z'::timestamptz + n * interval '1 minute' FROM generate_series(1, 7) n")
    seen, bound = [], None
    while True:
        params = {"limit": 3, "filter": "status:free" + (f"+created_at:<'{bound}'" if bound else "")}
        page = (await api.get("members/", params=params)).json()["members"]
        if not page:
            break
        seen += [m["email"] for m in page]
        bound = page[-1]["created_at"]
    assert seen == [f"k{n}@example.com" for n in range(7, 0, -1)]
    mixed = await api.get("members/", params={"filter": "status:free,label:x+created_at:<'2026-01-01T00:00:00Z'"})
    assert mixed.status_code == 422 and error_of(mixed)["property"] == "filter"


async def test_a_published_posts_newsletter_is_not_sent_by_an_edit(api, db):
    await db.execute("INSERT INTO newsletters (name, slug) VALUES ('W', 'w')")
    post_id = await db.fetchval("INSERT INTO posts (title, slug, status, published_at) "
                                "VALUES ('Out', 'out', 'published', now()) RETURNING id")
    refused = await api.put(f"posts/{post_id}/", params={"newsletter": "w"},
                            json={"posts": [{"status": "published"}]})
    assert refused.status_code == 422 and "already published" in error_of(refused)["message"]
    assert await db.fetchval("SELECT count(*) FROM emails WHERE post_id = $1", post_id) == 0


async def test_no_member_address_or_key_reaches_the_log(api, admin_key, caplog):
    import logging

    caplog.set_level(logging.DEBUG)
    address = "secret.reader@example.com"
    added = await api.post("members/", json={"members": [{"email": address, "name": "Hidden Name"}]})
    assert added.status_code == 201
    refused = await api.post("members/", json={"members": [{"email": address}]})
    assert refused.status_code == 422
    assert address not in caplog.text and "Hidden Name" not in caplog.text
    assert admin_key.split(":")[1] not in caplog.text


async def test_an_integrations_webhooks_are_added_edited_and_deleted_through_the_api(api, db):
    """The official client's `webhooks.add/edit/delete`: the webhook belongs to the integration whose key
    signed the request; its secret is kept and never shown back; a private target is refused."""
    added = await api.post("webhooks/", json={"webhooks": [{
        "event": "member.added", "target_url": "https://hooks.example.com/pressroom", "name": "CRM",
        "secret": "s3cret-for-signing"}]})
    assert added.status_code == 201, added.text
    webhook = one(added, "webhooks")
    assert (webhook["event"], webhook["target_url"], webhook["name"]) == (
        "member.added", "https://hooks.example.com/pressroom", "CRM")
    assert "secret" not in webhook and "has_secret" not in webhook
    row = await db.fetchrow("SELECT w.secret, i.name FROM webhooks w JOIN integrations i ON i.id = w.integration_id "
                            "WHERE w.id = $1", webhook["id"])
    assert (row["secret"], row["name"]) == ("s3cret-for-signing", "Tests")
    edited = await api.put(f"webhooks/{webhook['id']}/", json={"webhooks": [{"event": "member.deleted"}]})
    assert one(edited, "webhooks")["event"] == "member.deleted"
    private = await api.post("webhooks/", json={"webhooks": [{"event": "member.added",
                                                              "target_url": "https://10.0.0.7/hook"}]})
    assert private.status_code == 422 and error_of(private)["type"] == "ValidationError"
    unknown = await api.post("webhooks/", json={"webhooks": [{"event": "tag.added",
                                                              "target_url": "https://hooks.example.com/x"}]})
    assert unknown.status_code == 422 and "not one of the site's events" in error_of(unknown)["message"]
    assert (await api.delete(f"webhooks/{webhook['id']}/")).status_code == 204
    assert await db.fetchval("SELECT count(*) FROM webhooks") == 0
    gone = await api.delete(f"webhooks/{webhook['id']}/")
    assert gone.status_code == 404 and error_of(gone)["type"] == "NotFoundError"


async def test_a_posts_feature_image_and_meta_fields_are_kept_and_answered_back(api):
    fields = {"feature_image": "https://cdn.example.com/cover.jpg", "feature_image_alt": "A cover",
              "feature_image_caption": '<a href="https://example.com/">Photo</a><script>x()</script>',
              "meta_title": "For search", "meta_description": "What search engines show"}
    post = one(await api.post("posts/", json={"posts": [{"title": "Pictured", **fields}]}), "posts")
    assert {k: post[k] for k in fields} == {**fields, "feature_image_caption": post["feature_image_caption"]}
    assert "Photo" in post["feature_image_caption"] and "script" not in post["feature_image_caption"]
    read = one(await api.get(f"posts/{post['id']}/"), "posts")
    assert read["feature_image"] == fields["feature_image"] and read["meta_title"] == "For search"
    off = one(await api.put(f"posts/{post['id']}/", json={"posts": [{"feature_image": ""}]}), "posts")
    assert off["feature_image"] is None and off["meta_title"] == "For search"
    refused = await api.post("posts/", json={"posts": [{"title": "x", "feature_image": "javascript:alert(1)"}]})
    assert refused.status_code == 422 and "feature_image" in error_of(refused)["message"]


async def test_another_integrations_key_cannot_change_or_delete_a_webhook(api, admin_door, api_settings, db):
    """As the reference refuses (403 NoPermissionError): only the integration that owns a webhook may
    change or delete it; the owner still can."""
    webhook = one(await api.post("webhooks/", json={"webhooks": [{
        "event": "member.added", "target_url": "https://hooks.example.com/owned", "name": "Owned"}]}), "webhooks")
    other_key = (await add_integration("Another", settings=api_settings)).admin_api_key

    async def sign(request) -> None:
        request.headers["Authorization"] = f"Ghost {token(other_key)}"

    async with httpx.AsyncClient(base_url=admin_door.base + API, event_hooks={"request": [sign]}) as other:
        changed = await other.put(f"webhooks/{webhook['id']}/", json={"webhooks": [{
            "target_url": "https://attacker.example.com/"}]})
        deleted = await other.delete(f"webhooks/{webhook['id']}/")
        unknown = await other.delete("webhooks/no-such-webhook/")
    for refused, method in ((changed, "edit"), (deleted, "destroy")):
        assert refused.status_code == 403, refused.text
        assert error_of(refused)["type"] == "NoPermissionError"
        assert error_of(refused)["message"] == f"You do not have permission to {method} this webhook."
    assert unknown.status_code == 404 and error_of(unknown)["type"] == "NotFoundError"
    row = await db.fetchrow("SELECT target_url FROM webhooks WHERE id = $1", webhook["id"])
    assert row["target_url"] == "https://hooks.example.com/owned"
    assert (await api.put(f"webhooks/{webhook['id']}/", json={"webhooks": [{"name": "Mine"}]})).status_code == 200
    assert (await api.delete(f"webhooks/{webhook['id']}/")).status_code == 204
