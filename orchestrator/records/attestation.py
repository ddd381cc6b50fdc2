"""The in-toto Statement a release record is signed as, and the check that a record is what was signed.

A record's signature is a DSSE envelope (``orchestrator.records.signing``) over an in-toto Statement v1
(github.com/in-toto/attestation, spec/v1/statement.md):

- ``subject``: one entry per rendered manifest object, named ``Kind/namespace/name``
  (``Kind/name`` when cluster-scoped), with the sha256 of the object's canonical JSON; and the
  image, named by its repository, with its ``sha256`` digest (when the image is pinned by one);
- ``predicateType``: ``https://deployctl.dev/release/v1``;
- ``predicate``: the record body, exactly ``record.json``: profile hash, plan, gate report,
  actor, and ``prev_hash``, the previous record's hash.

A reader rebuilds the Statement from the stored record and its manifests and holds it equal to the
signed one, so a record, its manifests and its signature stay together: any change to one of
them, or a signature moved from another record, is refused. This module takes plain data; it
sits below ``orchestrator.records.releases``, which attaches envelopes to records.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml

from orchestrator.records import encoding, signing

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://deployctl.dev/release/v1"


# libyaml's loader when PyYAML has it: every command that writes checks every record, manifests
# included, and the pure-Python loader takes seconds for a long history.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _object_digest(obj: dict[str, object]) -> str:
    # Lenient where canonical_json is strict: a YAML date or .nan in a manifest must not make a
    # record unsignable; writer and reader hash the same parsed value the same way.
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return encoding.sha256(text.encode())


def subjects(manifests: bytes, image: str) -> list[dict[str, object]]:
    """The Statement's subjects: each manifest object, then the image digest. ValueError when the
    manifests are not YAML of Kubernetes objects (they were replaced: no signature can cover them)."""
    try:
        objects = [o for o in yaml.load_all(manifests.decode("utf-8"), Loader=_LOADER) if o is not None]
    except (UnicodeDecodeError, yaml.YAMLError) as e:
        raise ValueError(f"its manifests are not YAML ({type(e).__name__})") from None
    found: list[dict[str, object]] = []
    for obj in objects:
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            raise ValueError("its manifests hold a document that is not a Kubernetes object")
        meta = obj["metadata"]
        parts = [
            str(obj.get("kind")),
            *([str(meta["namespace"])] if meta.get("namespace") else []),
            str(meta.get("name")),
        ]
        found.append({"name": "/".join(parts), "digest": {"sha256": _object_digest(obj)}})
    repository, at, digest = image.partition("@sha256:")
    if at:
        found.append({"name": repository, "digest": {"sha256": digest}})
    return found


def statement(body: Mapping[str, object], manifests: bytes) -> dict[str, object]:
    """The in-toto Statement of a record: ``body`` is its ``record.json`` as a dict."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects(manifests, str(body.get("image", ""))),
        "predicateType": PREDICATE_TYPE,
        "predicate": dict(body),
    }


def sign(body: Mapping[str, object], manifests: bytes, signer: signing.Signer) -> dict[str, object]:
    """The DSSE envelope that a new record is stored with."""
    return signing.envelope(encoding.canonical_json(statement(body, manifests)), signer)


def check(body: Mapping[str, object], manifests: bytes, env: object, keys: signing.PublicKeys) -> str:
    """The keyid that signed this record; SignatureError saying why not (unsigned, an unknown key,
    a signature that does not verify, or a Statement that is not this record's)."""
    if env is None:
        raise signing.SignatureError("it is not signed")
    payload, keyid = signing.open_envelope(env, keys)
    try:
        signed = json.loads(payload)
    except ValueError:
        raise signing.SignatureError("its signed payload is not JSON") from None
    try:
        expected = statement(body, manifests)
    except ValueError as e:
        raise signing.SignatureError(str(e)) from None
    if not isinstance(signed, dict) or signed.get("predicate") != expected["predicate"]:
        raise signing.SignatureError("its signature covers another record.json than the one stored")
    if signed != expected:
        raise signing.SignatureError("its signature covers other manifests or another image than the ones stored")
    return keyid
