"""Encrypted payloads: the raw history holds no member address; the codec server reads it back."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import timedelta

import httpx
import pytest
from pydantic import BaseModel
from temporalio import workflow
from temporalio.api.failure.v1 import Failure
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from devstack.servers import free_port
from frontdoor.codec_server import serve
from pressroom.codec import EncryptionCodec, EncryptionKeyError, new_key_entry, parse_keys
from pressroom.settings import ConfigurationError, load_settings
from pressroom.temporal import data_converter

ADDRESS = "alice.secret@example.com"
TOKEN = "codec-token-" + "7" * 20
BEARER = {"Authorization": f"Bearer {TOKEN}"}


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
    runner = await serve(EncryptionCodec.from_text(key), host="127.0.0.1", port=port, ui_origin=origin,
                         token=TOKEN)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=BEARER) as http:
            answer = await http.post("/decode", json=started["input"], headers={"Origin": origin})
            refused = await http.post("/decode", content="not json")
    finally:
        await runner.cleanup()
    assert answer.status_code == 200
    assert answer.headers["Access-Control-Allow-Origin"] == origin
    decoded = base64.b64decode(answer.json()["payloads"][0]["data"])
    assert json.loads(decoded) == {"member_email": ADDRESS}
    assert refused.status_code == 400 and refused.json() == {"message": "the body is not JSON"}


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




# --- key parsing: every error names the entry and the problem, never the key ------------------

KEY_B64 = base64.b64encode(bytes(range(32))).decode()


@pytest.mark.parametrize("text, words", [
    ("k1", ["entry 1 has no ':'", "id:base64key"]),
    (KEY_B64, ["entry 1 has no ':'"]),
    (f"{KEY_B64}:k1", ["entry 1 is written base64key:id", "id:base64key"]),
    (f"k1:{KEY_B64},{KEY_B64}:k2", ["entry 2 is written base64key:id"]),
    (f":{KEY_B64}", ["entry 1", "key id"]),
    (f"{KEY_B64[:20]}:{KEY_B64}", ["entry 1", "key id before ':'"]),
    ("k1:not*base64", ["entry 1 (id 'k1')", "not valid base64"]),
    (f"k1:{KEY_B64[:-4]}", ["entry 1 (id 'k1')", "32 bytes", "got 30"]),
    (f"k1:{KEY_B64},k1:{KEY_B64}", ["entry 2 repeats the key id 'k1'"]),
    (" , ", ["no key given"]),
])
def test_a_malformed_key_is_one_line_naming_the_entry_never_the_key(text, words):
    with pytest.raises(ConfigurationError) as raised:
        load_settings(encryption_key=text)
    message = str(raised.value)
    assert message.startswith("PRESSROOM_ENCRYPTION_KEY is invalid") and "\n" not in message
    for word in words:
        assert word in message
    for fragment in (KEY_B64, KEY_B64[:12], KEY_B64[-12:], "not*base64"):
        assert fragment not in message


def test_a_key_entry_round_trips():
    entry = new_key_entry("k9")
    assert list(parse_keys(entry)) == ["k9"]


# --- the codec server over real HTTP ------------------------------------------------------------

ORIGIN = "http://localhost:8233"


@pytest.fixture
async def codec_server():
    """A codec server with a token on loopback; yields (base URL, codec, port)."""
    codec = EncryptionCodec.from_text(new_key_entry())
    port = free_port()
    runner = await serve(codec, host="127.0.0.1", port=port, ui_origin=ORIGIN, token=TOKEN,
                         server_names=["codec.internal"])
    yield f"http://127.0.0.1:{port}", codec, port
    await runner.cleanup()


def payloads_json(payloads) -> str:
    from google.protobuf import json_format
    from temporalio.api.common.v1 import Payloads

    return json_format.MessageToJson(Payloads(payloads=payloads))


async def sealed_body(codec: EncryptionCodec) -> str:
    return payloads_json(await codec.encode(data_converter().payload_converter.to_payloads([ADDRESS])))


def assert_one_line_refusal(answer: httpx.Response, status: int, *words: str) -> None:
    assert answer.status_code == status, answer.text
    assert answer.headers["Content-Type"].startswith("application/json")
    assert "\n" not in answer.text and "Traceback" not in answer.text and ADDRESS not in answer.text
    for word in words:
        assert word in answer.json()["message"]


async def test_the_codec_server_answers_401_to_a_wrong_token_and_decodes_for_the_right_one(codec_server):
    base, codec, _ = codec_server
    body = await sealed_body(codec)
    async with httpx.AsyncClient(base_url=base) as http:
        for headers in ({}, {"Authorization": "Bearer wrong-token"}, {"Authorization": TOKEN},
                        {"Authorization": "Bearer é".encode()}):
            assert_one_line_refusal(await http.post("/decode", content=body, headers=headers), 401, "bearer token")
        decoded = await http.post("/decode", content=body, headers=BEARER)
    assert decoded.status_code == 200
    assert base64.b64encode(json.dumps(ADDRESS).encode()).decode() in decoded.text


async def test_a_rebound_host_name_or_a_foreign_origin_is_refused_with_403(codec_server):
    """DNS rebinding: a page on evil.example whose name now points at 127.0.0.1 sends Host:
    evil.example and its own Origin; both are refused even with the right token."""
    base, codec, port = codec_server
    body = await sealed_body(codec)
    async with httpx.AsyncClient(base_url=base, headers=BEARER) as http:
        for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}", "", "[::1",
                     f"localhost:{port}:1"):
            assert_one_line_refusal(await http.post("/decode", content=body, headers={"Host": host}), 403, "Host")
        for origin in ("http://evil.example", "null", ORIGIN + ".evil.example", "http://localhost:8234"):
            for method in ("POST", "OPTIONS"):
                refused = await http.request(method, "/decode", content=body, headers={"Origin": origin})
                assert_one_line_refusal(refused, 403, "Origin")
                assert "Access-Control-Allow-Origin" not in refused.headers
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"LOCALHOST:{port}", "codec.internal",
                     f"codec.internal:{port}"):
            answer = await http.post("/decode", content=body, headers={"Host": host, "Origin": ORIGIN})
            assert answer.status_code == 200, (host, answer.text)
            assert answer.headers["Access-Control-Allow-Origin"] == ORIGIN
        preflight = await http.options("/decode", headers={"Origin": ORIGIN})
        without_origin = await http.post("/decode", content=body)  # the temporal CLI's --codec-endpoint
    assert preflight.status_code == 200 and preflight.headers["Access-Control-Allow-Origin"] == ORIGIN
    assert without_origin.status_code == 200


def test_host_names_of_a_wildcard_listener_are_only_those_given():
    from frontdoor.codec_server import host_names

    assert host_names("0.0.0.0", ["codec.example.com"]) == {"codec.example.com"}
    assert host_names("127.0.0.1") == {"127.0.0.1", "localhost", "::1"}
    assert host_names("10.0.0.5", ["Codec.Example.com "]) == {"10.0.0.5", "codec.example.com"}


async def test_bad_requests_get_a_one_line_4xx_never_a_500(codec_server):
    base, codec, _ = codec_server
    good = (await codec.encode(data_converter().payload_converter.to_payloads([ADDRESS])))[0]
    short = type(good)(metadata=dict(good.metadata), data=good.data[:20])
    altered = type(good)(metadata=dict(good.metadata), data=good.data[:-1] + bytes([good.data[-1] ^ 1]))
    strange_id = type(good)(metadata={**good.metadata, "encryption-key-id": b"\xff" * 10_000}, data=good.data)
    unknown_id = type(good)(metadata={**good.metadata, "encryption-key-id": b"k7"}, data=good.data)
    cases = [
        (b"not json", "not JSON"),
        (b"{\"payloads\": [", "not JSON"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "not"),
        (b'{"payloads": 5}', "Payloads"),
        (b'{"payloads": [{"data": "***"}]}', ""),  # refused as unparsable or as not encrypted
        (b'{"payloads": [{"metadata": {"encoding": 5}}]}', ""),
        (b'{"unknown": []}', "Payloads"),
        (b'"a string"', "Payloads"),
        (payloads_json([short]).encode(), "too short"),
        (payloads_json([altered]).encode(), "does not decrypt"),
        (payloads_json([strange_id]).encode(), "key id is missing or malformed"),
        (payloads_json([unknown_id]).encode(), "'k7'"),
    ]
    async with httpx.AsyncClient(base_url=base, headers=BEARER) as http:
        for body, words in cases:
            answer = await http.post("/decode", content=body)
            assert_one_line_refusal(answer, 400, words)
        huge = await http.post("/decode", content=b"{" + b" " * (9 * 1024 * 1024) + b"}")
        assert_one_line_refusal(huge, 413, "larger than")
        assert_one_line_refusal(await http.get("/decode"), 405, "POST")
        assert_one_line_refusal(await http.post("/elsewhere", content=b"{}"), 404)
        assert (await http.post("/decode", content=await sealed_body(codec))).status_code == 200  # still serving


async def test_a_plaintext_payload_is_refused_unless_the_migration_switch_is_on(caplog):
    key = new_key_entry()
    plain = payloads_json(data_converter().payload_converter.to_payloads([ADDRESS]))
    answers = {}
    for allow in (False, True):
        port = free_port()
        runner = await serve(EncryptionCodec.from_text(key, allow_plaintext=allow), host="127.0.0.1", port=port,
                             ui_origin=ORIGIN, token=TOKEN)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=BEARER) as http:
                answers[allow] = await http.post("/decode", content=plain)
        finally:
            await runner.cleanup()
    assert_one_line_refusal(answers[False], 400, "not encrypted", "PRESSROOM_CODEC_ALLOW_PLAINTEXT=true")
    assert answers[True].status_code == 200 and answers[True].json() == json.loads(plain)
    assert "PRESSROOM_CODEC_ALLOW_PLAINTEXT is on" in caplog.text


# --- the command: a token unless loopback and asked for -----------------------------------------

def test_the_codec_server_refuses_to_listen_beyond_loopback_without_a_token():
    from tests.foundation.test_cli import assert_one_line_error, pressroom

    result = pressroom("codec-server", "--host", "0.0.0.0", "--port", str(free_port()), "--allow-no-token",
                       env={"PRESSROOM_ENCRYPTION_KEY": new_key_entry(), "PRESSROOM_CODEC_TOKEN": ""})
    assert_one_line_error(result, "will not listen on 0.0.0.0 without PRESSROOM_CODEC_TOKEN", "decrypt")


def test_the_codec_server_refuses_to_start_without_a_token_unless_asked():
    from tests.foundation.test_cli import assert_one_line_error, pressroom

    key = new_key_entry()
    result = pressroom("codec-server", "--port", str(free_port()),
                       env={"PRESSROOM_ENCRYPTION_KEY": key, "PRESSROOM_CODEC_TOKEN": ""})
    assert_one_line_error(result, "needs PRESSROOM_CODEC_TOKEN", "--allow-no-token")
    assert key.split(":")[1] not in result.stderr


def test_a_key_written_backwards_stops_the_command_without_printing_it():
    from tests.foundation.test_cli import assert_one_line_error, pressroom

    backwards = f"{KEY_B64}:k1"
    result = pressroom("codec-server", "--port", str(free_port()),
                       env={"PRESSROOM_ENCRYPTION_KEY": backwards, "PRESSROOM_CODEC_TOKEN": TOKEN})
    assert_one_line_error(result, "PRESSROOM_ENCRYPTION_KEY is invalid", "entry 1 is written base64key:id")
    assert KEY_B64[:12] not in result.stderr + result.stdout


async def test_the_command_runs_without_a_token_when_asked_and_warns():
    """The real command, over real HTTP: --allow-no-token serves loopback and says so in its log."""
    import asyncio
    import os
    import subprocess
    import sys

    port, key = free_port(), new_key_entry()
    env = {**os.environ, "PRESSROOM_ENCRYPTION_KEY": key, "PRESSROOM_CODEC_TOKEN": ""}
    process = subprocess.Popen([sys.executable, "-m", "starter", "codec-server", "--port", str(port),
                                "--allow-no-token"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    try:
        body = await sealed_body(EncryptionCodec.from_text(key))
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            for _ in range(600):  # until it listens: a loaded machine starts Python slowly
                try:
                    answer = await http.post("/decode", content=body)
                    break
                except httpx.ConnectError:
                    assert process.poll() is None, process.communicate()
                    await asyncio.sleep(0.1)
            rebound = await http.post("/decode", content=body, headers={"Host": f"evil.example:{port}"})
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=60)
    assert answer.status_code == 200 and base64.b64encode(json.dumps(ADDRESS).encode()).decode() in answer.text
    assert rebound.status_code == 403
    assert "without PRESSROOM_CODEC_TOKEN (--allow-no-token)" in stderr.decode()
    assert key.split(":")[1] not in stderr.decode()


# --- workers: a keyed one refuses plaintext, a keyless one names the missing key ----------------

@workflow.defn(sandboxed=False)
class EchoWorkflow:
    @workflow.run
    async def run(self, text: str) -> str:
        return text


async def first_task_failure(client: Client, workflow_id: str):
    """The failure of the run's first failed workflow task, waiting for it (generous deadline)."""
    import asyncio

    from temporalio.api.enums.v1 import EventType

    for _ in range(600):
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                return event.workflow_task_failed_event_attributes.failure
        await asyncio.sleep(0.1)
    raise AssertionError(f"no workflow task of {workflow_id} failed")


async def run_echo(env, starter: Client, worker_client: Client, *, expect_failure: bool) -> str:
    queue = f"echo-{uuid.uuid4().hex[:8]}"
    workflow_id = f"echo-{uuid.uuid4().hex[:8]}"
    async with Worker(worker_client, task_queue=queue, workflows=[EchoWorkflow]):
        handle = await starter.start_workflow(EchoWorkflow.run, ADDRESS, id=workflow_id, task_queue=queue)
        if not expect_failure:
            return await worker_client.get_workflow_handle(workflow_id).result()
        failure = await first_task_failure(env.client, workflow_id)
        await handle.terminate()
        return str(await worker_client.data_converter.decode_failure(failure))


async def test_a_keyed_worker_refuses_a_run_started_without_the_key(dev_env):
    key = new_key_entry()
    message = await run_echo(dev_env, await client_for(dev_env), await client_for(dev_env, encryption_key=key),
                             expect_failure=True)
    assert "not encrypted" in message and "PRESSROOM_CODEC_ALLOW_PLAINTEXT" in message and ADDRESS not in message


async def test_the_migration_switch_lets_a_keyed_worker_finish_a_plaintext_run(dev_env):
    key = new_key_entry()
    migrating = await client_for(dev_env, encryption_key=key, codec_allow_plaintext=True)
    assert await run_echo(dev_env, await client_for(dev_env), migrating, expect_failure=False) == ADDRESS


async def test_a_worker_without_the_key_names_it_instead_of_writing_plaintext(dev_env):
    key = new_key_entry("k3")
    message = await run_echo(dev_env, await client_for(dev_env, encryption_key=key), await client_for(dev_env),
                             expect_failure=True)
    assert "encrypted (key 'k3')" in message and "PRESSROOM_ENCRYPTION_KEY is not set" in message


async def test_a_process_without_the_key_does_not_replace_an_encrypted_schedule(dev_env):
    """A worker started without the key updates every schedule at its start: it stops there, naming
    the variable, instead of storing the schedule's input as plaintext; a keyed process re-seals a
    plaintext schedule (the way into encryption)."""
    from temporalio.client import Schedule, ScheduleActionStartWorkflow, ScheduleIntervalSpec, ScheduleSpec

    from pressroom.temporal import create_or_update_schedule

    schedule_id = f"codec-schedule-{uuid.uuid4().hex[:8]}"

    def schedule() -> Schedule:
        return Schedule(action=ScheduleActionStartWorkflow("NobodyRunsThis", Greeting(member_email=ADDRESS),
                                                           id=schedule_id, task_queue="nobody"),
                        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(days=1))]))

    async def stored_encoding() -> bytes:
        description = await dev_env.client.get_schedule_handle(schedule_id).describe()
        return description.schedule.action.args[0].metadata["encoding"]

    key = new_key_entry("k5")
    keyed, keyless = await client_for(dev_env, encryption_key=key), await client_for(dev_env)
    try:
        assert await create_or_update_schedule(keyless, schedule_id, schedule()) == "created"
        assert await stored_encoding() == b"json/plain"
        assert await create_or_update_schedule(keyed, schedule_id, schedule()) == "updated"
        assert await stored_encoding() == b"binary/encrypted"
        with pytest.raises(ConfigurationError) as refused:
            await create_or_update_schedule(keyless, schedule_id, schedule())
        assert "encrypted (key 'k5')" in str(refused.value) and "PRESSROOM_ENCRYPTION_KEY is not set" in str(
            refused.value)
        assert await stored_encoding() == b"binary/encrypted"
    finally:
        await dev_env.client.get_schedule_handle(schedule_id).delete()


async def test_with_a_key_a_failures_message_and_stack_are_sealed_too():
    """A failure's message is outside text (a webhook target's refusal, a provider's error): with a
    key it is moved into the failure's encoded attributes and sealed with the payloads."""
    for key, sealed in ((new_key_entry("k1"), True), ("", False)):
        converter = data_converter(load_settings(encryption_key=key))
        failure = Failure()
        await converter.encode_failure(ApplicationError(f"refused: {ADDRESS}", type="WEBHOOK_REFUSED"), failure)
        assert (ADDRESS.encode() not in failure.SerializeToString()) is sealed
        if sealed:
            assert failure.message == "Encoded failure" and failure.encoded_attributes.metadata["encryption-key-id"]
