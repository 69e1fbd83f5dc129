"""SES end to end for tests: the stand-in, the webhook receiver with PRESSROOM_EMAIL_PROVIDER=ses
on a free port, and SES's client wired as the worker wires it (confirming from PostgreSQL)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

from devstack.servers import free_port
from devstack.ses_simulator import DEVELOPMENT_SENDER_DOMAINS, running_ses_simulator
from frontdoor.receiver import Receiver
from pressroom import database
from pressroom.providers.received import StoredAcceptances
from pressroom.providers.ses import SesClient
from pressroom.providers.ses.settings import ses_settings
from pressroom.settings import Settings
from tests.conftest import make_settings
from tests.webhooks.conftest import eventually


class SesStack:
    def __init__(self, simulator, client: SesClient, receiver: Receiver, url: str, pool, settings: Settings) -> None:
        self.simulator, self.client, self.receiver, self.url = simulator, client, receiver, url
        self.pool, self.settings = pool, settings


@asynccontextmanager
async def running_ses_stack(postgres_url, mailgun, monkeypatch, tmp_path, **overrides) -> AsyncIterator[SesStack]:
    async with running_ses_simulator() as simulator:
        # The test sites send from example.com: verified, as the development stack's is; SES refuses
        # any other sender.
        for domain in DEVELOPMENT_SENDER_DOMAINS:
            simulator.identities[domain] = True
        simulator.check_senders = True
        certificate = tmp_path / "sns-dev.pem"
        certificate.write_bytes(simulator.certificate_pem)
        for name, value in {"AWS_REGION": simulator.region, "AWS_ACCESS_KEY_ID": simulator.access_key_id,
                            "AWS_SECRET_ACCESS_KEY": simulator.secret_access_key,
                            "PRESSROOM_SES_DOMAIN": simulator.domain,
                            "PRESSROOM_SES_CONFIGURATION_SET": simulator.configuration_set,
                            "PRESSROOM_SES_TOPIC_ARN": simulator.topic_arn,
                            "PRESSROOM_SES_ENDPOINT_URL": simulator.base_url,
                            "PRESSROOM_SES_SNS_ENDPOINT_URL": f"{simulator.base_url}/sns",
                            "PRESSROOM_SES_SNS_DEV_CERTIFICATE": str(certificate)}.items():
            monkeypatch.setenv(name, value)
        ses_settings.cache_clear()
        settings = make_settings(postgres_url, mailgun, email_provider="ses", **overrides)
        pool = await database.connect(settings.database_url, max_size=5)
        receiver = Receiver(pool, settings)
        runner = web.AppRunner(receiver.app(), access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        client = SesClient.from_settings(ses_settings(), StoredAcceptances(pool))
        try:
            yield SesStack(simulator, client, receiver, f"http://127.0.0.1:{port}/webhooks/ses", pool, settings)
        finally:
            await client.aclose()
            await runner.cleanup()
            await pool.close()
            ses_settings.cache_clear()


async def subscribed(ses: SesStack) -> None:
    """The receiver subscribed to the topic, and the subscription confirmed by the receiver itself."""
    assert await ses.client.register_push(ses.url) == {"subscription": "created"}
    assert await eventually(lambda: _confirmed(ses), seconds=30)
    assert await ses.client.register_push(ses.url) == {"subscription": "unchanged"}


async def _confirmed(ses: SesStack) -> bool:
    return all(s["confirmed"] for s in ses.simulator.subscriptions.values())
