"""Bad provider-limit settings stop a command at start with one line naming what is wrong."""

import pytest

from operations.limits import reset_sending_limit, sending_limits
from pressroom.errors import NotFound
from pressroom.settings import ConfigurationError, load_settings

from .test_cli import assert_one_line_error, pressroom


@pytest.mark.parametrize("env, words", [
    ({"MAILGUN_FALLBACK_DOMAIN": "fallback.example.com"},
     ["MAILGUN_FALLBACK_DOMAIN is set but MAILGUN_FALLBACK_ADDRESS", "noreply@fallback.example.com"]),
    ({"MAILGUN_FALLBACK_ADDRESS": "noreply@fallback.example.com"}, ["without MAILGUN_FALLBACK_DOMAIN"]),
    ({"PRESSROOM_DAILY_SEND_LIMIT": "0"}, ["PRESSROOM_DAILY_SEND_LIMIT is invalid", "a cap of 0 would never send"]),
    ({"PRESSROOM_HOURLY_SEND_LIMIT": "mg.example.com=-5"},
     ["PRESSROOM_HOURLY_SEND_LIMIT is invalid", "-5 for mg.example.com"]),
    ({"PRESSROOM_HOURLY_SEND_LIMIT": "lots"}, ["PRESSROOM_HOURLY_SEND_LIMIT is invalid", "'lots'"]),
    ({"PRESSROOM_BATCH_SIZE": "5000"}, ["PRESSROOM_BATCH_SIZE is invalid", "Mailgun's maximum of 1000"]),
])
def test_bad_limits_are_one_line_at_start(env, words):
    result = pressroom("limits", "show", env={"DATABASE_URL": "postgresql://u@127.0.0.1:1/x", **env})
    assert_one_line_error(result, *words)


def test_caps_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("PRESSROOM_DAILY_SEND_LIMIT", "500")
    monkeypatch.setenv("PRESSROOM_HOURLY_SEND_LIMIT", "mg.a.example=100, fallback.example=20")
    settings = load_settings()
    assert settings.send_limit("mg.other.example", "day") == 500
    assert (settings.send_limit("mg.a.example", "hour"), settings.send_limit("fallback.example", "hour"),
            settings.send_limit("mg.other.example", "hour")) == (100, 20, None)
    with pytest.raises(ConfigurationError, match="must differ from MAILGUN_DOMAIN"):
        load_settings(mailgun_domain="mg.a.example", fallback_domain="mg.a.example", fallback_address="n@mg.a.example")


async def test_limits_show_and_reset(settings, db):
    await db.execute("INSERT INTO sending_domain_limits (domain, batch_size, refused_size, reason) "
                     "VALUES ($1, 7, 15, 'recipient limit exceeded')", settings.mailgun_domain)
    rows = {row["domain"]: row for row in await sending_limits(settings)}
    assert rows[settings.mailgun_domain]["batch_size"] == 7 and rows[settings.mailgun_domain]["refused_size"] == 15
    await reset_sending_limit(settings.mailgun_domain, settings)
    assert {row["domain"]: row for row in await sending_limits(settings)}[settings.mailgun_domain]["batch_size"] is None
    with pytest.raises(NotFound, match="no batch size was learned"):
        await reset_sending_limit(settings.mailgun_domain, settings)


async def test_limits_show_and_reset_from_the_command_line(settings, db, postgres_url):
    await db.execute("INSERT INTO sending_domain_limits (domain, batch_size, refused_size, reason) "
                     "VALUES ('mg.probation.example', 7, 15, 'recipient limit exceeded')")
    env = {"DATABASE_URL": postgres_url, "MAILGUN_DOMAIN": "mg.cli.example", "PRESSROOM_DAILY_SEND_LIMIT": "500"}
    result = pressroom("limits", "show", env=env)
    assert result.returncode == 0, result.stderr
    assert "mg.cli.example: no batch size learned; 0/500 today" in result.stdout
    assert "mg.probation.example: batches of 7 (refused 15 at " in result.stdout
    assert pressroom("limits", "reset", "mg.probation.example", env=env).returncode == 0
    assert_one_line_error(pressroom("limits", "reset", "mg.probation.example", env=env), "no batch size was learned")
