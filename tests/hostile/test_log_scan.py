"""The log scan: a send that fails, look-ups of uncertain sends, a retry and welcome emails, all
with hostile member data, and not one address, name or key in anything the worker or the command
line writes — plain, percent-encoded or base64.

The worker runs as `pressroom worker` does, in its own process, with every logger at DEBUG (the
libraries' too: httpx then logs each request URL, look-ups' recipients in their query strings), so
the mask, not the log level, is what is tested.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote, quote_plus

import httpx
import pytest

from devstack.servers import free_port
from tests.conftest import SIMULATOR_KEY
from tests.hostile.corpus import NAMES, STRANGE_ADDRESSES, UNUSABLE_ADDRESSES
from tests.newsletter.conftest import seed_email
from tests.newsletter.test_failures import wait_until
from tests.operations.test_waiting import cli, cli_env

ROOT = Path(__file__).resolve().parents[2]
WELCOME = ("INSERT INTO automated_emails (name, slug, subject, html) VALUES "
           "('Welcome', 'member-welcome-email-free', 'Welcome, %recipient.name%', '<p>Hello %recipient.name%</p>')")


def accepted(name: str) -> bool:
    """Whether `members add` takes the name (pressroom.inputs.free_text)."""
    return len(name) <= 191 and name.isprintable()


def encodings(value: str) -> set[str]:
    """The forms a value may take in a URL, a token or a header."""
    forms = {value, quote(value), quote(value, safe=""), quote_plus(value)}
    local, at, domain = value.rpartition("@")
    if at and not domain.isascii():
        forms.add(f"{local}@{domain.encode('idna').decode()}")
    for form in list(forms):
        raw = form.encode()
        forms |= {base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode(),
                  base64.urlsafe_b64encode(raw).decode().rstrip("=")}
    return forms


def leaks(output: str, secrets: dict[str, str]) -> list[str]:
    """Each secret (by its label) found in the output, with the line it is on."""
    found = []
    for label, secret in secrets.items():
        for form in encodings(secret):
            at = output.find(form)
            if at >= 0:
                line = output[output.rfind("\n", 0, at) + 1:output.find("\n", at)]
                found.append(f"{label} as {form[:40]!r}: {line[:300]}")
    return found


@pytest.mark.slow
async def test_no_address_name_or_key_in_any_output(db, mailgun, dev_env, newsletter_settings):
    settings = newsletter_settings(batch_size=10)
    seeded = await seed_email(db, members=30)
    await db.execute(WELCOME)
    # Subscribers as an import stores them: hostile names on strange and unusable addresses.
    hostile = {**STRANGE_ADDRESSES, **{k: v for k, v in UNUSABLE_ADDRESSES.items() if k != "nul"}}
    names = list(NAMES.values())
    await db.execute(
        """WITH added AS (INSERT INTO members (email, name, created_at)
                          SELECT a, n, now() - interval '1 hour' FROM unnest($1::text[], $2::text[]) AS h (a, n)
                          RETURNING id)
           INSERT INTO members_newsletters (member_id, newsletter_id) SELECT id, $3 FROM added""",
        list(hostile.values()), [names[i % len(names)] for i in range(len(hostile))], seeded.newsletter_id)

    metrics_port = free_port()
    env = cli_env(settings, dev_env, PRESSROOM_PROVIDER_RETRIES="1", PRESSROOM_PROVIDER_RETRY_SECONDS="0.5",
                  PRESSROOM_BATCH_SIZE=str(settings.batch_size),
                  PRESSROOM_SEND_CONFIRM_WINDOW_SECONDS=str(settings.send_confirm_window_seconds),
                  PRESSROOM_SEND_CONFIRM_POLL_SECONDS=str(settings.send_confirm_poll_seconds))
    worker_env = {**env, "PRESSROOM_LOG_LEVEL": "DEBUG", "PRESSROOM_LIBRARY_LOG_LEVEL": "DEBUG",
                  "PRESSROOM_METRICS_PORT": str(metrics_port)}
    with tempfile.NamedTemporaryFile(prefix="pressroom-scan-", suffix=".log", delete=False) as log:
        worker = subprocess.Popen([sys.executable, "-m", "starter", "worker"], cwd=ROOT, env=worker_env,
                                  stdout=log, stderr=subprocess.STDOUT)
    said: list[str] = []

    async def run(*args: str) -> int:
        code, out, err = await cli(*args, env=env, timeout=300)
        said.append(f"$ pressroom {' '.join(args[:2])}\n{out}{err}")
        return code

    try:
        # Welcome emails for hostile names on strange addresses, through the command line.
        welcomed = [address for kind, address in STRANGE_ADDRESSES.items() if kind != "quoted-local-part"]
        for address, name in zip(welcomed, names, strict=False):  # a 10 KB name and a hidden character are refused
            assert await run("members", "add", address.replace("@", "+welcome@"), "--welcome", "--name", name) == (
                0 if accepted(name) else 1), said[-1]
        # A send that fails: every request answered 500, until the batches' attempts are spent
        # (each uncertain, so each is looked up, by its first recipient, before it is sent again).
        mailgun.set_faults(error_rate=1.0)
        assert await run("newsletter", "send", seeded.email_id, "--wait") == 1, said[-1]
        # The retry: answers lost or 500 after storing, events late: look-ups find what was accepted.
        mailgun.set_faults(error_rate=0.0, lost_response_rate=0.3, error_after_accept_rate=0.3,
                           storage_delay_seconds=1, seed=5)
        assert await run("newsletter", "send", seeded.email_id, "--wait") == 0, said[-1]
        mailgun.set_faults(lost_response_rate=0.0, error_after_accept_rate=0.0, storage_delay_seconds=0.0)
        for args in (("newsletter", "status", seeded.email_id), ("newsletter", "status", seeded.email_id, "--json"),
                     ("outbox", "status"), ("analytics", "run", "--wait")):
            assert await run(*args) == 0, said[-1]
        for entry in await db.fetch("SELECT id FROM outbox"):
            await wait_until(lambda entry=entry: _settled(db, entry["id"]), 90, worker)
            assert await run("outbox", "show", str(entry["id"])) == 0, said[-1]
        async with httpx.AsyncClient() as http:
            said.append((await http.get(f"http://127.0.0.1:{metrics_port}/metrics")).text)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    worker_output = Path(log.name).read_text(errors="replace")
    os.unlink(log.name)

    # The scenario really ran: sends, look-ups, retries, and the libraries' request lines, masked.
    assert "sending batch" in worker_output and "HTTP Request: GET" in worker_output
    assert "recipient=<address>" in worker_output  # a look-up's query string, masked
    assert mailgun.stats()["requests"]["events"] > 0
    assert await db.fetchval("SELECT status FROM emails WHERE id = $1", seeded.email_id) == "submitted"
    assert await db.fetchval("SELECT count(*) FROM automated_email_recipients WHERE provider_id IS NOT NULL") == \
        len([name for name in names[:len(welcomed)] if accepted(name)])

    secrets = {"the Mailgun key": SIMULATOR_KEY}
    secrets |= {f"address {row['email']!r}": row["email"] for row in await db.fetch("SELECT email FROM members")}
    secrets |= {f"name {kind}": name for kind, name in NAMES.items()}
    output = worker_output + "\n".join(said)
    assert not leaks(output, secrets), "\n".join(leaks(output, secrets))


async def _settled(db, outbox_id) -> bool:
    return await db.fetchval("SELECT status FROM outbox WHERE id = $1", outbox_id) in ("succeeded", "aborted")
