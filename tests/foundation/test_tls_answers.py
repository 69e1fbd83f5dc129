"""TLS asked of a server that does not speak it, or without the file it needs, is one line saying so:
PostgreSQL's root certificate missing (never "DATABASE_URL is malformed"), TEMPORAL_TLS against a
plain server (never the transport's raw error)."""

from __future__ import annotations

import asyncio
import os

from tests.foundation.test_cli import assert_one_line_error, pressroom
from tests.operations.test_waiting import cli_env


async def test_a_missing_root_certificate_is_named(postgres_url, tmp_path, db):
    env = {**os.environ, "HOME": str(tmp_path)}  # no ~/.postgresql/root.crt either
    env.pop("PGSSLROOTCERT", None)
    separator = "&" if "?" in postgres_url else "?"
    missing = await asyncio.to_thread(
        pressroom, "outbox", "status",
        env={**env, "DATABASE_URL": f"{postgres_url}{separator}sslmode=verify-full&sslrootcert=/no/such/root.crt"})
    assert_one_line_error(missing, "DATABASE_URL's sslrootcert /no/such/root.crt does not exist or cannot be read")
    assert "malformed" not in missing.stderr
    none = await asyncio.to_thread(pressroom, "outbox", "status",
                                   env={**env, "DATABASE_URL": f"{postgres_url}{separator}sslmode=verify-full"})
    assert_one_line_error(none, "DATABASE_URL's sslmode checks the server's certificate, but no root certificate "
                                "was given", "sslrootcert=FILE")
    assert "malformed" not in none.stderr


async def test_temporal_tls_against_a_plain_server_names_the_setting(settings, dev_env):
    done = await asyncio.to_thread(pressroom, "analytics", "status",
                                   env={**cli_env(settings, dev_env), "TEMPORAL_TLS": "true"})
    assert_one_line_error(done, "with TLS (TEMPORAL_TLS=true): the server does not answer in TLS",
                          "unset it for a server without TLS")
    assert "tonic::" not in done.stderr
