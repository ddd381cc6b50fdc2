"""Keys and DSSE envelopes: who may sign a release record, and whether a signature is theirs.

The record chain (``orchestrator.records.releases``) is a checksum: anyone who may create ConfigMaps in a
release's namespace can append a record with valid hashes. A signature by a key that a namespace
editor does not hold is what tells deployctl's records from theirs (docs/security.md#signed-records).

Two small interfaces keep where a key lives apart from how records use it:

- ``Signer``: a ``keyid`` and ``sign(pae) -> signature``. ``KeySigner`` holds an Ed25519 or
  ECDSA P-256 private key from a PEM file (the CLI's ``--signing-key``) or a Secret (the
  controller); a hardware or KMS key is another class with the same two members.
- ``PublicKeys``: the trusted public keys, by keyid, that verify a signature.

The envelope is DSSE v1 (github.com/secure-systems-lab/dsse): the signature is over the
pre-authentication encoding ``PAE(payloadType, payload)``, and the envelope is
``{"payload": b64, "payloadType": ..., "signatures": [{"keyid": ..., "sig": b64}]}``, so any DSSE
verifier (securesystemslib's, in-toto's) checks it. A keyid is the sha256 of the public key's DER
SubjectPublicKeyInfo, in hex: the same key gets the same id anywhere, and a tool can recompute it.
Only this module imports ``cryptography``.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import os
import pathlib
from collections.abc import Iterable, Mapping
from typing import Protocol

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from orchestrator import errors

PAYLOAD_TYPE = "application/vnd.in-toto+json"
# A key file is a few hundred bytes; a bound keeps a mistaken path (/dev/zero, a log) from being read whole.
_KEY_FILE_LIMIT = 64 * 1024

PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey
PublicKey = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey


class SignatureError(Exception):
    """An envelope that does not verify; the message says why, for the caller to name the record."""


class Signer(Protocol):
    """What signs a record: a key file today, a hardware or KMS key later."""

    @property
    def keyid(self) -> str: ...

    def sign(self, data: bytes) -> bytes: ...


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what is signed, so that the type cannot be swapped."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def keyid_of(public: PublicKey) -> str:
    der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def public_pem(public: PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


@dataclasses.dataclass(frozen=True)
class KeySigner:
    """An Ed25519 or ECDSA P-256 private key held in memory (from a key file or a Secret)."""

    private: PrivateKey
    source: str  # where the key came from, for messages

    @property
    def keyid(self) -> str:
        return keyid_of(self.private.public_key())

    @property
    def public(self) -> PublicKey:
        return self.private.public_key()

    def sign(self, data: bytes) -> bytes:
        if isinstance(self.private, ed25519.Ed25519PrivateKey):
            return self.private.sign(data)
        return self.private.sign(data, ec.ECDSA(hashes.SHA256()))


@dataclasses.dataclass(frozen=True)
class PublicKeys:
    """The public keys a reader trusts, by keyid; empty when none is configured."""

    keys: Mapping[str, PublicKey] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, keys: Iterable[PublicKey]) -> PublicKeys:
        return cls({keyid_of(k): k for k in keys})

    def __bool__(self) -> bool:
        return bool(self.keys)

    def with_(self, other: PublicKeys) -> PublicKeys:
        return PublicKeys({**self.keys, **other.keys})

    def verify(self, keyid: str, signature: bytes, data: bytes) -> bool:
        public = self.keys.get(keyid)
        if public is None:
            return False
        try:
            if isinstance(public, ed25519.Ed25519PublicKey):
                public.verify(signature, data)
            else:
                public.verify(signature, data, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            return False
        return True


# -- envelopes ------------------------------------------------------------------------------------


def envelope(payload: bytes, signer: Signer, payload_type: str = PAYLOAD_TYPE) -> dict[str, object]:
    """A DSSE envelope of ``payload`` with one signature by ``signer``."""
    signature = signer.sign(pae(payload_type, payload))
    return {
        "payload": base64.b64encode(payload).decode(),
        "payloadType": payload_type,
        "signatures": [{"keyid": signer.keyid, "sig": base64.b64encode(signature).decode()}],
    }


def open_envelope(env: object, keys: PublicKeys, payload_type: str = PAYLOAD_TYPE) -> tuple[bytes, str]:
    """The payload of ``env`` and the keyid that signed it; SignatureError when no trusted key did."""
    if not isinstance(env, Mapping) or not isinstance(env.get("signatures"), list):
        raise SignatureError("its envelope is not a DSSE envelope (payload, payloadType, signatures)")
    if env.get("payloadType") != payload_type:
        raise SignatureError(f"its envelope's payloadType is {env.get('payloadType')!r}, not {payload_type!r}")
    try:
        payload = base64.b64decode(str(env.get("payload", "")), validate=True)
    except (binascii.Error, ValueError):
        raise SignatureError("its envelope's payload is not base64") from None
    signed = pae(payload_type, payload)
    keyids = []
    for entry in env["signatures"]:
        if not isinstance(entry, Mapping):
            continue
        keyid = str(entry.get("keyid", ""))
        keyids.append(keyid[:16] or "(none)")
        try:
            sig = base64.b64decode(str(entry.get("sig", "")), validate=True)
        except (binascii.Error, ValueError):
            continue
        if keys.verify(keyid, sig, signed):
            return payload, keyid
    if not keyids:
        raise SignatureError("its envelope has no signature")
    trusted = ", ".join(k[:16] for k in keys.keys) or "none"
    raise SignatureError(
        f"no signature verifies with a trusted key (signed by keyid {', '.join(keyids)}; trusted: {trusted})"
    )


# -- key files ------------------------------------------------------------------------------------


def _read_key_file(path: str, what: str) -> bytes:
    p = pathlib.Path(path)
    if not p.is_file():
        raise errors.UsageError(f"{what} {path} is not a regular file; give the PEM file `deployctl keygen` wrote")
    try:
        with p.open("rb") as f:
            data = f.read(_KEY_FILE_LIMIT + 1)
    except OSError as e:
        raise errors.UsageError(f"cannot read {what} {path}: {e.strerror}") from None
    if len(data) > _KEY_FILE_LIMIT:
        raise errors.UsageError(f"{what} {path} is larger than {_KEY_FILE_LIMIT} bytes; it is not a PEM key file")
    return data


def _checked_private(key: object, source: str) -> PrivateKey:
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key
    if isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1):
        return key
    raise errors.UsageError(
        f"the signing key {source} is a {type(key).__name__}; deployctl signs with Ed25519 or ECDSA P-256 keys "
        "(create one with `deployctl keygen`)"
    )


def signer_from_pem(data: bytes, source: str) -> KeySigner:
    """A signer from an unencrypted PKCS#8 PEM private key (a key file, a Secret's value)."""
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as e:
        raise errors.UsageError(
            f"the signing key {source} is not an unencrypted PEM private key ({errors.shorten(str(e), 120)}); "
            "create one with `deployctl keygen`"
        ) from None
    return KeySigner(_checked_private(key, source), source)


def load_signer(path: str) -> KeySigner:
    """The private key file of ``--signing-key`` (DEPLOYCTL_SIGNING_KEY)."""
    return signer_from_pem(_read_key_file(path, "the signing key"), path)


def public_keys_from_pem(data: bytes, source: str) -> PublicKeys:
    """Every public key in a PEM bundle (one or more ``PUBLIC KEY`` blocks)."""
    marker = b"-----END PUBLIC KEY-----"
    blocks = [b + marker for b in data.split(marker) if b.strip()]
    found: list[PublicKey] = []
    for block in blocks:
        try:
            key = serialization.load_pem_public_key(block.strip())
        except (ValueError, UnsupportedAlgorithm) as e:
            raise errors.UsageError(
                f"the public key file {source} holds a block that is not a PEM public key "
                f"({errors.shorten(str(e), 120)}); give the .pub file `deployctl keygen` wrote"
            ) from None
        if not isinstance(key, ed25519.Ed25519PublicKey) and not (
            isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1)
        ):
            raise errors.UsageError(f"the public key in {source} is not an Ed25519 or ECDSA P-256 key")
        found.append(key)
    if not found:
        raise errors.UsageError(f"the public key file {source} holds no PEM public key")
    return PublicKeys.of(found)


def load_public_keys(paths: Iterable[str]) -> PublicKeys:
    """The public keys of ``--verify-key``/``--key`` files (each may hold several)."""
    keys = PublicKeys()
    for path in paths:
        keys = keys.with_(public_keys_from_pem(_read_key_file(path, "the public key file"), path))
    return keys


def generate(private_path: pathlib.Path, public_path: pathlib.Path, algorithm: str = "ed25519") -> KeySigner:
    """Write a new private key (mode 0600, never over an existing file) and its public key."""
    private: PrivateKey = (
        ed25519.Ed25519PrivateKey.generate() if algorithm == "ed25519" else ec.generate_private_key(ec.SECP256R1())
    )
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    for path in (private_path, public_path):
        if path.exists():
            raise errors.UsageError(f"{path} exists; deployctl keygen never overwrites a key: choose another path")
    try:
        fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        public_path.write_bytes(public_pem(private.public_key()))
    except OSError as e:
        raise errors.UsageError(f"cannot write the key files: {e.strerror} ({e.filename})") from None
    return KeySigner(private, str(private_path))
