"""SendNewsletterWorkflow against the in-memory email provider: the fake send_batch sends each batch
through the provider port and turns the provider's errors into the workflow's failures with the
real activity's `send_failure_of`, so the workflow meets what a provider does (a refusal, an
outage that ends, a sending cap) rather than hand-made errors."""

from __future__ import annotations

from collections.abc import Callable

from temporalio import activity

from activities.newsletter.models import BatchSent, EmailLock, SendBatchInput
from activities.newsletter.send import send_failure_of
from pressroom.providers.memory import MemoryProvider
from pressroom.providers.port import BATCH_MARK, EMAIL_MARK, Message, ProviderError, placeholder
from tests.workflows.test_newsletter import FakeSending, plan, send

MESSAGE = Message(from_address="news@example.com", subject="Issue 1", html=f"<p>Hi {placeholder('name_html')}</p>",
                  text=f"Hi {placeholder('name')}", tags=("bulk-email",))


class ProviderSending(FakeSending):
    """FakeSending whose batches of 10 go out through `provider`; `before_send(fake, batch_id)` sets
    the provider's switches for each attempt."""

    def __init__(self, batches: int, provider: MemoryProvider, *,
                 before_send: Callable[[ProviderSending, str], None] | None = None, **options) -> None:
        super().__init__(batches, **options)
        self.provider, self.before_send = provider, before_send

    @activity.defn(name="send_batch")
    async def send_batch(self, input: SendBatchInput) -> BatchSent:
        self.attempts[input.batch_id] = self.attempts.get(input.batch_id, 0) + 1
        if self.before_send is not None:
            self.before_send(self, input.batch_id)
        readers = {f"{input.batch_id}-{n}@example.com": {"name": f"Reader {n}", "name_html": f"Reader {n}"}
                   for n in range(10)}
        try:
            provider_id = (await self.provider.send(
                self.provider.prepare(MESSAGE), readers, mark={EMAIL_MARK: "e1", BATCH_MARK: input.batch_id},
                message_id=self.provider.message_id(input.batch_id), delivery_time=input.delivery_time)).provider_id
        except ProviderError as error:
            raise send_failure_of(error, len(readers)) from None
        self.status[input.batch_id] = "submitted"
        return BatchSent(batch_id=input.batch_id, recipients=len(readers), provider_id=provider_id, reconciled=False)


def sent_batches(provider: MemoryProvider) -> list[str]:
    return sorted(sent.mark[BATCH_MARK] for sent in provider.sent)


async def test_every_batch_goes_through_the_provider_once_with_its_mark(env):
    provider = MemoryProvider()
    fake = ProviderSending(3, provider)
    outcome, _ = await send(env, fake)
    assert outcome.status == "submitted"
    assert sent_batches(provider) == fake.batch_ids
    first = next(sent for sent in provider.sent if sent.mark[BATCH_MARK] == "b0000")
    assert first.personalised("b0000-3@example.com")[2] == "Hi Reader 3"


async def test_a_provider_that_refuses_fails_each_batch_at_once(env):
    provider = MemoryProvider()
    provider.faults.refused = True
    fake = ProviderSending(2, provider)
    outcome, _ = await send(env, fake)
    assert outcome.status == "failed" and provider.sent == []
    assert fake.attempts == {"b0000": 1, "b0001": 1}, "a refusal is not retried"
    assert sorted((f.batch_id, f.status_code) for f in fake.failed) == [("b0000", 401), ("b0001", 401)]


async def test_an_outage_is_waited_out_and_each_batch_sent_once_when_the_provider_is_back(env):
    provider = MemoryProvider()

    def unreachable_for_five_attempts(fake: ProviderSending, batch_id: str) -> None:
        provider.faults.outage = batch_id == "b0000" and fake.attempts[batch_id] <= 5

    fake = ProviderSending(2, provider, before_send=unreachable_for_five_attempts, lock=EmailLock(
        acquired=True, plan=plan(provider_retries=1, provider_retry_seconds=10, outage_first_wait_seconds=60,
                                 outage_max_wait_seconds=120)))
    outcome, progress = await send(env, fake)
    assert outcome.status == "submitted" and fake.failed == []
    assert fake.attempts == {"b0000": 6, "b0001": 1}
    assert sent_batches(provider) == ["b0000", "b0001"] and progress.message == ""


async def test_a_sending_cap_is_waited_for_and_the_batch_sent_after_it(env):
    provider = MemoryProvider()
    provider.faults.rate_limited, provider.faults.retry_after = 1, 3600.0  # the domain's hourly cap
    fake = ProviderSending(1, provider)
    outcome, _ = await send(env, fake)
    assert outcome.status == "submitted" and fake.attempts == {"b0000": 2}
    assert sent_batches(provider) == ["b0000"]
