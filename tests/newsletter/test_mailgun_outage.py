"""A Mailgun outage is an outage, not a verdict: a send that cannot reach Mailgun after its retries
looks for its return with an authenticated read, says so in its progress ("Mailgun unreachable since
T, looking every N s for its return"), and carries on by itself when Mailgun is back, every member once."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import pytest

from devstack.servers import free_port
from operations.newsletter import newsletter_status
from tests.newsletter.test_failures import assert_each_member_once, wait_until
from worker import running_worker
from workflows.newsletter import SendNewsletterWorkflow
from workflows.newsletter_models import SendNewsletterInput, newsletter_workflow_id

from .conftest import seed_email


class Gate:
    """A TCP proxy in front of the simulator that can be shut, as an unreachable Mailgun is: while
    shut, nothing listens on its port (connections are refused) and open connections are cut."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname, parts.port)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def open(self) -> None:
        self._server = await asyncio.start_server(self._pipe, "127.0.0.1", self.port)

    async def shut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self._writers |= {writer, up_writer}

        async def copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                sink.close()

        await asyncio.gather(copy(reader, up_writer), copy(up_reader, writer))
        self._writers -= {writer, up_writer}


@pytest.mark.fault
async def test_a_mailgun_outage_longer_than_the_retries_is_waited_out_and_the_send_finishes_by_itself(
        db, mailgun, dev_env, newsletter_settings):
    gate = Gate(mailgun.base_url)
    settings = newsletter_settings(batch_size=2, send_concurrency=2, provider_retries=1, provider_retry_seconds=0.5,
                                   provider_outage_first_wait_seconds=1, provider_outage_max_wait_seconds=2,
                                   provider_probe_seconds=1)
    settings = settings.model_copy(update={"mailgun_base_url": gate.url})
    seeded = await seed_email(db, members=8)
    async with running_worker(dev_env.client, settings):
        handle = await dev_env.client.start_workflow(
            SendNewsletterWorkflow.run, SendNewsletterInput(email_id=seeded.email_id),
            id=newsletter_workflow_id(seeded.email_id), task_queue=settings.task_queue)
        # Mailgun is unreachable from the start, for several looks.
        async def waiting_for_mailgun() -> bool:
            message = (await handle.query(SendNewsletterWorkflow.progress)).message
            return message.startswith("Mailgun unreachable since") and "looking every 1 s" in message
        await wait_until(waiting_for_mailgun, timeout=90)
        status = await newsletter_status(seeded.email_id, client=dev_env.client, settings=settings)
        assert status.status == "submitting"
        assert status.progress is not None and status.progress.message.startswith("Mailgun unreachable since")
        assert await db.fetchval("SELECT count(*) FROM email_batches WHERE email_id = $1 AND status = 'failed'",
                                 seeded.email_id) == 0

        await gate.open()  # Mailgun is back
        try:
            outcome = await handle.result()
            assert (await handle.query(SendNewsletterWorkflow.progress)).message == ""
        finally:
            await gate.shut()
    assert outcome.status == "submitted" and outcome.counts.batches_submitted == 4
    await assert_each_member_once(db, mailgun, seeded.email_id)
