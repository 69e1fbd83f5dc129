"""The dashboard shows the clicks `newsletter report` prints: the report's figures and links, and the
list's click rate (the page's HTML; tests/frontdoor/test_dashboard.py drives the browser)."""

from __future__ import annotations

import json
import re

import httpx

from operations.staff import add_staff
from tests.analytics.conftest import seed_newsletter
from tests.frontdoor.test_dashboard_guard import EDITOR, PASSWORD, signed_in
from tests.operations.test_waiting import cli, cli_env


def shown(html: str, attribute: str, key: str) -> str:
    return re.search(rf'{attribute}="{key}"[^>]*>([^<]*)<', html).group(1)


async def test_the_report_and_the_list_show_the_clicks_the_cli_prints(db, front_door, dev_env):
    await add_staff(EDITOR, PASSWORD, settings=front_door.settings)
    await seed_newsletter(db, members=10, emails=1)
    await db.execute("UPDATE email_recipients SET delivered_at = now() WHERE substr(member_id, 2)::int < 8")
    await db.execute("UPDATE emails SET email_count = 10, delivered_count = 8 WHERE id = 'e0'")
    await db.execute("""INSERT INTO redirects (id, "from", "to", post_id) VALUES
                        ('r1', '/r/1', 'https://example.org/a', 'p0'), ('r2', '/r/2', 'https://example.org/b', 'p0')""")
    # m0 clicks twice, m1 once, m2 on the other link; a scanner's request counts apart.
    await db.execute("INSERT INTO members_click_events (id, member_id, redirect_id, scanner) VALUES "
                     "('c1', 'm0', 'r1', NULL), ('c2', 'm0', 'r1', NULL), ('c3', 'm1', 'r1', NULL), "
                     "('c4', 'm2', 'r2', NULL), ('c5', 'm3', 'r2', 'user-agent')")
    code, out, err = await cli("newsletter", "report", "e0", "--json", env=cli_env(front_door.settings, dev_env))
    assert code == 0, err
    printed = json.loads(out)["clicks"]
    assert printed["clicked"] == 3 and printed["rate"] == 37.5

    async with httpx.AsyncClient(base_url=front_door.base) as http:
        await signed_in(http)
        report = (await http.get("/pressroom/emails/e0")).text
        listed = (await http.get("/pressroom/newsletters")).text
    assert shown(report, "data-figure", "clicked") == f"{printed['clicked']:,}"
    assert shown(report, "data-figure", "clicks") == f"{printed['clicks']:,}"
    assert shown(report, "data-rate", "clicked") == f"{printed['rate']:.1f}%"
    for link in printed["top_links"]:
        assert re.search(rf'>{re.escape(link["target"])}</td><td class="n">{link["clickers"]}</td>'
                         rf'<td class="n">{link["clicks"]}</td>', report), link
    assert "1 request (1 by user-agent)" in report
    assert shown(listed, "data-click-rate", "e0") == f"{printed['rate']:.1f}%"


async def test_the_report_says_a_failure_code_once(db, front_door):
    await add_staff(EDITOR, PASSWORD, settings=front_door.settings)
    await seed_newsletter(db, members=2, emails=1)
    await db.execute("INSERT INTO email_recipient_failures (email_id, member_id, email_recipient_id, code, "
                     "enhanced_code, message, severity, failed_at, event_id) SELECT 'e0', member_id, id, 452, "
                     "'4.2.2', '4.2.2 The email account is over quota', 'temporary', now(), 'ev1' "
                     "FROM email_recipients WHERE member_id = 'm0'")
    async with httpx.AsyncClient(base_url=front_door.base) as http:
        await signed_in(http)
        report = (await http.get("/pressroom/emails/e0")).text
    assert re.search(r"<span data-failure>([^<]*)</span>", report).group(1) == \
        "452 4.2.2 The email account is over quota"
