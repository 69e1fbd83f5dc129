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
import os
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"
_NONCE_BYTES = 12


class EncryptionKeyError(ValueError):
    """PRESSROOM_ENCRYPTION_KEY is malformed, or a payload names a key we do not have."""


def parse_keys(text: str) -> dict[str, bytes]:
    """`id:base64key,...` → {id: key}, in the order given (the first one encrypts)."""
    keys: dict[str, bytes] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        key_id, sep, encoded = entry.partition(":")
        if not sep or not key_id.strip():
            raise EncryptionKeyError("each key must be written id:base64key (for example k1:…)")
        try:
            key = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise EncryptionKeyError(f"key {key_id.strip()!r} is not valid base64") from None
        if len(key) != 32:
            raise EncryptionKeyError(f"key {key_id.strip()!r} must be 32 bytes (AES-256), got {len(key)}")
        keys[key_id.strip()] = key
    if not keys:
        raise EncryptionKeyError("no key given")
    return keys


def new_key_entry(key_id: str = "k1") -> str:
    """A fresh `id:base64key` entry for PRESSROOM_ENCRYPTION_KEY."""
    return f"{key_id}:{base64.b64encode(os.urandom(32)).decode()}"


class EncryptionCodec(PayloadCodec):
    """AES-GCM over each serialised payload; the key id is authenticated as associated data."""

    def __init__(self, keys: dict[str, bytes]) -> None:
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keys.items()}
        self._current = next(iter(keys))

    @classmethod
    def from_text(cls, text: str) -> EncryptionCodec:
        return cls(parse_keys(text))

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
        opened = []
        for payload in payloads:
            if payload.metadata.get("encoding") != ENCODING:
                opened.append(payload)  # written before encryption was turned on
                continue
            key_id = payload.metadata.get(KEY_ID, b"").decode()
            cipher = self._ciphers.get(key_id)
            if cipher is None:
                raise EncryptionKeyError(f"a payload is encrypted with key {key_id!r}, which "
                                         "PRESSROOM_ENCRYPTION_KEY does not list")
            nonce, sealed = payload.data[:_NONCE_BYTES], payload.data[_NONCE_BYTES:]
            try:
                opened.append(Payload.FromString(cipher.decrypt(nonce, sealed, key_id.encode())))
            except InvalidTag:
                raise EncryptionKeyError(f"a payload does not decrypt with key {key_id!r}: "
                                         "it was altered, or that id names a different key") from None
        return opened
