"""Fixtures of the foundation tests."""

import uuid

import asyncpg
import pytest


@pytest.fixture
async def empty_database(postgres_server):
    name = f"migrate_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(postgres_server.url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    yield postgres_server.url.rsplit("/", 1)[0] + "/" + name
    await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    await admin.close()
