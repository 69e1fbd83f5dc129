"""Settings: the contract's variables, the documented defaults, one-line errors."""

import json

import pytest

from pressroom.settings import ConfigurationError, load_settings


def test_defaults_are_the_documented_ones(monkeypatch):
    settings = load_settings()
    assert settings.temporal_address == "127.0.0.1:7233"
    assert settings.temporal_namespace == "default"
    assert settings.task_queue == "pressroom"
    assert settings.mailgun_base_url == "https://api.mailgun.net"
    assert settings.batch_size == 1000
    assert settings.send_concurrency == 2
    assert settings.outbox_backoff_sec == [5, 10, 20, 40, 80, 160]
    assert settings.outbox_max_attempts == 6
    assert settings.analytics_trust_threshold_seconds == 30 * 60


@pytest.mark.parametrize("variable, value, words", [
    ("DATABASE_URL", "mysql://db/x", "must start with postgresql://"),
    ("TEMPORAL_ADDRESS", "no-port", "host:port"),
    ("MAILGUN_BASE_URL", "api.mailgun.net", "http"),
    ("PRESSROOM_BATCH_SIZE", "1001", "above Mailgun's maximum of 1000"),
    ("PRESSROOM_SEND_CONCURRENCY", "two", "integer"),
    ("OUTBOX_BACKOFF_SEC", "[5,-1]", "positive"),
    ("OUTBOX_ORPHAN_CHECK_SEC", "0", "greater than 0"),
    ("PRESSROOM_PUBLISH_HEARTBEAT_SECONDS", "0.2", "greater than or equal to 1"),
])
def test_a_malformed_value_is_one_line_naming_the_variable(monkeypatch, variable, value, words):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError) as raised:
        load_settings()
    message = str(raised.value)
    assert message.startswith(f"{variable} is invalid")
    assert words in message
    assert "\n" not in message


def test_backoff_accepts_a_json_list(monkeypatch):
    monkeypatch.setenv("OUTBOX_BACKOFF_SEC", "[1, 2,3]")
    assert load_settings().outbox_backoff_sec == [1, 2, 3]


def test_a_missing_database_says_how_to_get_one():
    with pytest.raises(ConfigurationError, match="DATABASE_URL is not set.*pressroom dev up"):
        load_settings().require_database()


def test_unset_variables_fall_back_to_the_running_dev_stack(monkeypatch, tmp_path):
    monkeypatch.setenv("PRESSROOM_HOME", str(tmp_path))
    (tmp_path / "stack.json").write_text(json.dumps({
        "database_url": "postgresql://postgres@127.0.0.1:54329/postgres",
        "mailgun_base_url": "http://127.0.0.1:8089", "mailgun_api_key": "sim-key", "mailgun_domain": "mg.local"}))
    monkeypatch.setenv("MAILGUN_DOMAIN", "mg.example.com")  # a set variable wins over the stack
    settings = load_settings()
    assert settings.database_url.endswith(":54329/postgres")
    assert settings.mailgun_api_key.get_secret_value() == "sim-key"
    assert settings.mailgun_domain == "mg.example.com"


def test_the_mailgun_key_is_never_shown(monkeypatch):
    monkeypatch.setenv("MAILGUN_API_KEY", "key-0123456789abcdef0123456789abcdef")
    settings = load_settings()
    assert "0123456789abcdef" not in repr(settings)
    assert "0123456789abcdef" not in str(settings.model_dump())
