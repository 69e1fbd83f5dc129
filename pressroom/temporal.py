"""Connecting to Temporal: one place that knows the address, TLS, API key and data converter."""

from __future__ import annotations

import dataclasses

from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes
from temporalio.runtime import Runtime
from temporalio.service import RPCError, RPCStatusCode, TLSConfig

from pressroom.settings import Settings

# Custom search attributes every Pressroom run may carry, so the Web UI finds runs by domain ids.
EMAIL_ID = SearchAttributeKey.for_keyword("EmailId")
POST_ID = SearchAttributeKey.for_keyword("PostId")
PUBLISH_AT = SearchAttributeKey.for_datetime("PublishAt")
OUTBOX_EVENT_TYPE = SearchAttributeKey.for_keyword("OutboxEventType")
SEARCH_ATTRIBUTES = (EMAIL_ID, POST_ID, PUBLISH_AT, OUTBOX_EVENT_TYPE)


class TemporalUnavailable(Exception):
    """The Temporal frontend cannot be reached; the message names the address."""


def data_converter(settings: Settings | None = None) -> DataConverter:
    """The pydantic converter; with an encryption key, payloads and failure messages are sealed."""
    key = settings.encryption_key.get_secret_value() if settings else ""
    if not key:
        return pydantic_data_converter
    from pressroom.codec import EncryptionCodec

    return dataclasses.replace(pydantic_data_converter, payload_codec=EncryptionCodec.from_text(key),
                               failure_converter_class=DefaultFailureConverterWithEncodedAttributes)


async def connect(settings: Settings, runtime: Runtime | None = None) -> Client:
    """A client on the configured Temporal; with tracing on, it and any worker built on it carry traces."""
    from pressroom import tracing

    tls: TLSConfig | bool = False
    if settings.temporal_tls_cert:
        with open(settings.temporal_tls_cert, "rb") as cert, open(settings.temporal_tls_key, "rb") as key:
            tls = TLSConfig(client_cert=cert.read(), client_private_key=key.read())
    elif settings.temporal_tls or settings.temporal_api_key.get_secret_value():
        tls = True
    try:
        return await Client.connect(
            settings.temporal_address,
            namespace=settings.temporal_namespace,
            data_converter=data_converter(settings),
            runtime=runtime,
            tls=tls,
            api_key=settings.temporal_api_key.get_secret_value() or None,
            interceptors=tracing.interceptors(),
        )
    except RuntimeError as error:
        raise TemporalUnavailable(
            f"cannot connect to Temporal at {settings.temporal_address} "
            f"(namespace {settings.temporal_namespace}): {str(error).splitlines()[0]}"
        ) from None


def search_attribute_kinds() -> dict[str, str]:
    """{name: "Keyword" | "Datetime"}, as the dev server's --search-attribute flag spells them."""
    return {key.name: key.indexed_value_type.name.capitalize() for key in SEARCH_ATTRIBUTES}


async def register_search_attributes(client: Client) -> list[str]:
    """Add the search attributes the namespace lacks (self-hosted clusters); returns those added.

    Temporal Cloud refuses this call: there, add them in the Cloud UI or with tcld.
    """
    from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest

    namespace = client.namespace
    try:
        existing = (await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace))).custom_attributes
    except RPCError as error:
        if error.status != RPCStatusCode.UNIMPLEMENTED:
            raise
        existing = {}  # the time-skipping test server adds but cannot list
    missing = {key.name: key.indexed_value_type for key in SEARCH_ATTRIBUTES if key.name not in existing}
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=namespace, search_attributes=missing))
    return sorted(missing)


async def create_or_update_schedule(client: Client, schedule_id: str, schedule) -> str:
    """Create a schedule, or update it to `schedule` keeping its paused state: "created" | "updated"."""
    from temporalio.client import ScheduleAlreadyRunningError, ScheduleUpdate

    try:
        await client.create_schedule(schedule_id, schedule)
        return "created"
    except ScheduleAlreadyRunningError:
        pass

    def update(previous):
        schedule.state = previous.description.schedule.state
        return ScheduleUpdate(schedule=schedule)

    await client.get_schedule_handle(schedule_id).update(update)
    return "updated"
