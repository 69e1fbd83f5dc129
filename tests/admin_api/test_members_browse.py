"""The members browse at scale keeps the reference's answers: a filter's total and where each page
began are reused for a few seconds (frontdoor/admin_api/recent.py), never past a change made
through the API, and a change made elsewhere shows within those seconds; `page=N` read from a
page start it learned gives the rows OFFSET gives."""

from __future__ import annotations

import asyncio
import time

from frontdoor.admin_api.recent import SECONDS

LABELLED = 24  # of 30 members; created a minute apart, some at the same instant (ties broken by id)


async def seed(db) -> None:
    await db.execute("INSERT INTO labels (name, slug) VALUES ('VIP', 'vip'), ('Press', 'press')")
    await db.execute(
        "INSERT INTO members (id, email, created_at) SELECT 'm' || lpad(n::text, 2, '0'), 'b' || n || '@example.com', "
        "'2026-01-01T00:00:00Z'::timestamptz + (n / 3) * interval '1 minute' FROM generate_series(1, 30) n")
    await db.execute("INSERT INTO members_labels (member_id, label_id) SELECT m.id, l.id FROM members m, labels l "
                     "WHERE l.slug = 'vip' AND right(m.id, 1) NOT IN ('3', '7') "
                     "UNION ALL SELECT m.id, l.id FROM members m, labels l WHERE l.slug = 'press' AND m.id < 'm05'")


async def expected(db, order: str) -> list[str]:
    return [r["id"] for r in await db.fetch(
        "SELECT m.id FROM members m JOIN members_labels ml ON ml.member_id = m.id JOIN labels l ON l.id = ml.label_id "
        f"WHERE l.slug = 'vip' ORDER BY m.created_at {order}, m.id DESC")]


async def pages_of(api, params: dict, pages: list[int]) -> list[str]:
    seen = []
    for page in pages:
        body = (await api.get("members/", params={**params, "page": page})).json()
        assert body["meta"]["pagination"]["total"] == LABELLED
        seen += [m["id"] for m in body["members"]]
    return seen


async def test_pages_read_from_learned_starts_equal_offset_pages_in_either_order(api, db):
    await seed(db)
    for order in ("desc", "asc"):
        params = {"filter": "label:vip", "limit": 4, "order": f"created_at {order}"}
        rows = await expected(db, order)
        # In order (each page's start learned from the page before), again (from its own start),
        # then backwards and skipping (some from OFFSET): the same rows each time.
        assert await pages_of(api, params, [1, 2, 3, 4, 5, 6]) == rows
        assert await pages_of(api, params, [1, 2, 3, 4, 5, 6]) == rows
        assert await pages_of(api, params, [6, 4, 5, 2, 3, 1]) == rows[20:] + rows[12:20] + rows[4:12] + rows[:4]
        assert (await api.get("members/", params={**params, "page": 7})).json()["members"] == []


async def test_totals_by_the_labels_index_equal_the_members_counted(api, db):
    await seed(db)
    bound = "2026-01-01T00:05:00Z"
    for text, sql in [
            ("label:vip", "SELECT count(*) FROM members_labels ml JOIN labels l ON l.id = ml.label_id "
                          "WHERE l.slug = 'vip'"),
            ("label:[vip,press]", "SELECT count(DISTINCT member_id) FROM members_labels"),
            (f"label:vip+created_at:<'{bound}'",
             "SELECT count(*) FROM members m JOIN members_labels ml ON ml.member_id = m.id JOIN labels l "
             f"ON l.id = ml.label_id WHERE l.slug = 'vip' AND m.created_at < '{bound}'"),
            (f"label:vip+created_at:>='{bound}'+created_at:<'2026-01-01T00:08:00Z'",
             "SELECT count(*) FROM members m JOIN members_labels ml ON ml.member_id = m.id JOIN labels l "
             f"ON l.id = ml.label_id WHERE l.slug = 'vip' AND m.created_at >= '{bound}' "
             "AND m.created_at < '2026-01-01T00:08:00Z'"),
            ("label:-vip", "SELECT count(*) FROM members WHERE right(id, 1) IN ('3', '7')")]:
        answer = (await api.get("members/", params={"filter": text, "limit": 2})).json()
        assert "meta" in answer, (text, answer)
        assert answer["meta"]["pagination"]["total"] == await db.fetchval(sql) > 0, text
        assert answer["meta"]["pagination"]["pages"] == (answer["meta"]["pagination"]["total"] + 1) // 2


async def test_a_change_through_the_api_shows_at_once_and_one_made_elsewhere_within_seconds(api, db):
    await seed(db)
    params = {"filter": "label:vip", "limit": 4}
    first = (await api.get("members/", params=params)).json()
    assert first["meta"]["pagination"]["total"] == LABELLED
    added = await api.post("members/", json={"members": [{"email": "new@example.com", "labels": ["VIP"]}]})
    assert added.status_code == 201, added.text
    now = (await api.get("members/", params=params)).json()
    assert now["meta"]["pagination"]["total"] == LABELLED + 1
    assert now["members"][0]["email"] == "new@example.com"  # the newest: page 1's learned start not reused

    await db.execute("DELETE FROM members WHERE email = 'new@example.com'")
    began = time.monotonic()
    while (await api.get("members/", params=params)).json()["meta"]["pagination"]["total"] != LABELLED:
        assert time.monotonic() - began < SECONDS + 30, "a change made elsewhere never showed"
        await asyncio.sleep(0.2)
