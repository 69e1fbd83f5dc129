"""Connecting to Temporal: one place that knows the address, TLS, API key and data converter."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import TLSConfig

from pressroom.settings import Settings

# Custom search attributes every Pressroom run may carry, so the Web UI finds runs by domain ids.
EMAIL_ID = SearchAttributeKey.for_keyword("EmailId")
POST_ID = SearchAttributeKey.for_keyword("PostId")
PUBLISH_AT = SearchAttributeKey.for_datetime("PublishAt")
OUTBOX_EVENT_TYPE = SearchAttributeKey.for_keyword("OutboxEventType")
SEARCH_ATTRIBUTES = (EMAIL_ID, POST_ID, PUBLISH_AT, OUTBOX_EVENT_TYPE)


class TemporalUnavailable(Exception):
    """The Temporal frontend cannot be reached; the message names the address."""


def data_converter():
    """The pydantic converter, wrapped by the payload codec when an encryption key is set."""
    return pydantic_data_converter


async def connect(settings: Settings) -> Client:
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
            data_converter=data_converter(),
            tls=tls,
            api_key=settings.temporal_api_key.get_secret_value() or None,
        )
    except RuntimeError as error:
        raise TemporalUnavailable(
            f"cannot connect to Temporal at {settings.temporal_address} "
            f"(namespace {settings.temporal_namespace}): {str(error).splitlines()[0]}"
        ) from None
