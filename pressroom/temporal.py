"""Connecting to Temporal: one place that knows the address, TLS, API key and data converter."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import re
import weakref

from temporalio.api.common.v1 import Payload
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client, ScheduleAlreadyRunningError, ScheduleUpdate
from temporalio.common import SearchAttributeKey
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes
from temporalio.runtime import LogForwardingConfig, LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.service import RPCError, RPCStatusCode, TLSConfig

from pressroom import tracing
from pressroom.codec import EncryptionCodec, EncryptionKeyError, KeylessCodec
from pressroom.settings import ConfigurationError, Settings

# Custom search attributes every Pressroom run may carry, so the Web UI finds runs by domain ids.
EMAIL_ID = SearchAttributeKey.for_keyword("EmailId")
POST_ID = SearchAttributeKey.for_keyword("PostId")
PUBLISH_AT = SearchAttributeKey.for_datetime("PublishAt")
OUTBOX_EVENT_TYPE = SearchAttributeKey.for_keyword("OutboxEventType")
SEARCH_ATTRIBUTES = (EMAIL_ID, POST_ID, PUBLISH_AT, OUTBOX_EVENT_TYPE)


class TemporalUnavailable(Exception):
    """The Temporal frontend cannot be reached; the message names the address."""


# The Rust runtime behind every client this process makes (its Tokio thread pool). It is ours,
# not the SDK's lazily made default, so that `close_runtime` can shut it down before the
# interpreter finalises: a Tokio thread still finishing an RPC's callback while Python tears down
# aborts the process ("PyGILState_Release ... finalizing", exit 134 or 139).
_runtime: Runtime | None = None


def process_runtime() -> Runtime:
    global _runtime
    if _runtime is None:
        _runtime = Runtime(telemetry=telemetry())
    return _runtime


def telemetry(**settings) -> TelemetryConfig:
    """The runtime's telemetry: the Temporal core's own warnings go to Python's logging (stderr, in
    Pressroom's one-line format, masked), never to stdout, which carries only a command's output."""


    return TelemetryConfig(logging=LoggingConfig(filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
                                                 forwarding=LogForwardingConfig(logger=logging.getLogger(
                                                     "temporalio.core"))), **settings)


def close_runtime() -> bool:
    """Drop the process's runtime and join its threads, while the interpreter is fully alive.

    Call it when no client is in use any more (after the event loop has closed). The SDK drops the
    last reference to the core runtime with the GIL released and waits for its threads, so a thread
    inside an RPC's completion callback finishes before we return. True when the runtime is gone;
    False when a client (or its runtime) is still referenced somewhere and its threads live on.
    """

    global _runtime
    if _runtime is None:
        return True
    gone = weakref.ref(_runtime)
    _runtime = None
    gc.collect()  # clients caught in reference cycles (exceptions, closed coroutines) go now
    return gone() is None


def data_converter(settings: Settings | None = None) -> DataConverter:
    """The pydantic converter; with an encryption key, payloads and failure messages are sealed and
    payloads nobody sealed are refused (unless PRESSROOM_CODEC_ALLOW_PLAINTEXT); without one, an
    encrypted payload is an error naming the missing key."""

    key = settings.encryption_key.get_secret_value() if settings else ""
    if not key or settings is None:
        return dataclasses.replace(pydantic_data_converter, payload_codec=KeylessCodec())
    codec = EncryptionCodec.from_text(key, allow_plaintext=settings.codec_allow_plaintext)
    return dataclasses.replace(pydantic_data_converter, payload_codec=codec,
                               failure_converter_class=DefaultFailureConverterWithEncodedAttributes)


def _read_tls_file(variable: str, path: str) -> bytes:
    if "-----BEGIN" in path:  # the PEM itself, from a profile's …_data or TEMPORAL_TLS_…_DATA; never echoed
        return path.encode()
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as error:
        raise ConfigurationError(f"{variable} {path!r} cannot be read: {error.strerror}") from None


def tls_config(settings: Settings) -> TLSConfig | bool:
    """TLS as the settings ask: a client certificate (mutual TLS), a CA certificate and server name
    (a private cluster), TLS with the system's roots, or none; unreadable files are one line."""
    if settings.temporal_tls_cert or settings.temporal_tls_key:  # Pressroom's own names win
        names = ("TEMPORAL_TLS_CERT", "TEMPORAL_TLS_KEY")
        cert, key = settings.temporal_tls_cert, settings.temporal_tls_key
    else:
        names = ("TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_KEY_PATH")
        cert, key = settings.temporal_tls_client_cert, settings.temporal_tls_client_key
    if bool(cert) != bool(key):
        missing = names[1] if cert else names[0]
        raise ConfigurationError(f"{missing} is not set: mutual TLS needs both {names[0]} and {names[1]}")
    ca, server_name = settings.temporal_tls_server_ca_cert, settings.temporal_tls_server_name
    if cert or ca or server_name:
        return TLSConfig(
            server_root_ca_cert=_read_tls_file("TEMPORAL_TLS_SERVER_CA_CERT_PATH", ca) if ca else None,
            domain=server_name or None,
            client_cert=_read_tls_file(names[0], cert) if cert else None,
            client_private_key=_read_tls_file(names[1], key) if key else None)
    return bool(settings.temporal_tls or settings.temporal_api_key.get_secret_value())


async def connect(settings: Settings, runtime: Runtime | None = None) -> Client:
    """A client on the namespace, which must exist: connecting alone does not look at it, and a call
    that later finds it missing answers NOT_FOUND, like a missing workflow would."""


    tls = tls_config(settings)
    where = f"Temporal at {settings.temporal_address} (namespace {settings.temporal_namespace})"
    try:
        client = await Client.connect(
            settings.temporal_address,
            namespace=settings.temporal_namespace,
            data_converter=data_converter(settings),
            runtime=runtime or process_runtime(),
            tls=tls,
            api_key=settings.temporal_api_key.get_secret_value() or None,
            interceptors=tracing.interceptors(),  # with tracing on, it and any worker built on it carry traces
        )
    except (RuntimeError, ValueError) as error:
        if tls and (refused := _TLS_REFUSED.search(str(error))):
            raise TemporalUnavailable(f"cannot connect to {where} with TLS ({_tls_setting(settings)}): the server "
                                      f"does not answer in TLS ({refused.group(0)}); unset it for a server "
                                      "without TLS (the development server), or check TEMPORAL_ADDRESS") from None
        raise TemporalUnavailable(f"cannot connect to {where}: {transport_reason(error)}; is it running? "
                                  "(`pressroom dev up` starts the development stack; check TEMPORAL_ADDRESS)") from None
    try:
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=settings.temporal_namespace))
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise TemporalUnavailable(f"{where}: {error.message} (check TEMPORAL_NAMESPACE)") from None
        if error.status != RPCStatusCode.PERMISSION_DENIED:  # a key scoped to the namespace may not describe it
            raise
    return client


class SharedClient:
    """A server's one Temporal client: connected at its first need and reused by every request. A
    connect that fails is tried again by the next request; once made, the client's channel reconnects
    by itself after the server was lost."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._client: Client | None = None
        self._connecting = asyncio.Lock()

    async def get(self) -> Client:
        if self._client is None:
            async with self._connecting:  # requests that arrive together share one connect
                if self._client is None:
                    self._client = await connect(self._settings)
        return self._client


async def resolve_client(client: Client | SharedClient | None, settings: Settings) -> Client:
    """The client an operation was given (a server's shared one), else a new one for a command."""
    if isinstance(client, SharedClient):
        return await client.get()
    return client if client is not None else await connect(settings)


# rustls's words for a server that answered, but not in TLS (a plain gRPC server's HTTP/2 bytes).
_TLS_REFUSED = re.compile(r"InvalidContentType|InvalidMessage|CorruptMessage|HandshakeFailure|WrongVersion|"
                          r"record overflow", re.IGNORECASE)


def _tls_setting(settings: Settings) -> str:
    """The setting that asked for TLS, by the name the operator set."""
    if settings.temporal_tls_cert or settings.temporal_tls_client_cert:
        return "TEMPORAL_TLS_CERT" if settings.temporal_tls_cert else "TEMPORAL_TLS_CLIENT_CERT_PATH"
    if settings.temporal_tls:
        return "TEMPORAL_TLS=true"
    if settings.temporal_api_key.get_secret_value():
        return "TEMPORAL_API_KEY, which implies TLS"
    return "TEMPORAL_TLS_SERVER_CA_CERT_PATH"


def transport_reason(error: BaseException) -> str:
    """The words inside the SDK's transport error (`tonic::transport::Error(Transport, ConnectError(…
    message: "Connection refused" …))`) rather than the Rust debug print around them."""

    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    messages = re.findall(r'message: "([^"]+)"', text) or re.findall(r'"([^"]{4,})"', text)
    return "; ".join(dict.fromkeys(messages)) if messages else text


# What to check, by the status of a refused call (the SDK's RPCError carries gRPC's status).
_RPC_HINTS = {
    RPCStatusCode.NOT_FOUND: "check TEMPORAL_NAMESPACE",
    RPCStatusCode.UNAVAILABLE: "is the server running? `pressroom dev up` starts the development stack; "
                               "check TEMPORAL_ADDRESS",
    RPCStatusCode.DEADLINE_EXCEEDED: "the server did not answer in time; check TEMPORAL_ADDRESS and its load",
    RPCStatusCode.UNAUTHENTICATED: "check TEMPORAL_API_KEY or the TLS certificate",
    RPCStatusCode.PERMISSION_DENIED: "check TEMPORAL_API_KEY or the TLS certificate",
    RPCStatusCode.INVALID_ARGUMENT: "a value sent was refused",
    RPCStatusCode.RESOURCE_EXHAUSTED: "the server is rate limiting; try again shortly",
}


def describe_rpc_error(error: RPCError, settings: Settings) -> str:
    """One line: where the call went, what Temporal answered, and what to check."""
    message = (error.message or str(error)).splitlines()[0] if (error.message or str(error)) else "no message"
    hint = _RPC_HINTS.get(error.status)
    if error.status == RPCStatusCode.NOT_FOUND and "namespace" not in message.lower():
        hint = None  # a workflow or schedule that is not there; the message says which
    return (f"Temporal at {settings.temporal_address} (namespace {settings.temporal_namespace}) refused the call: "
            f"{error.status.name if error.status else 'error'}: {message}" + (f" ({hint})" if hint else ""))


def search_attribute_kinds() -> dict[str, str]:
    """{name: "Keyword" | "Datetime"}, as the dev server's --search-attribute flag spells them."""
    return {key.name: key.indexed_value_type.name.capitalize() for key in SEARCH_ATTRIBUTES}


async def register_search_attributes(client: Client) -> list[str]:
    """Add the search attributes the namespace lacks (self-hosted clusters); returns those added.

    Temporal Cloud refuses this call: there, add them in the Cloud UI or with tcld.
    """

    namespace = client.namespace
    try:
        existing = (await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace))).custom_attributes
    except RPCError as error:
        if error.status != RPCStatusCode.UNIMPLEMENTED:
            raise
        existing = {}  # type: ignore[assignment]  # the time-skipping test server adds but cannot list
    missing = {key.name: key.indexed_value_type for key in SEARCH_ATTRIBUTES if key.name not in existing}
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=namespace,
                                       search_attributes=missing))  # type: ignore[arg-type]  # the SDK's IntEnum is the protocol's enum
    return sorted(missing)


# The task queue a configuration uses when PRESSROOM_TASK_QUEUE is unset.
DEFAULT_TASK_QUEUE: str = Settings.model_fields["task_queue"].default


def site_schedule_id(base: str, task_queue: str) -> str:
    """The id of one site's schedule `base`: a namespace may hold several sites, each polling its own
    task queue, and a fixed id would give the second site the first one's schedule. The default
    queue's keeps the bare id, so that a deployment on it keeps the schedule it has."""
    return base if task_queue == DEFAULT_TASK_QUEUE else f"{base}-{task_queue}"


async def adopt_legacy_schedule(client: Client, legacy_id: str, schedule_id: str, task_queue: str) -> bool:
    """A site on its own task queue had, before ids named the queue, the bare `legacy_id` running on
    that queue: its paused state passes to `schedule_id` and the bare one is deleted, so that the
    site's work runs from one schedule, not two. One on another queue is another site's: left alone.
    Called once `schedule_id` exists; answers whether one was adopted."""
    if schedule_id == legacy_id:
        return False
    handle = client.get_schedule_handle(legacy_id)
    try:
        legacy = await handle.describe()
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    if getattr(legacy.schedule.action, "task_queue", None) != task_queue:
        return False
    state = legacy.schedule.state
    if state.paused:  # `schedule_id` exists by now (made just before, by the same worker start)
        await client.get_schedule_handle(schedule_id).pause(note=state.note or "paused under its former id")
    await handle.delete()
    return True


async def create_or_update_schedule(client: Client, schedule_id: str, schedule, *, move: bool = True) -> str:
    """Create a schedule, or update it to `schedule` keeping its paused state: "created" | "updated".

    A schedule belongs to the task queue it runs on: without `move`, one on another queue than
    `schedule`'s is left as it is (answers "left on task queue Q"). A worker started on another queue
    must not take the namespace's shared schedules with it: once it stopped, their runs would wait
    on a queue nobody polls, and with overlaps skipped, every later run too.
    """

    try:
        await client.create_schedule(schedule_id, schedule)
        return "created"
    except ScheduleAlreadyRunningError:
        pass
    left_on = ""

    def update(previous):
        nonlocal left_on
        queue = getattr(previous.description.schedule.action, "task_queue", None)
        if not move and queue and queue != schedule.action.task_queue:
            left_on = queue
            return None  # no update
        _refuse_to_unseal(client, previous.description.schedule.action)
        schedule.state = previous.description.schedule.state
        return ScheduleUpdate(schedule=schedule)

    await client.get_schedule_handle(schedule_id).update(update)
    return f"left on task queue {left_on}" if left_on else "updated"


def _refuse_to_unseal(client: Client, action) -> None:
    """A process without the key must not replace an encrypted schedule's input with plaintext
    (a worker started without PRESSROOM_ENCRYPTION_KEY would, at its start, for every schedule)."""


    stored = [arg for arg in getattr(action, "args", ()) if isinstance(arg, Payload)]
    if isinstance(client.data_converter.payload_codec, KeylessCodec):
        try:
            KeylessCodec.refuse_encrypted(stored)
        except EncryptionKeyError as error:
            raise ConfigurationError(f"this namespace's schedules are encrypted: {error}") from None
