"""Header values are checked where they enter: a subject or sender holding a line break is refused in
one line naming the field, before anything is written; a sender name with quotes and commas stays
one address; `newsletter test --to` takes one valid address."""

from __future__ import annotations

from email.headerregistry import HeaderRegistry

import pytest

from pressroom.email_rendering import ContentError, header_text, mailbox
from pressroom.settings import ConfigurationError, load_settings
from tests.hostile.corpus import HOSTILE_SENDER_NAME, HOSTILE_SUBJECTS
from tests.newsletter.conftest import seed_email
from tests.newsletter.test_failures import send_and_follow
from tests.operations.test_waiting import cli, cli_env
from worker import running_worker


def addresses_in(header: str) -> list:
    parsed = HeaderRegistry()("from", header)
    assert not parsed.defects, parsed.defects
    return list(parsed.addresses)


@pytest.mark.parametrize("name", [HOSTILE_SENDER_NAME, "Ann <ann@evil.example>", 'Zoë "Z" Müller', "a,b,c"])
def test_a_sender_name_with_quotes_and_commas_stays_one_address(name):
    [address] = addresses_in(mailbox(name, "news@example.com", "sender", "e1"))
    assert (address.display_name, address.addr_spec) == (name, "news@example.com")


@pytest.mark.parametrize("kind", list(HOSTILE_SUBJECTS))
def test_a_header_with_a_line_break_is_refused_naming_the_field(kind):
    with pytest.raises(ContentError, match=r"^email e1: the subject holds a line break or control character$"):
        header_text(HOSTILE_SUBJECTS[kind], "subject", "e1")
    with pytest.raises(ContentError, match="the sender name holds a line break"):
        mailbox("Weekly\r\nBcc: x@evil.example", "news@example.com", "sender", "e1")
    with pytest.raises(ContentError, match="the reply-to address is not an e-mail address"):
        mailbox(None, "a@example.com, b@example.com", "reply-to", "e1")


@pytest.mark.parametrize("value", ["Pressroom <a@example.com>\r\nBcc: x@evil.example", "Acme, Inc <a@example.com>",
                                   "a@example.com, b@example.com", "no address"])
def test_the_from_address_setting_is_one_mailbox(value):
    with pytest.raises(ConfigurationError, match=r"^PRESSROOM_FROM_ADDRESS is invalid"):
        load_settings(from_address=value)
    assert load_settings(from_address='"Acme, Inc" <a@example.com>').from_address == '"Acme, Inc" <a@example.com>'


async def test_a_subject_with_a_line_break_fails_the_send_before_anything_is_written(db, mailgun, dev_env,
                                                                                     newsletter_settings):
    settings = newsletter_settings()
    seeded = await seed_email(db, members=5)
    await db.execute("UPDATE emails SET subject = $2 WHERE id = $1", seeded.email_id, HOSTILE_SUBJECTS["crlf"])
    async with running_worker(dev_env.client, settings):
        code, _out, err = await cli("newsletter", "send", seeded.email_id, "--wait", env=cli_env(settings, dev_env))
    assert code == 1 and err.strip().splitlines()[-1].endswith(
        f"email {seeded.email_id}: the subject holds a line break or control character"), err
    assert await db.fetchval("SELECT count(*) FROM email_batches WHERE email_id = $1", seeded.email_id) == 0
    assert mailgun.messages_for(seeded.email_id) == []
    email = await db.fetchrow("SELECT status, error FROM emails WHERE id = $1", seeded.email_id)
    assert email["status"] == "failed"
    assert email["error"].endswith("the subject holds a line break or control character")
    code, _out, err = await cli("newsletter", "test", seeded.email_id, "--to", "editor@example.com",
                               env=cli_env(settings, dev_env))
    assert code == 1 and "the subject holds a line break" in err and len(err.strip().splitlines()) == 1


async def test_a_quoted_sender_name_reaches_mailgun_as_one_address(db, mailgun, dev_env, newsletter_settings):
    settings = newsletter_settings()
    seeded = await seed_email(db, members=3)
    await db.execute("UPDATE newsletters SET sender_name = $2 WHERE id = $1", seeded.newsletter_id,
                     HOSTILE_SENDER_NAME)
    async with running_worker(dev_env.client, settings):
        outcome, _ = await send_and_follow(dev_env.client, settings, seeded.email_id)
    assert outcome.status == "submitted"
    [message] = mailgun.messages_for(seeded.email_id)
    [sender] = addresses_in(message.from_address)
    assert (sender.display_name, sender.addr_spec) == (HOSTILE_SENDER_NAME, "weekly@example.com")


@pytest.mark.parametrize("to", ["a@example.com, b@example.com", "a@example.com\r\nBcc: b@example.com", "a@localhost",
                                "@example.com"])
async def test_newsletter_test_takes_one_valid_address(db, mailgun, dev_env, newsletter_settings, to):
    settings = newsletter_settings()
    seeded = await seed_email(db, members=1)
    code, _out, err = await cli("newsletter", "test", seeded.email_id, "--to", to, env=cli_env(settings, dev_env))
    assert code == 1 and len(err.strip().splitlines()) == 1 and "is not an e-mail address" in err, err
    assert mailgun.messages == []
