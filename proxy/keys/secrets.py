"""Runtime keys' secrets: made, digested and hinted — the one place a secret is seen whole.

Owns minting (`keys.prefix` + 43 URL-safe characters: 32 random bytes, as OpenAI-style keys look,
so secret scanners and people recognise them), the digest the store keeps (HMAC-SHA256 under the
install's pepper, proxy/keys/pepper.py: a copy of the store alone finds no key, and checking a
presented key is one HMAC and one dict lookup), the hint shown instead (`sk-…a1b2`), and the seal
of an idempotent answer kept for an hour (AES-GCM under a key derived from the pepper: the store
never holds a secret in the clear). Pure.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

SECRET_BYTES = 32


def mint(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(SECRET_BYTES)


def digest(secret: str, pepper: bytes) -> str:
    return hmac.new(pepper, secret.encode(), hashlib.sha256).hexdigest()


def hint(secret: str, prefix: str) -> str:
    shown = prefix if secret.startswith(prefix) else secret[:3]
    return f"{shown}…{secret[-4:]}"


class Sealer:
    """Seals and opens bytes under a key derived from the pepper (AES-GCM, a fresh nonce each time)."""

    def __init__(self, pepper: bytes) -> None:
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"llm-proxy idempotency").derive(pepper)
        self._aead = AESGCM(key)

    def seal(self, plain: bytes) -> bytes:
        nonce = os.urandom(12)
        return nonce + self._aead.encrypt(nonce, plain, None)

    def open(self, sealed: bytes) -> bytes:
        return self._aead.decrypt(sealed[:12], sealed[12:], None)
