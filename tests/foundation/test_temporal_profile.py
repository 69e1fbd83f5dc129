"""The Temporal connection through the SDK's standard settings (temporalio.envconfig), old names too."""

import pytest
from temporalio.service import TLSConfig

from pressroom.settings import ConfigurationError, load_settings
from pressroom.temporal import connect, tls_config

CA = b"-----BEGIN CERTIFICATE-----\nprivate CA\n-----END CERTIFICATE-----\n"
CERT = b"-----BEGIN CERTIFICATE-----\nclient\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN PRIVATE KEY-----\nclient key\n-----END PRIVATE KEY-----\n"


@pytest.fixture
def pems(tmp_path):
    paths = {}
    for name, data in (("ca.pem", CA), ("client.pem", CERT), ("client.key", KEY)):
        (tmp_path / name).write_bytes(data)
        paths[name] = tmp_path / name
    return paths


def write_profile(tmp_path, monkeypatch, text: str):
    path = tmp_path / "temporal.toml"
    path.write_text(text)
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(path))


def test_a_profile_with_a_ca_certificate_and_a_server_name_is_their_tls_config(tmp_path, monkeypatch, pems):
    write_profile(tmp_path, monkeypatch, f"""
[profile.default]
address = "localhost:1"

[profile.private]
address = "temporal.internal:7233"
namespace = "pressroom-prod"

[profile.private.tls]
server_ca_cert_path = "{pems['ca.pem']}"
server_name = "temporal.internal.example"
client_cert_path = "{pems['client.pem']}"
client_key_path = "{pems['client.key']}"
""")
    monkeypatch.setenv("TEMPORAL_PROFILE", "private")
    settings = load_settings()
    assert (settings.temporal_address, settings.temporal_namespace) == ("temporal.internal:7233", "pressroom-prod")
    assert tls_config(settings) == TLSConfig(server_root_ca_cert=CA, domain="temporal.internal.example",
                                             client_cert=CERT, client_private_key=KEY)


def test_the_standard_variables_win_over_the_profile(tmp_path, monkeypatch, pems):
    write_profile(tmp_path, monkeypatch, """
[profile.default]
address = "temporal.internal:7233"
[profile.default.tls]
server_name = "from-the-file.example"
""")
    monkeypatch.setenv("TEMPORAL_ADDRESS", "10.0.0.5:7233")
    monkeypatch.setenv("TEMPORAL_TLS_SERVER_NAME", "from-the-variable.example")
    monkeypatch.setenv("TEMPORAL_TLS_SERVER_CA_CERT_DATA", CA.decode())
    settings = load_settings()
    assert settings.temporal_address == "10.0.0.5:7233"
    assert tls_config(settings) == TLSConfig(server_root_ca_cert=CA, domain="from-the-variable.example")


def test_the_old_variables_still_work(monkeypatch, pems):
    monkeypatch.setenv("TEMPORAL_TLS_CERT", str(pems["client.pem"]))
    monkeypatch.setenv("TEMPORAL_TLS_KEY", str(pems["client.key"]))
    monkeypatch.setenv("TEMPORAL_TLS_SERVER_NAME", "temporal.internal.example")
    assert tls_config(load_settings()) == TLSConfig(domain="temporal.internal.example", client_cert=CERT,
                                                    client_private_key=KEY)
    monkeypatch.delenv("TEMPORAL_TLS_CERT")
    monkeypatch.delenv("TEMPORAL_TLS_KEY")
    monkeypatch.delenv("TEMPORAL_TLS_SERVER_NAME")
    assert tls_config(load_settings()) is False
    monkeypatch.setenv("TEMPORAL_TLS", "true")
    assert tls_config(load_settings()) is True
    monkeypatch.delenv("TEMPORAL_TLS")
    monkeypatch.setenv("TEMPORAL_API_KEY", "cloud-key")
    assert tls_config(load_settings()) is True  # an API key means Temporal Cloud: TLS on


def test_half_a_standard_client_certificate_is_one_line(monkeypatch, pems):
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", str(pems["client.pem"]))
    with pytest.raises(ConfigurationError, match=r"^TEMPORAL_TLS_CLIENT_KEY_PATH is not set: mutual TLS needs both"):
        tls_config(load_settings())


def test_an_unreadable_ca_certificate_is_one_line(monkeypatch):
    monkeypatch.setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", "/no/such/ca.pem")
    with pytest.raises(ConfigurationError) as raised:
        tls_config(load_settings())
    assert str(raised.value) == ("TEMPORAL_TLS_SERVER_CA_CERT_PATH '/no/such/ca.pem' cannot be read: "
                                 "No such file or directory")


@pytest.mark.parametrize("variable, value, words", [
    ("TEMPORAL_PROFILE", "no-such-profile", "Profile 'no-such-profile' not found"),
    ("TEMPORAL_CONFIG_FILE", "/no/such/temporal.toml", "TEMPORAL_CONFIG_FILE '/no/such/temporal.toml' cannot be read"),
])
def test_a_wrong_profile_or_file_is_one_line(monkeypatch, variable, value, words):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError) as raised:
        load_settings()
    assert words in str(raised.value)
    assert "\n" not in str(raised.value)


async def test_a_profile_file_alone_connects_to_its_cluster(dev_env, tmp_path, monkeypatch):
    """Over a real connection: the address and namespace come from the file, nothing else is set."""
    write_profile(tmp_path, monkeypatch, f"""
[profile.default]
address = "{dev_env.client.service_client.config.target_host}"
namespace = "{dev_env.client.namespace}"
""")
    for variable in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE"):
        monkeypatch.delenv(variable, raising=False)
    client = await connect(load_settings())  # it describes the namespace: a wrong one would raise
    assert client.service_client.config.target_host == dev_env.client.service_client.config.target_host
    assert client.namespace == dev_env.client.namespace
