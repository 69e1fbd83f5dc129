"""Every command against every failure an operator meets: one line, the right exit status, nothing written.

Each command runs as a real process with each service it uses stopped (its address points at a port
nothing listens on), with each bad setting, and with each bad value; the database is compared
before and after, table by table.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from devstack.servers import free_port
from tests.conftest import TEST_LINK_SECRET
from tests.foundation.test_cli import pressroom
from tests.newsletter.conftest import seed_email

LONG = "x" * 100_000  # near the longest single argument Linux passes (128 KiB)


async def snapshot(db) -> dict[str, str]:
    """Every table's rows, as one digest per table."""
    tables = [r["tablename"] for r in await db.fetch(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")]
    return {table: await db.fetchval(f'SELECT md5(coalesce(string_agg(t::text, \'|\' ORDER BY t::text), \'\')) '
                                     f'FROM "{table}" t') for table in tables}


@pytest.fixture
async def site(db, postgres_url, dev_env, mailgun):
    """A draft post, a scheduled post, a pending email and an aborted outbox entry; the services' addresses."""
    seeded = await seed_email(db, members=3)
    draft = await db.fetchval("INSERT INTO posts (title, slug) VALUES ('Draft', 'draft') RETURNING id")
    scheduled = await db.fetchval("INSERT INTO posts (title, slug, status, published_at) VALUES "
                                  "('Later', 'later', 'scheduled', now() + interval '1 day') RETURNING id")
    outbox = await db.fetchval("INSERT INTO outbox (event_type, payload, idempotency_key, payload_digest, status) "
                               "VALUES ('NoopEvent', '{}', 'walk', 'd', 'aborted') RETURNING id")
    env = {"DATABASE_URL": postgres_url, "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
           "MAILGUN_BASE_URL": mailgun.base_url, "MAILGUN_API_KEY": mailgun.api_key,
           "MAILGUN_DOMAIN": mailgun.domain, "PRESSROOM_TASK_QUEUE": f"walk-{free_port()}",
           "PRESSROOM_MEMBERS_LINK_SECRET": TEST_LINK_SECRET}
    return {"email": seeded.email_id, "draft": draft, "scheduled": scheduled, "outbox": outbox, "env": env}


def soon(hours: float) -> str:
    return (datetime.now(UTC) + timedelta(hours=hours)).isoformat()


# Each command with the services it reaches.
COMMANDS = [
    (["migrate"], {"postgres"}),
    (["worker"], {"postgres", "temporal"}),
    (["newsletter", "send", "{email}"], {"postgres", "temporal"}),
    (["members", "add", "walk@example.com", "--name", "Walk"], {"postgres"}),
    (["outbox", "status"], {"postgres"}),
    (["outbox", "show", "{outbox}"], {"postgres"}),
    (["outbox", "requeue", "{outbox}"], {"postgres", "temporal"}),
    (["analytics", "schedule"], {"temporal"}),
    (["analytics", "run"], {"temporal"}),
    (["analytics", "pause"], {"temporal"}),
    (["analytics", "unpause"], {"temporal"}),
    (["analytics", "status"], {"temporal"}),
    (["analytics", "backfill", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-02T00:00:00Z"], {"postgres"}),
    (["posts", "schedule", "{draft}", "--at", "{soon}"], {"postgres", "temporal"}),
    (["posts", "unschedule", "{scheduled}"], {"postgres", "temporal"}),
    (["posts", "reconcile"], {"postgres", "temporal"}),
    (["check"], {"postgres", "temporal", "mailgun"}),
    (["temporal", "setup"], {"temporal"}),
]
STOPPED = {"postgres": lambda port: {"DATABASE_URL": f"postgresql://pressroom:pw@127.0.0.1:{port}/pressroom"},
           "temporal": lambda port: {"TEMPORAL_ADDRESS": f"127.0.0.1:{port}"},
           "mailgun": lambda port: {"MAILGUN_BASE_URL": f"http://127.0.0.1:{port}"}}
STOPPED_WORDS = {"postgres": "PostgreSQL", "temporal": "Temporal", "mailgun": "Mailgun"}

# (setting, value, command, words in the line[, other settings])
BAD_SETTINGS = [
    ("PRESSROOM_TASK_QUEUE", "", ["posts", "schedule", "{draft}", "--at", "{soon}"],
     "PRESSROOM_TASK_QUEUE is invalid: is empty"),
    ("PRESSROOM_TASK_QUEUE", "", ["worker"], "PRESSROOM_TASK_QUEUE is invalid: is empty"),
    ("TEMPORAL_NAMESPACE", "no-such-namespace", ["posts", "schedule", "{draft}", "--at", "{soon}"],
     "Namespace no-such-namespace is not found"),
    ("TEMPORAL_NAMESPACE", "no-such-namespace", ["posts", "unschedule", "{scheduled}"],
     "check TEMPORAL_NAMESPACE"),
    ("TEMPORAL_NAMESPACE", "no-such-namespace", ["newsletter", "send", "{email}"], "check TEMPORAL_NAMESPACE"),
    ("TEMPORAL_NAMESPACE", "no-such-namespace", ["analytics", "schedule"], "check TEMPORAL_NAMESPACE"),
    ("TEMPORAL_NAMESPACE", "no-such-namespace", ["worker"], "no-such-namespace"),
    ("TEMPORAL_NAMESPACE", "no-such-namespace", ["check"], "Temporal is not ready"),
    ("TEMPORAL_NAMESPACE", "", ["temporal", "setup"], "TEMPORAL_NAMESPACE is invalid: is empty"),
    ("TEMPORAL_ADDRESS", "127.0.0.1:99999", ["posts", "reconcile"], "port 99999 is out of range"),
    ("TEMPORAL_ADDRESS", "no-port", ["temporal", "setup"], "TEMPORAL_ADDRESS is invalid"),
    ("TEMPORAL_TLS_CERT", "/no/such/cert.pem", ["temporal", "setup"], "TEMPORAL_TLS_KEY is not set"),
    ("TEMPORAL_TLS_CERT", "/no/such/cert.pem", ["posts", "schedule", "{draft}", "--at", "{soon}"],
     "TEMPORAL_TLS_CERT '/no/such/cert.pem' cannot be read: No such file", {"TEMPORAL_TLS_KEY": "/no/such/key.pem"}),
    ("DATABASE_URL", "", ["outbox", "status"], "DATABASE_URL is set but empty"),
    ("DATABASE_URL", "mysql://localhost/x", ["members", "add", "walk@example.com"], "DATABASE_URL is invalid"),
]

# (command, words in the line)
BAD_VALUES = [
    (["posts", "schedule", "{draft}", "--at", "0001-01-01T00:00:00+01:00"], "is before 2000-01-01"),
    (["posts", "schedule", "{draft}", "--at", "2026-12-01T09:00:00"], "needs a UTC offset"),
    (["posts", "schedule", "{draft}", "--at", "2206-01-01T00:00:00Z"], "is after 2099"),
    (["posts", "schedule", "", "--at", "{soon}"], "the post id is empty"),
    (["posts", "schedule", LONG, "--at", "{soon}"], "100,000 characters long"),
    (["posts", "unschedule", " "], "the post id is empty"),
    (["newsletter", "send", ""], "the email id is empty"),
    (["outbox", "show", ""], "the outbox entry id is empty"),
    (["outbox", "requeue", LONG], "100,000 characters long"),
    (["members", "add", "a b@example.com"], "is not an e-mail address"),
    (["members", "add", "a\x01b@example.com"], "is not an e-mail address"),
    (["members", "add", LONG + "@example.com"], "at most 191"),
    (["members", "add", "walk@example.com", "--name", LONG], "the name is 100,000 characters long"),
    (["members", "add", "walk@example.com", "--name", "Bell\x07"], "control or invisible character"),
    (["analytics", "backfill", "--from", "{soon}", "--to", "{later}"], "in the future"),
    (["analytics", "backfill", "--from", LONG, "--to", "{later}"], "is not an ISO 8601 time"),
]

USAGE_ERRORS = [["posts", "schedule", "{draft}"], ["posts", "publish"], ["members", "add"],
                ["analytics", "backfill", "--from", "2026-01-01T00:00:00Z"]]


def fill(args: list[str], site: dict) -> list[str]:
    values = {**{k: v for k, v in site.items() if isinstance(v, str)}, "soon": soon(1), "later": soon(2)}
    return [arg.format(**values) if "{" in arg and len(arg) < 100 else arg for arg in args]


def run_all(cases: list[tuple[list[str], dict[str, str]]]):
    """Four at a time: the command line's start-up dominates each case."""
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda case: pressroom(*case[0], env=case[1], timeout=300), cases))


def assert_one_line(result, status: int, *words: str, case) -> None:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == status, (case, result.returncode, result.stderr[-2000:])
    assert len(lines) == 1 and "Traceback" not in result.stderr, (case, result.stderr[-2000:])
    assert len(lines[0]) < 400, (case, "the line is not shortened", len(lines[0]))
    for word in words:
        assert word in lines[0], (case, word, lines[0])


async def test_every_command_with_each_of_its_services_stopped(db, site):
    import asyncio

    before = await snapshot(db)
    cases, expected = [], []
    for args, services in COMMANDS:
        for service in sorted(services):
            env = {**site["env"], **STOPPED[service](free_port())}
            cases.append((fill(args, site), env))
            expected.append((args, service))
    results = await asyncio.to_thread(run_all, cases)
    for (args, service), result in zip(expected, results, strict=True):
        assert_one_line(result, 1, STOPPED_WORDS[service] if args != ["check"] else "not ready",
                        case=(args, service))
        assert "pw" not in result.stderr.replace("PostgreSQL", "")
    assert await snapshot(db) == before


async def test_each_bad_setting_is_one_line_and_writes_nothing(db, site):
    import asyncio

    before = await snapshot(db)
    cases = [(fill(case[2], site), {**site["env"], case[0]: case[1], **(case[4] if len(case) > 4 else {})})
             for case in BAD_SETTINGS]
    results = await asyncio.to_thread(run_all, cases)
    for (variable, value, args, words, *_), result in zip(BAD_SETTINGS, results, strict=True):
        assert_one_line(result, 1, words, case=(variable, value, args))
    assert await snapshot(db) == before


async def test_each_bad_value_is_one_line_shortened_and_writes_nothing(db, site):
    import asyncio

    before = await snapshot(db)
    results = await asyncio.to_thread(run_all, [(fill(args, site), site["env"]) for args, _ in BAD_VALUES])
    for (args, words), result in zip(BAD_VALUES, results, strict=True):
        assert_one_line(result, 1, words, case=[a[:40] for a in args])
    usage = await asyncio.to_thread(run_all, [(fill(args, site), site["env"]) for args in USAGE_ERRORS])
    for args, result in zip(USAGE_ERRORS, usage, strict=True):
        assert_one_line(result, 2, "--help", case=args)
    assert await snapshot(db) == before
