"""The remote codec endpoint for the Temporal Web UI and CLI: POST /decode and /encode.

With histories encrypted (pressroom/codec.py), the Web UI shows ciphertext until it is pointed at
this server ("Codec Server" in the UI's settings, or the dev server's --ui-codec-endpoint). The
browser sends the payloads here and shows what comes back, so the key never leaves this process.

Every request must be addressed to this server by name (its Host header: the address it listens
on, or a name given with --server-name), so a page whose domain was re-pointed at 127.0.0.1 (DNS
rebinding) is refused; a browser's request must come from the Web UI's origin; and with
PRESSROOM_CODEC_TOKEN set every call carries `Authorization: Bearer <token>`. Without a token it
runs only on loopback and only when the operator asks for it (`--allow-no-token`). Every refusal is
one line of JSON, `{"message": …}`: 400 for a body that is not a Payloads object, 401, 403, 413.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import secrets
from collections.abc import Iterable

from aiohttp import web
from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from pressroom.codec import EncryptionCodec
from pressroom.errors import PressroomError

logger = logging.getLogger(__name__)

_ALLOWED_HEADERS = "Content-Type, X-Namespace, Authorization"
# A payload may hold up to Temporal's 2 MiB blob limit, and base64 inside JSON adds a third.
MAX_BODY_BYTES = 8 * 1024 * 1024
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to any interface


def host_names(host: str, server_names: Iterable[str] = ()) -> frozenset[str]:
    """The names a request may address: the listening address (unless a wildcard), the loopback
    names when it listens there, and the names the operator gave."""
    names = {name.strip().lower() for name in server_names if name.strip()}
    if host not in ("0.0.0.0", "::", ""):
        names.add(host.strip("[]").lower())
    if is_loopback(host):
        names |= _LOOPBACK_NAMES
    return frozenset(names)


def name_in_host_header(header: str) -> str:
    """`name:port`, `name` or `[v6]:port` → the name in lower case; "" when malformed."""
    header = header.strip().lower()
    if header.startswith("["):
        end = header.find("]")
        rest = header[end + 1:] if end > 0 else "?"
        return header[1:end] if not rest or (rest.startswith(":") and rest[1:].isdigit()) else ""
    name, _, port = header.partition(":")
    return name if not port or port.isdigit() else ""


def _refusal(status: int, message: str) -> web.Response:
    return web.json_response({"message": message}, status=status)


def build_app(codec: EncryptionCodec, *, ui_origin: str, token: str = "",
              allowed_hosts: frozenset[str] = _LOOPBACK_NAMES) -> web.Application:
    def cors(response: web.StreamResponse, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Origin") == ui_origin:
            response.headers.update({"Access-Control-Allow-Origin": ui_origin,
                                     "Access-Control-Allow-Methods": "POST, OPTIONS",
                                     "Access-Control-Allow-Headers": _ALLOWED_HEADERS,
                                     "Access-Control-Allow-Credentials": "true"})
        return response

    @web.middleware
    async def guard(request: web.Request, handler) -> web.StreamResponse:
        if name_in_host_header(request.headers.get("Host", "")) not in allowed_hosts:
            return _refusal(403, "this codec server is not addressed by that Host name (see --server-name)")
        origin = request.headers.get("Origin")
        if origin is not None and origin != ui_origin:
            return _refusal(403, "requests from this Origin are refused (only the Web UI's --ui-origin)")
        try:
            return await handler(request)
        except web.HTTPException as error:  # 404, 405, 413 …: one line, never aiohttp's page
            return _refusal(error.status, error.reason)
        except Exception as error:  # noqa: BLE001 (never a traceback to the caller, never payload text in the log)
            logger.error("codec server: %s on %s %s", type(error).__name__, request.method, request.path)
            return _refusal(500, "the codec server failed; see its log")

    def handler(transform):
        async def handle(request: web.Request) -> web.StreamResponse:
            if request.method == "OPTIONS":
                return cors(web.Response(status=200), request)
            if request.method != "POST":
                return _refusal(405, "use POST")
            given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
            if token and not secrets.compare_digest(given, f"Bearer {token}".encode()):
                return cors(_refusal(401, "a valid bearer token is required"), request)
            try:
                payloads = _read_payloads(await request.read())
                result = Payloads(payloads=await transform(payloads.payloads))
            except web.HTTPRequestEntityTooLarge:
                return cors(_refusal(413, f"the body is larger than {MAX_BODY_BYTES} bytes"), request)
            except ValueError as error:  # a malformed body, or an EncryptionKeyError naming the payload
                return cors(_refusal(400, str(error)), request)
            return cors(web.json_response(json_format.MessageToDict(result)), request)
        return handle

    app = web.Application(middlewares=[guard], client_max_size=MAX_BODY_BYTES)
    app.router.add_route("*", "/decode", handler(codec.decode))
    app.router.add_route("*", "/encode", handler(codec.encode))
    return app


def _read_payloads(body: bytes) -> Payloads:
    """The body as a Payloads object, or ValueError with one line saying what is wrong."""
    try:
        document = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("the body is not UTF-8 text") from None
    except (ValueError, RecursionError):
        raise ValueError("the body is not JSON") from None
    try:
        return json_format.ParseDict(document, Payloads())
    except (json_format.ParseError, RecursionError, TypeError, AttributeError):
        raise ValueError("the body is not a JSON Payloads object ({\"payloads\": [{\"metadata\": …, "
                         "\"data\": base64}]})") from None


async def serve(codec: EncryptionCodec, *, host: str, port: int, ui_origin: str, token: str = "",
                allow_no_token: bool = False, server_names: Iterable[str] = ()) -> web.AppRunner:
    """Listen on host:port. Without a token only on loopback and only when asked: CORS binds
    browsers, not curl, and any local process could otherwise decrypt every history."""
    if not token and not is_loopback(host):
        raise PressroomError(f"the codec server will not listen on {host} without PRESSROOM_CODEC_TOKEN: anyone who "
                             "can reach it could decrypt every history (set a token, or keep --host 127.0.0.1)")
    if not token and not allow_no_token:
        raise PressroomError("the codec server needs PRESSROOM_CODEC_TOKEN: without one any local process could "
                             "decrypt every history (set it, or on loopback pass --allow-no-token)")
    if not token:
        logger.warning("codec server without PRESSROOM_CODEC_TOKEN (--allow-no-token): any process on this "
                       "machine can decrypt histories")
    runner = web.AppRunner(build_app(codec, ui_origin=ui_origin, token=token,
                                     allowed_hosts=host_names(host, server_names)), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner

