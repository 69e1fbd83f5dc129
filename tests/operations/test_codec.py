"""Encrypted payloads: the raw history holds no member address; the codec server reads it back."""

from __future__ import annotations

import base64
import json
import uuid

import httpx
import pytest
from pydantic import BaseModel
from temporalio.client import Client

from devstack.servers import free_port
from pressroom.codec import EncryptionCodec, EncryptionKeyError, new_key_entry, parse_keys
from pressroom.codec_server import serve
from pressroom.settings import ConfigurationError, load_settings
from pressroom.temporal import data_converter

ADDRESS = "alice.secret@example.com"


class Greeting(BaseModel):
    member_email: str


async def client_for(env, **settings) -> Client:
    return await Client.connect(env.client.service_client.config.target_host,
                                data_converter=data_converter(load_settings(**settings)))


async def start_unhandled_run(client: Client) -> str:
    """A run nobody works on: its start event alone carries the input payload."""
    workflow_id = f"codec-{uuid.uuid4().hex[:8]}"
    await client.start_workflow("NobodyRunsThis", Greeting(member_email=ADDRESS), id=workflow_id,
                                task_queue=f"nobody-{uuid.uuid4().hex[:8]}")
    return workflow_id


async def test_encrypted_history_hides_the_address_and_the_codec_server_shows_it(dev_env):
    key = new_key_entry("k1")
    encrypted = await client_for(dev_env, encryption_key=key)
    workflow_id = await start_unhandled_run(encrypted)

    history = await dev_env.client.get_workflow_handle(workflow_id).fetch_history()
    assert ADDRESS.encode() not in history.to_json().encode()
    assert ADDRESS.encode() not in b"".join(event.SerializeToString() for event in history.events)
    started = json.loads(history.to_json())["events"][0]["workflowExecutionStartedEventAttributes"]
    assert base64.b64decode(started["input"]["payloads"][0]["metadata"]["encryption-key-id"]) == b"k1"

    port, origin = free_port(), "http://localhost:8233"
    runner = await serve(EncryptionCodec.from_text(key), host="127.0.0.1", port=port, ui_origin=origin)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            answer = await http.post("/decode", json=started["input"], headers={"Origin": origin})
            refused = await http.post("/decode", content="not json")
    finally:
        await runner.cleanup()
    assert answer.status_code == 200
    assert answer.headers["Access-Control-Allow-Origin"] == origin
    decoded = base64.b64decode(answer.json()["payloads"][0]["data"])
    assert json.loads(decoded) == {"member_email": ADDRESS}
    assert refused.status_code == 400 and "Payloads" in refused.json()["message"]


async def test_without_a_key_nothing_changes(dev_env):
    plain = await client_for(dev_env)
    workflow_id = await start_unhandled_run(plain)
    history = await dev_env.client.get_workflow_handle(workflow_id).fetch_history()
    payload = history.events[0].workflow_execution_started_event_attributes.input.payloads[0]
    assert json.loads(payload.data) == {"member_email": ADDRESS}


async def test_keys_rotate_old_payloads_still_decode():
    old, new = new_key_entry("k1"), new_key_entry("k2")
    plain = data_converter().payload_converter.to_payloads([Greeting(member_email=ADDRESS)])
    sealed = await EncryptionCodec.from_text(old).encode(plain)
    rotated = EncryptionCodec.from_text(f"{new},{old}")
    opened = await rotated.decode(sealed)
    assert ADDRESS.encode() in opened[0].data
    resealed = await rotated.encode(opened)
    assert resealed[0].metadata["encryption-key-id"] == b"k2"
    with pytest.raises(EncryptionKeyError, match="'k2'"):
        await EncryptionCodec.from_text(old).decode(resealed)


@pytest.mark.parametrize("text, words", [
    ("k1", "id:base64key"),
    ("k1:not*base64", "not valid base64"),
    ("k1:" + base64.b64encode(b"short").decode(), "32 bytes"),
])
def test_malformed_key_is_one_line_naming_the_variable(text, words):
    with pytest.raises(ConfigurationError) as raised:
        load_settings(encryption_key=text)
    message = str(raised.value)
    assert message.startswith("PRESSROOM_ENCRYPTION_KEY is invalid") and words in message
    assert "\n" not in message


def test_a_key_entry_round_trips():
    entry = new_key_entry("k9")
    assert list(parse_keys(entry)) == ["k9"]


def test_the_codec_server_refuses_to_listen_beyond_loopback_without_a_token():
    from tests.foundation.test_cli import assert_one_line_error, pressroom

    result = pressroom("codec-server", "--host", "0.0.0.0", "--port", str(free_port()),
                       env={"PRESSROOM_ENCRYPTION_KEY": new_key_entry(), "PRESSROOM_CODEC_TOKEN": ""})
    assert_one_line_error(result, "will not listen on 0.0.0.0 without PRESSROOM_CODEC_TOKEN", "decrypt")


async def test_the_codec_server_answers_401_to_a_wrong_token_and_decodes_for_the_right_one():
    codec = EncryptionCodec.from_text(new_key_entry())
    port = free_port()
    runner = await serve(codec, host="127.0.0.1", port=port, ui_origin="http://localhost:8233", token="right-token")
    sealed = await codec.encode([data_converter().payload_converter.to_payloads([ADDRESS])[0]])
    from google.protobuf import json_format
    from temporalio.api.common.v1 import Payloads

    body = json_format.MessageToJson(Payloads(payloads=sealed))
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            for headers in ({}, {"Authorization": "Bearer wrong-token"}, {"Authorization": "right-token"}):
                refused = await http.post("/decode", content=body, headers=headers)
                assert refused.status_code == 401 and ADDRESS not in refused.text
            decoded = await http.post("/decode", content=body, headers={"Authorization": "Bearer right-token"})
            assert decoded.status_code == 200 and base64.b64encode(json.dumps(ADDRESS).encode()).decode() \
                in decoded.text
    finally:
        await runner.cleanup()
