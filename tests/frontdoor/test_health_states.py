"""The health page says what `pressroom check` says, word for word: a warning is `warn` on both."""

from __future__ import annotations

import re

from commands.operate import CHECK_MARKS
from frontdoor.pages import Pages
from operations.check import CheckResult, check_report
from tests.conftest import make_settings

RESULTS = [CheckResult("PostgreSQL", True, "reached"),
           CheckResult("Senders", True, "news@example.com verified; example.com publishes no DMARC record",
                       warning=True),
           CheckResult("Workers", False, "no worker is polling task queue q"),
           CheckResult("Schedules", False, "not checked", checked=False)]


def test_the_health_page_shows_the_state_the_cli_prints(postgres_url, mailgun):
    pages = Pages(None, make_settings(postgres_url, mailgun))  # type: ignore[arg-type]  # rendering only
    html = pages.templates.get_template("health.html").render(
        root="/pressroom", signed=None, csrf=None, checks=check_report(RESULTS), outbox={"counts": {}, "waiting": [],
                                                                                  "oldest_pending_seconds": None},
        refusals=[])
    shown = dict(re.findall(r'<th scope="row">([^<]+)</th><td class="[^"]*">([^<]+)</td>', html))
    printed = {r.service: re.sub(r"\[/?\w+\]", "", CHECK_MARKS[r.state]).strip() for r in RESULTS}
    assert shown == printed == {"PostgreSQL": "ok", "Senders": "warn", "Workers": "FAIL", "Schedules": "skip"}
