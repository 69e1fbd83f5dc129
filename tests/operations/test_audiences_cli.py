"""The operator's side of audiences through the real CLI: members added with labels and tiers, listed
and shown by them; a refused send's reason in `newsletter list`, `status` and `report`; the report's
left-out counts naming the filter."""

from __future__ import annotations

from tests.newsletter.conftest import seed_email
from tests.operations.test_finding import json_of
from tests.operations.test_waiting import cli, cli_env
from worker import running_worker


async def test_members_get_labels_and_tiers_and_are_found_by_them(dev_env, settings, db):
    env = cli_env(settings, dev_env)
    await db.execute("INSERT INTO products (name, slug) VALUES ('Gold', 'gold'), ('Silver', 'silver')")
    code, out, err = await cli("members", "add", "ann@example.com", "--status", "paid", "--label", "vip",
                               "--label", "press", "--tier", "gold", env=env)
    assert code == 0, err
    code, out, err = await cli("members", "add", "bob@example.com", "--label", "vip", env=env)
    assert code == 0, err
    assert await db.fetchval("SELECT count(*) FROM labels") == 2  # vip made once, on the fly

    code, _, err = await cli("members", "add", "cid@example.com", "--tier", "platinum", env=env)
    assert code == 1 and "no tier platinum" in err and len(err.strip().splitlines()) == 1
    code, _, err = await cli("members", "add", "dee@example.com", "--label", "Bad\u202eLabel", env=env)
    assert code == 1 and "the label contains a control or invisible character" in err
    assert await db.fetchval("SELECT count(*) FROM members WHERE email IN ('cid@example.com', 'dee@example.com')") == 0
    # A label by name keeps it (its slug the reference's); found again by name or slug.
    code, _, err = await cli("members", "add", "eve@example.com", "--label", "Night Owls", env=env)
    assert code == 0, err
    code, _, err = await cli("members", "update", "bob@example.com", "--label", "night owls", env=env)
    assert code == 0, err
    assert [tuple(r) for r in await db.fetch("SELECT name, slug FROM labels WHERE slug = 'night-owls'")] == \
        [("Night Owls", "night-owls")]

    vip = await json_of("members", "list", "--label", "vip", env=env)
    assert {m["email"] for m in vip["items"]} == {"ann@example.com", "bob@example.com"}
    gold = await json_of("members", "list", "--label", "vip", "--tier", "gold", env=env)
    assert [m["email"] for m in gold["items"]] == ["ann@example.com"]
    await db.execute("UPDATE members_products SET expiry_at = now() - interval '1 day'")
    assert (await json_of("members", "list", "--tier", "gold", env=env))["items"] == []
    code, out, err = await cli("members", "list", "--label", "press", env=env)
    assert code == 0 and "ann@example.com" in out and "bob@example.com" not in out, err
    code, _, err = await cli("members", "list", "--tier", "bronze", env=env)
    assert code == 1 and "no tier has that slug" in err

    profile = await json_of("members", "show", "ann@example.com", env=env)
    assert profile["labels"] == ["press", "vip"]
    assert [(t["slug"], t["expired"]) for t in profile["tiers"]] == [("gold", True)]
    code, out, err = await cli("members", "show", "ann@example.com", env=env)
    assert code == 0 and "labels: press, vip; tiers: gold (ended " in out, err


async def test_a_refused_send_says_why_in_list_status_and_report(dev_env, settings, db, mailgun):
    env = cli_env(settings, dev_env)
    seeded = await seed_email(db, members=4, recipient_filter="label:vip+tier:gold")
    async with running_worker(dev_env.client, settings):
        code, out, err = await cli("newsletter", "send", seeded.email_id, "--wait", env=env)
    assert code == 1 and "names no label vip; no tier gold" in err, err
    listed = await json_of("newsletter", "list", env=env)
    [email] = [e for e in listed["items"] if e["email_id"] == seeded.email_id]
    assert email["status"] == "failed" and "names no label vip; no tier gold" in email["error"]
    code, out, err = await cli("newsletter", "list", env=env)
    assert code == 0 and "names no label vip" in out, err
    code, out, err = await cli("newsletter", "status", seeded.email_id, env=env)
    assert code == 0 and f"email {seeded.email_id}: failed — " in out and "names no label vip" in out, err
    code, out, err = await cli("newsletter", "report", seeded.email_id, env=env)
    assert code == 0 and "why: " in out and "names no label vip" in out, err
    assert mailgun.messages == []


async def test_the_report_counts_those_outside_a_label_filter(dev_env, settings, db, mailgun):
    env = cli_env(settings, dev_env)
    seeded = await seed_email(db, members=6, recipient_filter="label:vip,status:paid", paid_every=3)
    await db.execute("INSERT INTO labels (name, slug) VALUES ('VIP', 'vip')")
    await db.execute("INSERT INTO members_labels (member_id, label_id) SELECT m.id, l.id FROM members m, labels l "
                     "WHERE m.email LIKE 'm1-%'")
    async with running_worker(dev_env.client, settings):
        code, out, err = await cli("newsletter", "send", seeded.email_id, "--wait", env=env)
    assert code == 0 and "submitted" in out, err
    report = await json_of("newsletter", "report", seeded.email_id, env=env)
    assert report["recipients"] == 3 and report["left_out"]["not-in-filter"] == 3  # m1 (vip), m3 and m6 (paid)
    code, out, err = await cli("newsletter", "report", seeded.email_id, env=env)
    assert code == 0 and "filter label:vip,status:paid" in out and "not in the email's filter" in out, err


async def test_the_demo_site_has_labels_and_tiers_to_filter_by(db):
    from operations.demo_site import seed_site

    for run_tag in ("one", "two"):  # safe to seed again: nothing given twice
        await seed_site(db, members=100, run_tag=run_tag)
    given = {r["slug"]: r["n"] for r in await db.fetch(
        "SELECT l.slug, count(*) AS n FROM members_labels ml JOIN labels l ON l.id = ml.label_id GROUP BY 1")}
    assert given == {"press": 4, "beta": 14}  # readers 25, 50, 75, 100; and the multiples of 7
    tiers = {r["slug"]: r["n"] for r in await db.fetch(
        "SELECT p.slug, count(*) AS n FROM members_products mp JOIN products p ON p.id = mp.product_id GROUP BY 1")}
    assert tiers == {"supporter": 10, "patron": 5}
