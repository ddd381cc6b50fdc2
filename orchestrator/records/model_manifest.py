"""Whether the weights a node will serve are the bytes the model's publisher meant: a manifest kept with the model.

A regulated user must be able to show, for every release, that the bytes the engine loaded are the
bytes that were reviewed and approved: not a file changed on a shared volume, a half-finished copy,
or an extra ``*.safetensors`` shard someone dropped next to the others (vLLM loads every shard it
finds, so an unlisted file is as bad as a changed one). A warm-up pod on each node reads every file
of the model directory and reports ``digests``, relative POSIX path -> sha256 hex, and the bytes of
the manifest it found there; this module judges them, with no I/O of its own. Two manifest kinds:

- ``SHA256SUMS``: what ``sha256sum`` prints (``<hex>  <path>``, ``<hex> *<path>``, its ``\\``-escaped
  names, and the ``--tag`` form ``SHA256 (<path>) = <hex>``). It proves the files are complete and
  unchanged, not who published them.
- ``model.sig``: an OpenSSF model signature (the ``model-signing`` package, 1.x, signing with a key):
  a Sigstore bundle whose DSSE envelope holds an in-toto Statement with predicateType
  ``https://model_signing/signature/v1.0``; the predicate lists every file's sha256 (``resources``)
  and the subject's digest is the sha256 of those digests in order. The envelope's signature is
  checked with the public key the profile names (through ``orchestrator.records.signing``, the one
  module that imports ``cryptography``); model-signing leaves the signature's keyid empty, so the key
  is given, never looked up. Only its default ``files`` serialization is checked: the warm-up hashes
  whole files, and it computes sha256 only.

The manifest and the report come from a volume and a pod, so both are hostile input: a bad one gives
a failed ``WeightsCheck`` that says why, never an exception, and the messages name files and digests
only, never other bytes of a file.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import re
from collections.abc import Collection, Mapping
from typing import Literal

from orchestrator import errors
from orchestrator.records import encoding, signing

Method = Literal["sha256", "model-signing"]
SHA256SUMS = "SHA256SUMS"
MODEL_SIG = "model.sig"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"
# What model-signing 0.2 wrote; 1.x still reads it, but it lists no serialization and no root digest.
_PREDICATE_TYPE_V02 = "https://model_signing/Digests/v0.1"
# A manifest of a 10,000-file model is under 1 MiB; past this a file is not a manifest, and reading it
# whole (a hostile or mistaken file on a shared volume) must not exhaust the controller's memory.
MANIFEST_MAX_BYTES = 16 << 20
# A release record and a terminal line stay readable; the count of the rest still says how bad it is.
MAX_PROBLEMS = 5
# Each signature costs a verification per trusted key: a bundle with thousands must not burn CPU.
_MAX_SIGNATURES = 8
_NAME_SHOWN = 200
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_GNU_LINE = re.compile(r"(\\?)([0-9a-fA-F]{64}) [ *](.+)", re.DOTALL)
_TAG_LINE = re.compile(r"(\\?)SHA256 \((.+)\) = ([0-9a-fA-F]{64})", re.DOTALL)
_OTHER_DIGEST = re.compile(r"\\?[0-9a-fA-F]{32,128} [ *].+|\\?[A-Z][A-Z0-9-]* \(.+\) = [0-9a-fA-F]+", re.DOTALL)
_UNESCAPE = {"\\": "\\", "n": "\n", "r": "\r"}


@dataclasses.dataclass(frozen=True)
class WeightsCheck:
    """The verdict on one node's weights: kept in the release record, shown when they do not match."""

    verified: bool
    method: Method
    manifest_name: str  # the manifest's path in the model directory: SHA256SUMS, model.sig
    manifest_sha256: str | None  # of the manifest file's bytes; None when the warm-up found none
    # The keyid (sha256 of the DER public key) whose signature verified, even when files then differ:
    # the record says both who vouched for the weights and that the volume no longer holds them.
    signer: str | None
    files: int  # the files the manifest lists (after the ignored paths)
    problems: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.verified == bool(self.problems):
            raise ValueError("a WeightsCheck is verified exactly when it has no problems")

    def to_json(self) -> dict[str, object]:
        return {
            "verified": self.verified,
            "method": self.method,
            "manifest": self.manifest_name,
            "manifest_sha256": self.manifest_sha256,
            "signer": self.signer,
            "files": self.files,
            "problems": list(self.problems),
        }

    def explain(self) -> str:
        """One paragraph: what was checked, what did not match, and what to do."""
        what = f"{self.manifest_name} ({self._kind()}{self._digest()})"
        if self.verified:
            by = f", signed by key {self.signer}" if self.signer else ""
            return f"The weights on the volume match {what}: {self.files} files, each with the sha256 it lists{by}."
        fix = (
            "restore the files from the model's source and check that the profile names the key the publisher "
            "signs with; if the change is meant, sign the model again (`model_signing sign key`) and publish "
            f"the new {self.manifest_name} with it"
            if self.method == "model-signing"
            else f"restore the files from the model's source, or, if the change is meant, publish a new "
            f"{self.manifest_name} with the model (`sha256sum` over every file, run in the model directory)"
        )
        return (
            f"The weights on the volume do not match {what}: {'; '.join(self.problems)}. deployctl does not "
            f"serve weights it cannot show are the ones that were approved: {fix}."
        )

    def _kind(self) -> str:
        return "an OpenSSF model signature" if self.method == "model-signing" else "a sha256 manifest"

    def _digest(self) -> str:
        return f", sha256 {self.manifest_sha256[:16]}…" if self.manifest_sha256 else ""


class _Refused(Exception):
    """A manifest that cannot be checked at all; the message is the one problem to report."""


@dataclasses.dataclass
class _Problems:
    """The first MAX_PROBLEMS messages and a count of the rest: a 16 MiB manifest of bad lines must
    not become millions of strings."""

    shown: list[str] = dataclasses.field(default_factory=list)
    more: int = 0

    def add(self, message: str) -> None:
        if len(self.shown) < MAX_PROBLEMS:
            self.shown.append(message)
        else:
            self.more += 1

    def as_tuple(self) -> tuple[str, ...]:
        return (*self.shown, f"and {self.more} more") if self.more else tuple(self.shown)


# -- the two checks -------------------------------------------------------------------------------


def check_sha256(
    manifest: bytes | None,
    digests: Mapping[str, str],
    *,
    name: str = SHA256SUMS,
    ignore: Collection[str] = (),
) -> WeightsCheck:
    """The weights in ``digests`` against a ``sha256sum`` manifest (None: the warm-up found none).

    ``ignore`` holds paths (a folder covers what is under it) that are not part of the model on either
    side; the manifest itself always is, so ``sha256sum * > SHA256SUMS`` listing itself is harmless.
    """
    skip = _ignore_set(name, ignore)
    problems = _Problems()
    listed: dict[str, str] = {}
    try:
        listed = _parse_sums(_bounded(manifest, name), skip, problems)
    except _Refused as e:
        problems.add(str(e))
    if manifest is not None and not listed and not problems.shown:
        problems.add(f"{name} lists no file; a manifest must list every file of the model")
    volume = _volume(digests, skip, problems)
    if listed:
        _compare(listed, volume, name, problems)
    return _verdict("sha256", name, manifest, None, len(listed), problems)


def check_signature(
    bundle: bytes | None,
    public_key_pem: bytes,
    digests: Mapping[str, str],
    *,
    name: str = MODEL_SIG,
    ignore: Collection[str] = (),
    key_source: str = "the profile's public key",
) -> WeightsCheck:
    """The weights in ``digests`` against a model-signing bundle (None: the warm-up found none),
    signed by a key in ``public_key_pem`` (one or more PEM public keys, Ed25519 or ECDSA P-256).

    The paths the signature itself lists as ignored (model-signing records ``.git``, ``model.sig`` and
    the like) are left out of the volume, as ``model_signing verify`` leaves them out; ``ignore`` adds
    to them on both sides.
    """
    skip = _ignore_set(name, ignore)
    problems = _Problems()
    listed: dict[str, str] = {}
    keyid: str | None = None
    try:
        keys = _trusted(public_key_pem, key_source)
        payload, keyid = _open_bundle(_bounded(bundle, name), keys, key_source)
        listed, signed_ignores = _signed_files(payload, skip, problems)
        skip |= signed_ignores
    except _Refused as e:
        problems.add(str(e))
    volume = _volume(digests, skip, problems)
    if listed:
        _compare(listed, volume, name, problems)
    return _verdict("model-signing", name, bundle, keyid, len(listed), problems)


def _verdict(
    method: Method, name: str, manifest: bytes | None, signer: str | None, files: int, problems: _Problems
) -> WeightsCheck:
    shown = problems.as_tuple()
    digest = encoding.sha256(manifest) if manifest is not None else None
    return WeightsCheck(not shown, method, name, digest, signer, files, shown)


def _bounded(manifest: bytes | None, name: str) -> bytes:
    if manifest is None:
        raise _Refused(f"the model directory has no {name}; the warm-up found none to check the weights against")
    if not isinstance(manifest, bytes):
        raise TypeError(f"the manifest is {type(manifest).__name__}, not the file's bytes")
    if len(manifest) > MANIFEST_MAX_BYTES:
        raise _Refused(f"{name} is {len(manifest):,} bytes, more than the {MANIFEST_MAX_BYTES:,} a manifest may be")
    return manifest


# -- paths and the warm-up's report ---------------------------------------------------------------


def printable(text: str, limit: int = _NAME_SHOWN) -> str:
    """Text from a manifest or a pod as it may appear in a message or a record: no control characters
    (each escaped as Python writes it), cut to ``limit`` characters."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:limit])
    return shown + ("…" if len(text) > limit else "")


def _relative(path: str) -> str | None:
    """``path`` as a normal relative POSIX path (``./a//b`` -> ``a/b``); None when it is absolute, climbs
    out with ``..``, names nothing, or holds a NUL: a manifest lists files inside the model directory."""
    if not path or path.startswith("/") or "\x00" in path:
        return None
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def _ignore_set(name: str, ignore: Collection[str]) -> set[str]:
    if isinstance(ignore, str):
        raise TypeError("ignore is a collection of paths, not one path")
    found = {_relative(p) for p in (name, *ignore)}
    return {p for p in found if p is not None}


def _ignored(path: str, skip: Collection[str]) -> bool:
    return any(path == s or path.startswith(s + "/") for s in skip)


def _volume(digests: Mapping[str, str], skip: Collection[str], problems: _Problems) -> dict[str, str]:
    """The warm-up's report, paths normalised and digests in lower case; a bad entry is a problem."""
    if not isinstance(digests, Mapping):
        raise TypeError(f"digests is {type(digests).__name__}, not a mapping of path to sha256")
    volume: dict[str, str] = {}
    for raw, digest in digests.items():
        path = _relative(raw) if isinstance(raw, str) else None
        if path is None:
            problems.add(
                f"the warm-up reported {printable(str(raw))!r}, which is not a path inside the model directory"
            )
        elif not isinstance(digest, str) or not _HEX64.fullmatch(digest):
            problems.add(f"{printable(path)}: the warm-up reported a digest that is not a sha256 in hex")
        elif not _ignored(path, skip):
            volume[path] = digest.lower()
    return volume


def _compare(listed: Mapping[str, str], volume: Mapping[str, str], name: str, problems: _Problems) -> None:
    for path in sorted(listed.keys() | volume.keys()):
        want, have = listed.get(path), volume.get(path)
        if want is None:
            problems.add(f"{printable(path)}: on the volume, not in {name}; the engine could load an unlisted file")
        elif have is None:
            problems.add(f"{printable(path)}: listed in {name} but not on the volume")
        elif want != have:
            problems.add(f"{printable(path)}: its sha256 on the volume is {have}, {name} lists {want}")


# -- SHA256SUMS -----------------------------------------------------------------------------------


def _parse_sums(data: bytes, skip: Collection[str], problems: _Problems) -> dict[str, str]:
    """Path -> digest of a ``sha256sum`` manifest; each bad line is a problem, and the rest are kept."""
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        raise _Refused("the manifest is not UTF-8 text; write it with `sha256sum` from the model directory") from None
    listed: dict[str, str] = {}
    # Split on \n alone: str.splitlines would also cut a name at \x1c or \u2028.
    for number, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        entry = _sums_line(line, number)
        if isinstance(entry, str):
            problems.add(entry)
            continue
        path, digest = entry
        if _ignored(path, skip):
            continue
        if listed.get(path, digest) != digest:
            problems.add(f"{printable(path)}: listed twice in the manifest, with two different digests")
        listed[path] = digest
    return listed


def _sums_line(line: str, number: int) -> tuple[str, str] | str:
    """(path, digest) of one manifest line, or the problem with it."""
    gnu, tag = _GNU_LINE.fullmatch(line), _TAG_LINE.fullmatch(line)
    if gnu:
        escaped, digest, raw = gnu.groups()
    elif tag:
        escaped, raw, digest = tag.groups()
    elif _OTHER_DIGEST.fullmatch(line):
        return (
            f"line {number} of the manifest holds another digest than sha256; the warm-up computes sha256, "
            "so write the manifest with `sha256sum`"
        )
    else:
        return f"line {number} of the manifest is not `<sha256>  <path>`, the format `sha256sum` writes"
    if escaped:
        # sha256sum starts a line with \ when it escapes the name (a name with \ or a newline).
        unescaped = _unescape(raw)
        if unescaped is None:
            return f"line {number} of the manifest has an escape that `sha256sum` does not write"
        raw = unescaped
    path = _relative(raw)
    if path is None:
        return (
            f"line {number} of the manifest names {printable(raw)!r}: an absolute path or one with '..'; "
            "a manifest lists files inside the model directory, relative to it"
        )
    return path, digest.lower()


def _unescape(raw: str) -> str | None:
    """A name as sha256sum escapes it (``\\\\``, ``\\n``, ``\\r``); None for an escape it does not write."""
    if re.search(r"\\(?![nr])", raw.replace("\\\\", "")):
        return None
    return re.sub(r"\\([\\nr])", lambda m: _UNESCAPE[m[1]], raw)


# -- model-signing bundles ------------------------------------------------------------------------


def _trusted(public_key_pem: bytes, key_source: str) -> signing.PublicKeys:
    try:
        return signing.public_keys_from_pem(public_key_pem, key_source)
    except errors.UsageError as e:
        raise _Refused(str(e)) from None


def _json(data: bytes, what: str) -> object:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser's stack
        raise _Refused(f"{what} is not JSON") from None


def _open_bundle(data: bytes, keys: signing.PublicKeys, key_source: str) -> tuple[bytes, str]:
    """The payload of the bundle's DSSE envelope and the keyid that signed it."""
    bundle = _json(data, "the signature file")
    envelope = bundle.get("dsseEnvelope") if isinstance(bundle, Mapping) else None
    if not isinstance(envelope, Mapping) or not isinstance(envelope.get("signatures"), list):
        raise _Refused(
            "the signature file is not a Sigstore bundle with a DSSE envelope (dsseEnvelope), "
            "as `model_signing sign key` writes"
        )
    if envelope.get("payloadType") != signing.PAYLOAD_TYPE:
        raise _Refused(f"the signature's DSSE payloadType is not {signing.PAYLOAD_TYPE}")
    try:
        payload = base64.b64decode(str(envelope.get("payload", "")), validate=True)
    except (binascii.Error, ValueError):
        raise _Refused("the signature's DSSE payload is not base64") from None
    signed = signing.pae(signing.PAYLOAD_TYPE, payload)
    for entry in envelope["signatures"][:_MAX_SIGNATURES]:
        sig = _signature_bytes(entry)
        for keyid in keys.keys:
            # model-signing writes an empty keyid: every given key is tried, none is looked up.
            if sig is not None and keys.verify(keyid, sig, signed):
                return payload, keyid
    expected = ", ".join(keys.keys)
    raise _Refused(
        f"the signature does not verify with the expected key {expected} ({key_source}){_hint(bundle)}: "
        "the model was signed with another key, or the signature file or the signed manifest was changed"
    )


def _signature_bytes(entry: object) -> bytes | None:
    if not isinstance(entry, Mapping):
        return None
    try:
        return base64.b64decode(str(entry.get("sig", "")), validate=True)
    except (binascii.Error, ValueError):
        return None


def _hint(bundle: object) -> str:
    """model-signing names its key by the sha256 of the key's PEM text: worth showing to find the key."""
    material = bundle.get("verificationMaterial") if isinstance(bundle, Mapping) else None
    key = material.get("publicKey") if isinstance(material, Mapping) else None
    hint = key.get("hint") if isinstance(key, Mapping) else None
    return (
        f"; the bundle names a key whose PEM has sha256 {hint.lower()}"
        if isinstance(hint, str) and _HEX64.fullmatch(hint)
        else ""
    )


def _signed_files(payload: bytes, skip: Collection[str], problems: _Problems) -> tuple[dict[str, str], set[str]]:
    """Path -> sha256 of the files a verified Statement lists, and the paths it says it ignored."""
    statement = _json(payload, "the signed payload")
    if not isinstance(statement, Mapping) or statement.get("_type") != STATEMENT_TYPE:
        raise _Refused(f"the signed payload is not an in-toto Statement ({STATEMENT_TYPE})")
    predicate_type = statement.get("predicateType")
    if predicate_type == _PREDICATE_TYPE_V02:
        raise _Refused(
            f"the model was signed by model-signing 0.2 (predicateType {_PREDICATE_TYPE_V02}), which lists no "
            "serialization; sign it again with model-signing 1.x"
        )
    if predicate_type != PREDICATE_TYPE:
        raise _Refused(f"the signed Statement's predicateType is not {PREDICATE_TYPE}, model-signing's")
    predicate = statement.get("predicate")
    if not isinstance(predicate, Mapping):
        raise _Refused("the signed Statement has no predicate")
    signed_ignores = _serialization(predicate.get("serialization"))
    resources = predicate.get("resources")
    if not isinstance(resources, list):
        raise _Refused("the signed Statement's predicate lists no resources")
    listed, order = _resources(resources, skip, problems)
    if len(order) == len(resources):
        _check_root_digest(statement.get("subject"), order)
    return listed, signed_ignores


def _serialization(serialization: object) -> set[str]:
    """The paths a ``files`` serialization ignored; anything else is refused, saying why."""
    if not isinstance(serialization, Mapping):
        raise _Refused("the signed predicate has no serialization (method, hash_type)")
    method = serialization.get("method")
    if method == "shards":
        raise _Refused(
            "the model was signed by file shards (serialization method 'shards', from model-signing's Python "
            "API); deployctl checks whole files (method 'files'), which is all `model_signing sign` writes: "
            "sign the model with the CLI or with hashing.Config().use_file_serialization()"
        )
    if method != "files":
        raise _Refused("the signed predicate's serialization method is not 'files', the one deployctl checks")
    if serialization.get("hash_type") != "sha256":
        raise _Refused(
            "the model was signed with another hash than sha256 (serialization hash_type); the warm-up "
            "computes sha256, model-signing's default: sign with hashing_algorithm='sha256'"
        )
    ignored = serialization.get("ignore_paths", [])
    if not isinstance(ignored, list):
        raise _Refused("the signed predicate's serialization ignore_paths is not a list")
    found = {_relative(p) for p in ignored if isinstance(p, str)}
    return {p for p in found if p is not None}


def _resources(resources: list[object], skip: Collection[str], problems: _Problems) -> tuple[dict[str, str], list[str]]:
    """Path -> sha256 of the signed resources (ignored paths left out), and every valid digest in order."""
    listed: dict[str, str] = {}
    order: list[str] = []
    for number, resource in enumerate(resources, 1):
        entry = resource if isinstance(resource, Mapping) else {}
        raw, algorithm, digest = entry.get("name"), entry.get("algorithm"), entry.get("digest")
        path = _relative(raw) if isinstance(raw, str) else None
        if path is None:
            problems.add(f"signed resource {number} is not a path inside the model directory")
        elif algorithm != "sha256":
            problems.add(f"{printable(path)}: signed with another hash than sha256; the warm-up computes sha256")
        elif not isinstance(digest, str) or not _HEX64.fullmatch(digest):
            problems.add(f"{printable(path)}: its signed digest is not a sha256 in hex")
        elif path in listed:
            problems.add(f"{printable(path)}: listed twice in the signature")
        else:
            order.append(digest.lower())
            if not _ignored(path, skip):
                listed[path] = digest.lower()
    return listed, order


def _check_root_digest(subject: object, order: list[str]) -> None:
    """The subject's digest is the sha256 of the resources' digests in order, as model-signing makes it:
    a Statement whose subject disagrees was not made by model-signing, whoever signed it."""
    entries = subject if isinstance(subject, list) else []
    digest = entries[0].get("digest") if len(entries) == 1 and isinstance(entries[0], Mapping) else None
    root = digest.get("sha256") if isinstance(digest, Mapping) else None
    expected = hashlib.sha256(b"".join(bytes.fromhex(d) for d in order)).hexdigest()
    if not isinstance(root, str) or root.lower() != expected:
        raise _Refused(
            f"the signed Statement's subject digest is not {expected}, the sha256 of the digests it lists; "
            "it was not made by model-signing"
        )
