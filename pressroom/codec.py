"""Encrypted payloads: with PRESSROOM_ENCRYPTION_KEY set, Temporal stores only ciphertext.

Every payload (workflow and activity inputs, results, signals, queries, memos) and every failure
message is sealed with AES-256-GCM before it leaves the process. The key id travels in the
payload's metadata, so keys rotate: the first key of the variable encrypts, every key listed
decrypts. `pressroom codec-server` serves the same codec over HTTP for the Web UI's "remote codec
endpoint", so authorised people still read histories in clear.

PRESSROOM_ENCRYPTION_KEY is a comma-separated list of `id:base64key` (32-byte keys), newest
first, for example `k2:<base64>,k1:<base64>`. Make a key with `pressroom codec-server --new-key`.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import re
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"
_NONCE_BYTES = 12
_TAG_BYTES = 16

logger = logging.getLogger(__name__)


class EncryptionKeyError(ValueError):
    """PRESSROOM_ENCRYPTION_KEY is malformed, or a payload names a key we do not have."""


class PlaintextPayloadError(EncryptionKeyError):
    """A process with a key met a payload nobody encrypted, outside a migration window."""


# A key id is a short name; anything else (a key pasted before its id, a stray value) is never echoed.
_KEY_ID = re.compile(r"[A-Za-z0-9_.-]{1,16}")


def _looks_like_key(text: str) -> bool:
    try:
        return len(base64.b64decode(text, validate=True)) == 32
    except (binascii.Error, ValueError):
        return False


def _parse_entry(position: int, entry: str) -> tuple[str, bytes]:
    """One `id:base64key` entry; errors name its position and the problem, never its text."""
    where = f"entry {position}"
    key_id, sep, encoded = (part.strip() for part in entry.partition(":"))
    if not sep:
        raise EncryptionKeyError(f"{where} has no ':'; write each key as id:base64key (for example k1:…)")
    if not _KEY_ID.fullmatch(key_id):
        if _looks_like_key(key_id) and _KEY_ID.fullmatch(encoded):
            raise EncryptionKeyError(f"{where} is written base64key:id; write it id:base64key (for example k1:…)")
        raise EncryptionKeyError(f"{where}: the key id before ':' must be 1 to 16 letters, digits, '.', '_' or '-'")
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise EncryptionKeyError(f"{where} (id {key_id!r}): the key after ':' is not valid base64") from None
    if len(key) != 32:
        raise EncryptionKeyError(f"{where} (id {key_id!r}): the key must be 32 bytes (AES-256), got {len(key)}")
    return key_id, key


def parse_keys(text: str) -> dict[str, bytes]:
    """`id:base64key,...` → {id: key}, in the order given (the first one encrypts)."""
    keys: dict[str, bytes] = {}
    for position, entry in enumerate((part.strip() for part in text.split(",")), start=1):
        if not entry:
            continue
        key_id, key = _parse_entry(position, entry)
        if key_id in keys:
            raise EncryptionKeyError(f"entry {position} repeats the key id {key_id!r}; each id names one key")
        keys[key_id] = key
    if not keys:
        raise EncryptionKeyError("no key given")
    return keys


def new_key_entry(key_id: str = "k1") -> str:
    """A fresh `id:base64key` entry for PRESSROOM_ENCRYPTION_KEY."""
    return f"{key_id}:{base64.b64encode(os.urandom(32)).decode()}"


def _key_id_of(payload: Payload) -> str:
    key_id = payload.metadata.get(KEY_ID, b"").decode(errors="replace")
    if not _KEY_ID.fullmatch(key_id):
        raise EncryptionKeyError("an encrypted payload's key id is missing or malformed: it was altered")
    return key_id


class EncryptionCodec(PayloadCodec):
    """AES-GCM over each serialised payload; the key id is authenticated as associated data.

    A payload that is not encrypted is refused: in a keyed deployment it was written by a process
    started without the key, and taking it would let plaintext in unnoticed. `allow_plaintext`
    (PRESSROOM_CODEC_ALLOW_PLAINTEXT) opens a migration window for runs started before encryption,
    and logs it the first time it lets one through.
    """

    def __init__(self, keys: dict[str, bytes], *, allow_plaintext: bool = False) -> None:
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keys.items()}
        self._current = next(iter(keys))
        self._allow_plaintext = allow_plaintext
        self._plaintext_logged = False

    @classmethod
    def from_text(cls, text: str, *, allow_plaintext: bool = False) -> EncryptionCodec:
        return cls(parse_keys(text), allow_plaintext=allow_plaintext)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        key_id = self._current
        cipher = self._ciphers[key_id]
        sealed = []
        for payload in payloads:
            nonce = os.urandom(_NONCE_BYTES)
            data = nonce + cipher.encrypt(nonce, payload.SerializeToString(), key_id.encode())
            sealed.append(Payload(metadata={"encoding": ENCODING, KEY_ID: key_id.encode()}, data=data))
        return sealed

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._open(payload) if payload.metadata.get("encoding") == ENCODING else self._plaintext(payload)
                for payload in payloads]

    def _plaintext(self, payload: Payload) -> Payload:
        if not self._allow_plaintext:
            raise PlaintextPayloadError(
                "a payload is not encrypted although PRESSROOM_ENCRYPTION_KEY is set: a process without the key "
                "wrote it (set the key on every worker and CLI), or it predates encryption (set "
                "PRESSROOM_CODEC_ALLOW_PLAINTEXT=true while such runs finish)")
        if not self._plaintext_logged:
            self._plaintext_logged = True
            logger.warning("PRESSROOM_CODEC_ALLOW_PLAINTEXT is on: accepting payloads that are not encrypted "
                           "(a migration window; turn it off once no run started without the key remains)")
        return payload

    def _open(self, payload: Payload) -> Payload:
        key_id = _key_id_of(payload)
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise EncryptionKeyError(f"a payload is encrypted with key {key_id!r}, which "
                                     "PRESSROOM_ENCRYPTION_KEY does not list")
        if len(payload.data) < _NONCE_BYTES + _TAG_BYTES:
            raise EncryptionKeyError(f"a payload encrypted with key {key_id!r} is too short: it was altered")
        nonce, sealed = payload.data[:_NONCE_BYTES], payload.data[_NONCE_BYTES:]
        try:
            return Payload.FromString(cipher.decrypt(nonce, sealed, key_id.encode()))
        except InvalidTag:
            raise EncryptionKeyError(f"a payload does not decrypt with key {key_id!r}: "
                                     "it was altered, or that id names a different key") from None


class KeylessCodec(PayloadCodec):
    """For a process without PRESSROOM_ENCRYPTION_KEY: writes plaintext, and names the missing key
    when it meets an encrypted payload instead of failing on an unknown encoding."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        self.refuse_encrypted(payloads)
        return list(payloads)

    @staticmethod
    def refuse_encrypted(payloads: Sequence[Payload]) -> None:
        """EncryptionKeyError naming the key when one of `payloads` is encrypted."""
        for payload in payloads:
            if payload.metadata.get("encoding") == ENCODING:
                raise EncryptionKeyError(
                    f"a payload is encrypted (key {_key_id_of(payload)!r}) but PRESSROOM_ENCRYPTION_KEY is not set "
                    "on this process: set it as on the other workers, or this process writes plaintext")
