"""A fresh Mailgun simulator per test, in-process on a free port, and a client pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from devstack.mailgun_simulator import MailgunSimulator, running_simulator
from pressroom.providers.mailgun import MailgunClient

API_KEY = "key-client-test-5f0c2a9e71d4b3"  # fake, only valid for this simulator
DOMAIN = "mg.client.test"


@pytest.fixture
async def sim() -> AsyncIterator[MailgunSimulator]:
    async with running_simulator(api_key=API_KEY, domain=DOMAIN, seed=7) as simulator:
        yield simulator


@pytest.fixture
async def client(sim: MailgunSimulator) -> AsyncIterator[MailgunClient]:
    async with MailgunClient(base_url=sim.base_url, api_key=API_KEY, domain=DOMAIN, timeout=5.0) as mailgun:
        yield mailgun
