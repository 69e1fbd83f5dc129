"""Authoring from the CLI: newsletters, posts from Markdown or HTML with their email, integrations'
keys, and a failed email corrected and sent again; each through the operation the Admin API calls."""

from __future__ import annotations

import json
import os
import re

import pytest

from operations.authoring import post_html
from pressroom.errors import BadInput
from tests.conftest import make_settings
from tests.foundation.test_cli import assert_one_line_error, pressroom
from tests.newsletter.test_failures import wait_until
from tests.newsletter.test_send import delivered
from worker import running_worker


def test_markdown_is_rendered_with_its_raw_html_escaped_and_html_is_sanitised():
    rendered = post_html(markdown="# Title\n\nSome *words* <script>alert(1)</script>\n\n<!--members-only-->\n\nmore")
    assert "<h1>Title</h1>" in rendered and "<em>words</em>" in rendered
    assert "<script>" not in rendered and "&lt;script&gt;" in rendered
    assert "<!--members-only-->" in rendered
    cleaned = post_html(html='<p style="x" onmouseover="y">a <a href="javascript:go()">b</a> '
                             '<a href="https://example.com/">c</a> %recipient.name% {first_name}</p><iframe></iframe>')
    assert "onmouseover" not in cleaned and "javascript" not in cleaned and "iframe" not in cleaned
    assert 'href="https://example.com/"' in cleaned and "%recipient.name%" in cleaned and "{first_name}" in cleaned
    with pytest.raises(BadInput):
        post_html()
    with pytest.raises(BadInput):
        post_html(html="<p/>", markdown="x")


@pytest.fixture
def env(settings) -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": settings.database_url}


def run_json(*args: str, env: dict[str, str]):
    done = pressroom(*args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_newsletters_add_list_and_edit(env, db):
    added = run_json("newsletters", "add", "The Morning Brief", "--sender-name", "Desk", env=env)
    assert added["slug"] == "the-morning-brief" and added["subscribe_on_signup"] is True
    assert [n["slug"] for n in run_json("newsletters", "list", env=env)] == ["the-morning-brief"]
    edited = run_json("newsletters", "edit", "the-morning-brief", "--name", "Brief", "--no-subscribe-on-signup",
                      env=env)
    assert edited["name"] == "Brief" and edited["subscribe_on_signup"] is False
    taken = pressroom("newsletters", "add", "Other", "--slug", "the-morning-brief", env=env)
    assert_one_line_error(taken, "already exists")


async def test_posts_add_from_markdown_with_an_email_for_a_label_then_edit_and_delete(env, db, tmp_path):
    run_json("newsletters", "add", "Weekly", env=env)
    source = tmp_path / "post.md"
    source.write_text("Hello **readers**\n\n<img src=x onerror=alert(1)>\n")
    post = run_json("posts", "add", "--title", "Hello", "--markdown", str(source), "--newsletter", "weekly",
                    "--segment", "label:vip", env=env)
    assert post["status"] == "draft" and "<strong>readers</strong>" in post["html"] and "<img" not in post["html"]
    email = await db.fetchrow("SELECT status, recipient_filter, subject FROM emails WHERE id = $1", post["email_id"])
    assert dict(email) == {"status": "pending", "recipient_filter": "label:vip", "subject": "Hello"}
    refused = pressroom("posts", "edit", post["id"], "--segment", "label:(", "--title", "Changed", env=env)
    assert_one_line_error(refused, "not a recipient filter")
    assert await db.fetchval("SELECT title FROM posts WHERE id = $1", post["id"]) == "Hello"  # nothing written
    edited = run_json("posts", "edit", post["id"], "--title", "Hello again", "--segment", "status:free", env=env)
    assert edited["title"] == "Hello again" and edited["email_segment"] == "status:free"
    assert await db.fetchval("SELECT subject FROM emails WHERE post_id = $1", post["id"]) == "Hello again"
    neither = pressroom("posts", "add", "--title", "Empty", "--status", "scheduled", env=env)
    assert_one_line_error(neither, "needs its time")
    deleted = pressroom("posts", "delete", post["id"], env=env)
    assert deleted.returncode == 0, deleted.stderr
    assert await db.fetchval("SELECT count(*) FROM emails WHERE post_id = $1", post["id"]) == 0


async def test_integrations_add_list_remove(env, db):
    added = run_json("integrations", "add", "Zapier", env=env)
    assert added["name"] == "Zapier" and re.fullmatch(r"[0-9a-f]{24}:[0-9a-f]{64}", added["admin_api_key"])
    listed = run_json("integrations", "list", env=env)
    assert [(i["name"], i["slug"], i["key_id"]) for i in listed] == \
        [("Zapier", "zapier", added["admin_api_key"].split(":")[0])]
    assert added["slug"] == "zapier"
    # The text names the slug `integrations webhooks add --integration` takes, as --json does.
    shown = pressroom("integrations", "list", env=env)
    assert shown.returncode == 0 and "Zapier  slug zapier  key " in shown.stdout, shown.stderr
    assert added["admin_api_key"].split(":")[1] not in json.dumps(listed)  # the secret is shown once
    assert_one_line_error(pressroom("integrations", "add", "zapier", env=env), "already exists")
    assert pressroom("integrations", "remove", "Zapier", env=env).returncode == 0
    assert await db.fetchval("SELECT count(*) FROM api_keys") == 0


async def test_a_failed_email_corrected_and_sent_again(db, mailgun, dev_env, postgres_url):
    """An email that failed for a filter naming a label nobody has is corrected to the right label
    and subject, and sent again: to that label's members only, each once."""
    settings = make_settings(postgres_url, mailgun)
    newsletter_id = await db.fetchval("INSERT INTO newsletters (name, slug) VALUES ('N', 'n') RETURNING id")
    await db.execute("INSERT INTO labels (name, slug) VALUES ('VIP', 'vip')")
    members = {}
    for name in ("ana", "bo", "cy"):
        members[name] = await db.fetchval("INSERT INTO members (email, name) VALUES ($1, $2) RETURNING id",
                                          f"{name}@example.com", name)
        await db.execute("INSERT INTO members_newsletters (member_id, newsletter_id) VALUES ($1, $2)",
                         members[name], newsletter_id)
    await db.execute("INSERT INTO members_labels (member_id, label_id) SELECT unnest($1::text[]), id FROM labels",
                     [members["ana"], members["bo"]])
    post_id = await db.fetchval("INSERT INTO posts (title, slug, html, status, newsletter_id, publish_completed_at) "
                                "VALUES ('P', 'p', '<p>hi</p>', 'published', $1, now()) RETURNING id", newsletter_id)
    email_id = await db.fetchval(
        "INSERT INTO emails (post_id, newsletter_id, subject, recipient_filter, status, error) "
        "VALUES ($1, $2, 'Tpyo', 'label:vipp', 'failed', 'no label vipp') RETURNING id", post_id, newsletter_id)
    env = {**os.environ, "DATABASE_URL": settings.database_url,
           "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
           "PRESSROOM_TASK_QUEUE": settings.task_queue, "PRESSROOM_MEMBERS_LINK_SECRET": "test-members-link-secret"}
    bad = pressroom("newsletter", "retry", email_id, "--filter", "label:[", env=env)
    assert_one_line_error(bad, "not a recipient filter")
    async with running_worker(dev_env.client, settings):
        done = pressroom("newsletter", "retry", email_id, "--filter", "label:vip", "--subject", "Typo fixed", env=env)
        assert done.returncode == 0, done.stderr

        async def submitted() -> bool:
            return await db.fetchval("SELECT status = 'submitted' FROM emails WHERE id = $1", email_id)
        await wait_until(submitted, timeout=120)
    assert delivered(mailgun, email_id) == {"ana@example.com": 1, "bo@example.com": 1}
    assert {m.subject for m in mailgun.messages_for(email_id)} == {"Typo fixed"}
    again = pressroom("newsletter", "retry", email_id, env=env)
    assert_one_line_error(again, "only a failed email is sent again")


async def test_a_published_post_is_unpublished_but_not_while_its_email_is_sending(env, db):
    post = await db.fetchval("INSERT INTO posts (title, slug, html, plaintext, status, published_at) VALUES "
                             "('Out', 'out', '<p>x</p>', 'x', 'published', now()) RETURNING id")
    email = await db.fetchval("INSERT INTO emails (post_id, subject, status, locked_by) "
                              "VALUES ($1, 'Out', 'submitting', 'a-run') RETURNING id", post)
    refused = pressroom("posts", "edit", post, "--status", "draft", env=env)
    assert_one_line_error(refused, f"email {email} sending; cancel it first")
    assert await db.fetchval("SELECT status FROM posts WHERE id = $1", post) == "published"
    await db.execute("UPDATE emails SET status = 'submitted' WHERE id = $1", email)
    unpublished = run_json("posts", "edit", post, "--status", "draft", env=env)
    assert unpublished["status"] == "draft"
    assert await db.fetchval("SELECT status FROM emails WHERE id = $1", email) == "submitted", "its record stays"


async def test_posts_add_from_lexical_keeps_the_document_and_its_email_reads_the_email_rendering(env, db, tmp_path,
                                                                                                settings):
    from activities.email_content import load_email
    from tests.authoring import mobiledoc_documents
    from tests.authoring.lexical_documents import every_card

    run_json("newsletters", "add", "Weekly", env=env)
    source = tmp_path / "post.json"
    source.write_text(every_card())
    post = run_json("posts", "add", "--title", "Cards", "--lexical", str(source), "--newsletter", "weekly", env=env)
    assert "Only in the email" not in post["html"] and post["lexical"] == every_card()
    loaded = await load_email(db, post["email_id"], settings)
    assert loaded is not None and "Only in the email" in loaded.content.html  # the email's rendering, not the web's
    assert "kg-bookmark-container" in loaded.content.html
    source.write_text(every_card().replace('"type": "toggle"', '"type": "transistor"'))
    refused = pressroom("posts", "edit", post["id"], "--lexical", str(source), env=env)
    assert_one_line_error(refused, "'transistor' is not one Pressroom can render")
    both = pressroom("posts", "edit", post["id"], "--lexical", str(source), "--html", str(source), env=env)
    assert_one_line_error(both, "one of the four")
    older = tmp_path / "older.json"
    older.write_text(mobiledoc_documents.every_card())
    edited = run_json("posts", "edit", post["id"], "--mobiledoc", str(older), env=env)
    assert edited["lexical"] is None and edited["mobiledoc"] == mobiledoc_documents.every_card()
    assert "Only in the email" in (await load_email(db, post["email_id"], settings)).content.html
    html = tmp_path / "post.html"
    html.write_text("<p>Plain again</p>")
    plain = run_json("posts", "edit", post["id"], "--html", str(html), env=env)
    assert plain["lexical"] is None and plain["mobiledoc"] is None
    assert await db.fetchval("SELECT email_html FROM posts WHERE id = $1", post["id"]) == ""
