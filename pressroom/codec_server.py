"""The remote codec endpoint for the Temporal Web UI and CLI: POST /decode and /encode.

With histories encrypted (pressroom/codec.py), the Web UI shows ciphertext until it is pointed at
this server ("Codec Server" in the UI's settings, or the dev server's --ui-codec-endpoint). The
browser sends the payloads here and shows what comes back, so the key never leaves this process.
Only the Web UI's origin may call it from a browser; with PRESSROOM_CODEC_TOKEN set, every call
must also carry `Authorization: Bearer <token>` (turn on "pass access token" in the UI).
"""

from __future__ import annotations

import secrets

from aiohttp import web
from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from pressroom.codec import EncryptionCodec, EncryptionKeyError
from pressroom.errors import PressroomError

_ALLOWED_HEADERS = "Content-Type, X-Namespace, Authorization"


def build_app(codec: EncryptionCodec, *, ui_origin: str, token: str = "") -> web.Application:
    def cors(response: web.StreamResponse, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Origin") == ui_origin:
            response.headers.update({"Access-Control-Allow-Origin": ui_origin,
                                     "Access-Control-Allow-Methods": "POST, OPTIONS",
                                     "Access-Control-Allow-Headers": _ALLOWED_HEADERS,
                                     "Access-Control-Allow-Credentials": "true"})
        return response

    def handler(transform):
        async def handle(request: web.Request) -> web.StreamResponse:
            if request.method == "OPTIONS":
                return cors(web.Response(status=200), request)
            if token and not secrets.compare_digest(request.headers.get("Authorization", ""), f"Bearer {token}"):
                return cors(web.json_response({"message": "a valid bearer token is required"}, status=401), request)
            try:
                payloads = json_format.Parse(await request.text(), Payloads())
                result = Payloads(payloads=await transform(payloads.payloads))
            except json_format.ParseError:
                return cors(web.json_response({"message": "the body is not a JSON Payloads object"}, status=400),
                            request)
            except EncryptionKeyError as error:
                return cors(web.json_response({"message": str(error)}, status=400), request)
            return cors(web.json_response(json_format.MessageToDict(result)), request)
        return handle

    app = web.Application()
    app.router.add_route("*", "/decode", handler(codec.decode))
    app.router.add_route("*", "/encode", handler(codec.encode))
    return app


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to any interface


async def serve(codec: EncryptionCodec, *, host: str, port: int, ui_origin: str, token: str = "") -> web.AppRunner:
    """Listen on host:port; beyond loopback only with a token, since CORS binds browsers but not curl."""
    if not token and not is_loopback(host):
        raise PressroomError(f"the codec server will not listen on {host} without PRESSROOM_CODEC_TOKEN: anyone who "
                             "can reach it could decrypt every history (set a token, or keep --host 127.0.0.1)")
    runner = web.AppRunner(build_app(codec, ui_origin=ui_origin, token=token), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
