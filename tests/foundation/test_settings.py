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
    assert settings.outbox_backoff_seconds == [5, 10, 20, 40, 80, 160]
    assert settings.outbox_max_attempts == 6
    assert settings.analytics_trust_threshold_seconds == 30 * 60


@pytest.mark.parametrize("variable, value, words", [
    ("DATABASE_URL", "mysql://db/x", "must start with postgresql://"),
    ("TEMPORAL_ADDRESS", "no-port", "host:port"),
    ("MAILGUN_BASE_URL", "api.mailgun.net", "http"),
    ("PRESSROOM_BATCH_SIZE", "1001", "above Mailgun's maximum of 1000"),
    ("PRESSROOM_SEND_CONCURRENCY", "two", "integer"),
    ("PRESSROOM_OUTBOX_BACKOFF_SECONDS", "[5,-1]", "positive"),
    ("PRESSROOM_ORPHAN_CHECK_SECONDS", "0", "greater than 0"),
    ("OUTBOX_ORPHAN_CHECK_SEC", "0", "greater than 0"),  # a deprecated name is named as set
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
    monkeypatch.setenv("PRESSROOM_OUTBOX_BACKOFF_SECONDS", "[1, 2,3]")
    assert load_settings().outbox_backoff_seconds == [1, 2, 3]


@pytest.mark.parametrize("old, new, value, field, expected", [
    ("OUTBOX_BATCH", "PRESSROOM_OUTBOX_BATCH", "7", "outbox_batch", 7),
    ("OUTBOX_MAX_ATTEMPTS", "PRESSROOM_OUTBOX_MAX_ATTEMPTS", "3", "outbox_max_attempts", 3),
    ("OUTBOX_BACKOFF_SEC", "PRESSROOM_OUTBOX_BACKOFF_SECONDS", "1,2", "outbox_backoff_seconds", [1, 2]),
    ("OUTBOX_POLL_INTERVAL_SEC", "PRESSROOM_OUTBOX_POLL_INTERVAL_SECONDS", "0.2", "outbox_poll_interval_seconds", 0.2),
    ("OUTBOX_MAX_OPEN_DELIVERIES", "PRESSROOM_OUTBOX_MAX_OPEN_DELIVERIES", "9", "outbox_max_open_deliveries", 9),
    ("OUTBOX_DELETE_ON_SUCCESS", "PRESSROOM_OUTBOX_DELETE_ON_SUCCESS", "true", "outbox_delete_on_success", True),
    ("OUTBOX_ORPHAN_CHECK_SEC", "PRESSROOM_ORPHAN_CHECK_SECONDS", "5", "orphan_check_seconds", 5.0),
    ("PRESSROOM_MAILGUN_RETRIES", "PRESSROOM_PROVIDER_RETRIES", "2", "provider_retries", 2),
    ("PRESSROOM_MAILGUN_RETRY_SECONDS", "PRESSROOM_PROVIDER_RETRY_SECONDS", "0.5", "provider_retry_seconds", 0.5),
    ("PRESSROOM_MAILGUN_OUTAGE_FIRST_WAIT_SECONDS", "PRESSROOM_PROVIDER_OUTAGE_FIRST_WAIT_SECONDS", "7",
     "provider_outage_first_wait_seconds", 7.0),
    ("PRESSROOM_MAILGUN_OUTAGE_MAX_WAIT_SECONDS", "PRESSROOM_PROVIDER_OUTAGE_MAX_WAIT_SECONDS", "70",
     "provider_outage_max_wait_seconds", 70.0),
])
def test_a_deprecated_name_still_works_and_says_which_to_set(monkeypatch, caplog, old, new, value, field,
                                                             expected):
    monkeypatch.setenv(old, value)
    assert getattr(load_settings(), field) == expected
    assert f"{old} is deprecated: set {new} instead" in caplog.text
    monkeypatch.setenv(new, value)  # both set: the new name wins
    monkeypatch.setenv(old, "1000" if field != "outbox_delete_on_success" else "false")
    assert getattr(load_settings(), field) == expected


def test_a_missing_database_says_how_to_get_one():
    with pytest.raises(ConfigurationError, match=r"DATABASE_URL is not set.*pressroom dev up"):
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
