"""`pressroom dev up` / `dev down`: the local stack for whatever is not configured.

A piece runs only when its variable is not set, so the same commands work beside a real PostgreSQL,
a real Temporal cluster or the real Mailgun. What runs is recorded in the stack file, which
`pressroom.settings` reads as the fallback for unset variables.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path

from devstack.files import private_file, private_folder
from devstack.servers import (
    Postgres,
    cluster_folder,
    start_ses_simulator,
    start_simulator,
    start_temporal_dev_server,
    stop_process,
)
from devstack.ses_simulator import SesSimulator
from pressroom.settings import DEV_FROM_ADDRESS, ConfigurationError, dev_stack_file, project_home, read_dev_stack
from pressroom.temporal import search_attribute_kinds


def _port(variable: str, default: int) -> int:
    """The stack's ports are fixed so that the printed addresses stay the same between runs."""
    value = os.environ.get(variable, str(default))
    if not value.isdigit() or not 0 < int(value) < 65536:

        raise ConfigurationError(f"{variable} is invalid: must be a port number, got {value!r}")
    return int(value)

SIMULATOR_DOMAIN = "mg.pressroom.test"
SES_DOMAIN = "ses.pressroom.test"
SES_REGION = "us-east-1"



@dataclass
class StackStatus:
    started: list[str] = field(default_factory=list)  # pieces started by this call
    running: list[str] = field(default_factory=list)  # pieces that were already running
    external: list[str] = field(default_factory=list)  # pieces configured by a variable
    values: dict[str, str] = field(default_factory=dict)


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


# Secrets the stack makes once and keeps in a file of their own, which `down` leaves in place: the
# members' link secret (links already sent keep working) and the address hash key (a deleted
# member's suppression keeps matching their address when it comes back; a new key would orphan it).
KEPT_SECRETS = ("members_link_secret", "address_hash_key")


def kept_secrets(home: Path, state: dict | None = None) -> dict[str, str]:
    """The stack's kept secrets, made on first use (a value an older stack file holds is kept)."""
    path = home / "secrets.json"
    try:
        kept = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        kept = {}
    if any(name not in kept for name in KEPT_SECRETS):
        for name in KEPT_SECRETS:
            kept.setdefault(name, (state or {}).get(name) or secrets.token_hex(32))
        private_file(path, json.dumps(kept, indent=2))
    return {name: kept[name] for name in KEPT_SECRETS}


def up() -> StackStatus:
    """Start every piece whose variable is unset and that is not already running."""
    postgres_port = _port("PRESSROOM_DEV_POSTGRES_PORT", 54329)
    temporal_port = _port("PRESSROOM_DEV_TEMPORAL_PORT", 7233)
    ui_port = _port("PRESSROOM_DEV_UI_PORT", 8233)
    simulator_port = _port("PRESSROOM_DEV_SIMULATOR_PORT", 8089)
    ses_port = _port("PRESSROOM_DEV_SES_PORT", 8090)
    home = private_folder(project_home())  # its files hold the stack's passwords and data: the owner's alone
    for existing in home.glob("temporal.db*"):  # written before the stack made its files private
        existing.chmod(0o600)
    state = read_dev_stack()
    status = StackStatus()

    if "DATABASE_URL" in os.environ:
        status.external.append("PostgreSQL")
    elif _alive(state.get("postgres_pid")):
        status.running.append("PostgreSQL")
    else:
        postgres = Postgres(home / "postgres", postgres_port)
        postgres.start(detach=True)
        state.update(postgres_pid=postgres.process.pid, database_url=postgres.url, postgres_data=str(postgres.data_dir))
        status.started.append("PostgreSQL")

    if "TEMPORAL_ADDRESS" in os.environ:
        status.external.append("Temporal")
    elif _alive(state.get("temporal_pid")):
        status.running.append("Temporal")
    else:
        process = start_temporal_dev_server(port=temporal_port, ui_port=ui_port,
                                            db_file=home / "temporal.db", log=home / "temporal.log",
                                            search_attributes=search_attribute_kinds(), detach=True,
                                            # With encrypted histories, the UI decodes through
                                            # `pressroom codec-server --allow-no-token` on its
                                            # default port (the dev UI has no token to pass).
                                            codec_endpoint="http://localhost:8081"
                                            if os.environ.get("PRESSROOM_ENCRYPTION_KEY") else "")
        state.update(temporal_pid=process.pid, temporal_address=f"127.0.0.1:{temporal_port}",
                     temporal_ui=f"http://localhost:{ui_port}")
        status.started.append("Temporal")

    state.update(kept_secrets(home, state))
    state.setdefault("from_address", DEV_FROM_ADDRESS)  # the development site's sender (PRESSROOM_FROM_ADDRESS)

    # The provider: PRESSROOM_EMAIL_PROVIDER, else the one this stack was started for; only its
    # stand-in is started, and the stack file names it for the commands that read the stack.
    provider = os.environ.get("PRESSROOM_EMAIL_PROVIDER") or state.get("email_provider") or "mailgun"
    if provider not in ("mailgun", "ses"):

        raise ConfigurationError(f"PRESSROOM_EMAIL_PROVIDER is invalid: mailgun or ses, got {provider!r}")
    state["email_provider"] = provider
    if provider == "ses":
        _ses_up(state, status, home, ses_port)
    elif "MAILGUN_API_KEY" in os.environ:
        status.external.append("Mailgun")
    elif _alive(state.get("simulator_pid")):
        status.running.append("Mailgun simulator")
    else:
        api_key = state.get("mailgun_api_key") or f"sim-{secrets.token_hex(16)}"
        signing_key = state.get("webhook_signing_key") or secrets.token_hex(16)  # signs the simulator's webhooks
        process = start_simulator(port=simulator_port, api_key=api_key, domain=SIMULATOR_DOMAIN,
                                  log=home / "simulator.log", detach=True, webhook_signing_key=signing_key)
        state.update(simulator_pid=process.pid, mailgun_base_url=f"http://127.0.0.1:{simulator_port}",
                     mailgun_api_key=api_key, mailgun_domain=SIMULATOR_DOMAIN, webhook_signing_key=signing_key)
        status.started.append("Mailgun simulator")

    # It holds the database's password and the simulator's key.
    private_file(dev_stack_file(), json.dumps(state, indent=2))
    status.values = {k: str(v) for k, v in state.items() if not k.endswith("_pid")}
    return status


def _ses_up(state: dict, status: StackStatus, home, port: int) -> None:
    """The SES stand-in, unless AWS credentials say a real SES is to be used."""
    if "AWS_ACCESS_KEY_ID" in os.environ:
        status.external.append("Amazon SES")
        return
    if _alive(state.get("ses_simulator_pid")):
        status.running.append("SES stand-in")
        return

    access_key_id = state.get("ses_access_key_id") or f"AKIASIM{secrets.token_hex(6).upper()}"
    secret_key = state.get("ses_secret_access_key") or secrets.token_hex(20)
    certificate = home / "sns-dev-certificate.pem"
    process = start_ses_simulator(port=port, access_key_id=access_key_id, secret_access_key=secret_key,
                                  region=SES_REGION, domain=SES_DOMAIN, certificate=certificate,
                                  log=home / "ses-simulator.log", detach=True)
    base_url = f"http://127.0.0.1:{port}"
    defaults = SesSimulator.__init__.__kwdefaults__
    state.update(ses_simulator_pid=process.pid, ses_endpoint_url=base_url, ses_sns_endpoint_url=f"{base_url}/sns",
                 ses_region=SES_REGION, ses_access_key_id=access_key_id, ses_secret_access_key=secret_key,
                 ses_domain=SES_DOMAIN, ses_configuration_set=defaults["configuration_set"],
                 ses_topic_arn=f"arn:aws:sns:{SES_REGION}:{defaults['account']}:{defaults['topic']}",
                 ses_sns_dev_certificate=str(certificate))
    status.started.append("SES stand-in")


def down(purge: bool = False) -> list[str]:
    """Stop what `up` started; data stays for the next `up`, unless `purge`: then this clone's
    folder (PRESSROOM_HOME, ./.pressroom) and, run as root, its PostgreSQL data under
    SERVICE_ROOT go too."""
    state = read_dev_stack()
    stopped = []
    for key, name in (("simulator_pid", "Mailgun simulator"), ("ses_simulator_pid", "SES stand-in"),
                      ("temporal_pid", "Temporal"),
                      ("postgres_pid", "PostgreSQL")):
        if _alive(state.get(key)):
            # SIGINT is PostgreSQL's fast shutdown; the others stop on SIGTERM.
            stop_process(state[key], signal.SIGINT if key == "postgres_pid" else signal.SIGTERM)
            stopped.append(name)
    dev_stack_file().unlink(missing_ok=True)
    if purge:
        home = project_home()
        shutil.rmtree(cluster_folder(home / "postgres"), ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)
    return stopped

