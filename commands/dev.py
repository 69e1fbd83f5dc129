"""`pressroom dev …`: the local development stack for whatever is not configured."""

from __future__ import annotations

import shlex

import typer

from commands import console, run_async
from devstack import stack
from devstack.servers import postgres_bin
from pressroom import database
from pressroom.errors import PressroomError
from pressroom.settings import DEV_FROM_ADDRESS, dev_stack_file, get_settings, read_dev_stack

app = typer.Typer(help="The local development stack: PostgreSQL, Temporal with its Web UI, a Mailgun simulator "
                  "(or, with PRESSROOM_EMAIL_PROVIDER=ses, the SES stand-in).",
                  no_args_is_help=True)


@app.command("up")
def dev_up() -> None:
    """Start what is not configured (data is kept in ./.pressroom between runs)."""
    async def work():
        status = stack.up()
        await database.migrate(get_settings().require_database())
        return status

    status = run_async(work())
    for name in status.started:
        console.print(f"started  {name}")
    for name in status.running:
        console.print(f"running  {name} (already)")
    for name in status.external:
        console.print(f"external {name} (configured by its variable)")
    if "temporal_ui" in status.values:
        console.print(f"\nTemporal Web UI: [bold]{status.values['temporal_ui']}[/bold]")
    console.print(f"\nThe stack is recorded in {dev_stack_file()}; pressroom commands use it for unset variables.",
                  highlight=False)
    console.print('To use it from other programs: eval "$(pressroom dev env)"')


# The variables a program needs to use the running stack, as `pressroom dev env` prints them.
STACK_VARIABLES = (("DATABASE_URL", "database_url"), ("TEMPORAL_ADDRESS", "temporal_address"),
                   ("MAILGUN_BASE_URL", "mailgun_base_url"), ("MAILGUN_DOMAIN", "mailgun_domain"),
                   ("MAILGUN_API_KEY", "mailgun_api_key"), ("MAILGUN_WEBHOOK_SIGNING_KEY", "webhook_signing_key"),
                   ("PRESSROOM_EMAIL_PROVIDER", "email_provider"),
                   ("PRESSROOM_MEMBERS_LINK_SECRET", "members_link_secret"),
                   ("PRESSROOM_ADDRESS_HASH_KEY", "address_hash_key"),
                   ("PRESSROOM_FROM_ADDRESS", "from_address"),
                   ("AWS_REGION", "ses_region"), ("AWS_ACCESS_KEY_ID", "ses_access_key_id"),
                   ("AWS_SECRET_ACCESS_KEY", "ses_secret_access_key"), ("PRESSROOM_SES_DOMAIN", "ses_domain"),
                   ("PRESSROOM_SES_CONFIGURATION_SET", "ses_configuration_set"),
                   ("PRESSROOM_SES_TOPIC_ARN", "ses_topic_arn"), ("PRESSROOM_SES_ENDPOINT_URL", "ses_endpoint_url"),
                   ("PRESSROOM_SES_SNS_ENDPOINT_URL", "ses_sns_endpoint_url"),
                   ("PRESSROOM_SES_SNS_DEV_CERTIFICATE", "ses_sns_dev_certificate"))


@app.command("env")
def dev_env() -> None:
    """Print `export` lines for the running stack (its generated keys, and PRESSROOM_DEV_PG_BIN: the
    folder of its PostgreSQL's own pg_dump and psql, whose version matches the server's)."""
    state = read_dev_stack()
    if not state:
        raise PressroomError("the development stack is not running (start it with `pressroom dev up`)")
    state.setdefault("from_address", DEV_FROM_ADDRESS)  # a stack started before it was recorded
    for variable, key in STACK_VARIABLES:
        if key in state:
            print(f"export {variable}={shlex.quote(str(state[key]))}")
    if "postgres_data" in state:  # the stack's own PostgreSQL: its tools (pg_dump) match its version
        print(f"export PRESSROOM_DEV_PG_BIN={shlex.quote(str(postgres_bin()))}")


@app.command("down")
def dev_down(purge: bool = typer.Option(False, "--purge", help="Remove the stack's data too: ./.pressroom "
                                         "and, run as root, its PostgreSQL data under /var/lib/pressroom-pg.")) -> None:
    """Stop the development stack (its data stays for the next `dev up`, unless --purge)."""
    stopped = stack.down(purge=purge)
    console.print("stopped " + ", ".join(stopped) if stopped else "nothing was running")
