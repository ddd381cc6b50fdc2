"""Which release records a command that writes may act on: those deployctl's key signed.

Every read that leads to a write (apply's ``live``, the automatic rollback, ``rollback``,
``restore``, ``gate``, ``uninstall``, ``purge``, the controller) goes through ``for_write``. The
policy (docs/security.md#signed-records):

- With a key configured (``--signing-key``, ``--verify-key``, the controller's Secret), a record
  is used only when a trusted key signed it and the signature covers its ``record.json`` and
  manifests as stored, or when it is an unsigned record from before signing that a signed trust
  record (``deployctl audit trust``) vouches for through the hash chain. Any other record (a
  forgery appended by a namespace editor, whose hashes may well be valid) is left out of every
  decision, named in a warning, and refused when asked for by number (``rollback --to``).
- With no key configured, an unsigned release is read as before signing (and each new record is
  written unsigned, with a warning). A release that already has a signed record is refused: the
  signatures cannot be checked, and skipping them would let a forgery through.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from collections.abc import Callable, Sequence
from typing import TypedDict

from orchestrator import errors
from orchestrator.records import audit, encoding, releases, signing

Report = Callable[[str, str], None]
GetObject = Callable[[str, str, str], "dict[str, object] | None"]

# The controller's key: a Secret in its own namespace, which a Role of its own lets it read
# (docs/security.md#signed-records), so that an editor of a release namespace never holds it.
SECRET_NAME = "deployctl-signing-key"
SECRET_PRIVATE_KEY = "signing-key.pem"
SECRET_VERIFY_KEYS = "verify-keys.pem"  # optional: more trusted public keys (the CLI users')


@dataclasses.dataclass(frozen=True)
class Keys:
    """The key a command signs new records with, and the public keys it trusts (the signer's too)."""

    signer: signing.Signer | None = None
    trusted: signing.PublicKeys = dataclasses.field(default_factory=signing.PublicKeys)

    @classmethod
    def of(cls, signer: signing.KeySigner | None, trusted: signing.PublicKeys) -> Keys:
        own = signing.PublicKeys.of([signer.public]) if signer is not None else signing.PublicKeys()
        return cls(signer, trusted.with_(own))


def load(signing_key: str | None, verify_keys: Sequence[str] = ()) -> Keys:
    """The Keys of ``--signing-key FILE`` and ``--verify-key FILE`` (each may be absent)."""
    signer = signing.load_signer(signing_key) if signing_key else None
    return Keys.of(signer, signing.load_public_keys(verify_keys))


def from_secret(get: GetObject, namespace: str, name: str = SECRET_NAME) -> Keys | None:
    """The Keys of the controller's Secret; None when there is no such Secret."""
    secret = get("Secret", name, namespace)
    if secret is None:
        return None
    data = encoding.object_at(secret, "data")
    where = f"Secret {namespace}/{name}"

    def value(key: str) -> bytes | None:
        if data.get(key) is None:
            return None
        try:
            return base64.b64decode(str(data[key]), validate=True)
        except (binascii.Error, ValueError):
            raise errors.UsageError(f"key {key} of {where} is not base64 data") from None

    private = value(SECRET_PRIVATE_KEY)
    if private is None:
        raise errors.UsageError(
            f"{where} has no key {SECRET_PRIVATE_KEY}: create it with `kubectl create secret generic {name} "
            f"-n {namespace} --from-file={SECRET_PRIVATE_KEY}=KEY.pem` (a key from `deployctl keygen`)"
        )
    signer = signing.signer_from_pem(private, f"{where} key {SECRET_PRIVATE_KEY}")
    extra = value(SECRET_VERIFY_KEYS)
    trusted = signing.public_keys_from_pem(extra, f"{where} key {SECRET_VERIFY_KEYS}") if extra else None
    return Keys.of(signer, trusted or signing.PublicKeys())


@dataclasses.dataclass(frozen=True)
class Refused:
    record: releases.Record
    reason: str

    def message(self) -> str:
        r = self.record
        name = releases.record_name(r.release, r.revision)
        return (
            f"revision {r.revision} (ConfigMap {name}) is not used: {self.reason}. deployctl's key did not write "
            f"it, so it was written outside deployctl: inspect it with `deployctl audit verify {r.release} --key "
            "PUB.pem`, keep the evidence and delete it; records from before signing are accepted after "
            f"`deployctl audit trust {r.release}`"
        )


@dataclasses.dataclass(frozen=True)
class Checked:
    """A release's records, oldest first: all of them, and those a write may act on."""

    records: list[releases.Record]
    trusted: list[releases.Record]
    refused: list[Refused]

    def refusal(self, revision: int) -> Refused | None:
        return next((r for r in self.refused if r.record.revision == revision), None)


def check(history: Sequence[releases.Record], keys: Keys, release: str, namespace: str) -> Checked:
    """Sort ``history`` into trusted and refused records by the policy of the module doc."""
    records = list(history)
    if not keys.trusted:
        signed = [r.revision for r in records if r.envelope is not None]
        if signed:
            raise errors.AuditFailed(
                f"release {release!r} in namespace {namespace!r} has signed records (revision "
                f"{', '.join(map(str, signed[:5]))}), and no key is configured to check them: pass --signing-key "
                "KEY.pem (DEPLOYCTL_SIGNING_KEY) or --verify-key PUB.pem (DEPLOYCTL_VERIFY_KEY). Nothing was changed"
            )
        return Checked(records, records, [])
    reasons: dict[int, str] = {}
    vouched: set[int] = set()
    for record in records:
        try:
            if record.envelope is None:
                continue
            record.check_signature(keys.trusted)
            if (record.release, record.namespace) != (release, namespace):
                raise signing.SignatureError(
                    f"it is signed as release {record.release!r} in namespace {record.namespace!r}: it was copied here"
                )
            if record.outcome == "trusted":
                vouched |= _vouched(records, record)
        except signing.SignatureError as e:
            reasons[id(record)] = str(e)
    for record in records:
        if record.envelope is None and record.revision not in vouched:
            reasons[id(record)] = "it is not signed, and no trust step covers it"
    refused = [Refused(r, reasons[id(r)]) for r in records if id(r) in reasons]
    return Checked(records, [r for r in records if id(r) not in reasons], refused)


def _vouched(records: Sequence[releases.Record], trust: releases.Record) -> set[int]:
    """The revisions a signed trust record covers: walking back from ``up_to`` while each record
    hashes to what it was stored as and names its predecessor's hash, from ``head`` down."""
    spec = trust.trust or {}
    up_to, head = spec.get("up_to"), spec.get("head")
    counts: dict[int, int] = {}
    for r in records:
        counts[r.revision] = counts.get(r.revision, 0) + 1
    by_revision = {r.revision: r for r in records if counts[r.revision] == 1}
    current = by_revision.get(up_to) if isinstance(up_to, int) and up_to < trust.revision else None
    if current is None or current.hash != head:
        return set()
    covered: set[int] = set()
    while current is not None and current.computed_hash() == current.hash:
        covered.add(current.revision)
        previous = by_revision.get(current.revision - 1)
        if previous is None or current.prev_hash != previous.hash:
            break
        current = previous
    return covered


def for_write(
    kube: releases.Cluster, release: str, namespace: str, keys: Keys, report: Report | None = None
) -> Checked:
    """The release's records, checked; each refused record is said through ``report``.

    A release that has records but none a write may act on is refused as a whole: taken for a
    first install, a failed apply would remove what runs. That is the state of every release from
    before signing once a key is configured, until ``deployctl audit trust``.
    """
    warn = None if report is None else (lambda message: report("records", f"warning: {message}"))
    checked = check(releases.load_history(kube, release, namespace, warn=warn), keys, release, namespace)
    if checked.records and not checked.trusted:
        raise errors.AuditFailed(
            f"no record of release {release!r} in namespace {namespace!r} is signed by a trusted key, so deployctl "
            f"will not act on it (revision {checked.refused[0].record.revision}: {checked.refused[0].reason}). "
            f"Records from before signing: check them (deployctl audit verify {release} --against EXPORT) and vouch "
            f"for them with `deployctl audit trust {release} -n {namespace} --signing-key KEY.pem`; otherwise they "
            "were written outside deployctl: inspect them. Nothing was changed"
        )
    for refused in checked.refused:
        if report is not None:
            report("records", f"warning: release {release}: {refused.message()}")
    return checked


def require(checked: Checked, target: releases.Record) -> None:
    """Refuse to act on ``target`` unless it is one of the trusted records (by revision and hash)."""
    if any(r.revision == target.revision and r.hash == target.hash for r in checked.trusted):
        return
    refused = checked.refusal(target.revision)
    reason = refused.message() if refused else f"revision {target.revision} is no longer in the history"
    raise errors.AuditFailed(
        f"revision {target.revision} of {target.release} is not restored: {reason}. Nothing was changed"
    )


def unsigned_warning(keys: Keys) -> str | None:
    """What a command that writes an unsigned record says (None when it signs)."""
    if keys.signer is not None:
        return None
    return (
        "this record is not signed, so a namespace editor could forge one like it: create a key with "
        "`deployctl keygen` and pass --signing-key (DEPLOYCTL_SIGNING_KEY) (docs/security.md#signed-records)"
    )


class TrustBody(TypedDict):
    """A trust record's ``trust`` field: it vouches for revisions 1 to ``up_to``, chained to ``head``."""

    up_to: int
    head: str


def trust_body(checked: Checked, up_to: int) -> TrustBody:
    """The ``trust`` field of a trust record: revisions 1 to ``up_to`` and the hash they chain to."""
    by_revision = {r.revision: r for r in checked.records}
    if up_to not in by_revision:
        raise errors.UsageError(f"--up-to {up_to}: the release has no revision {up_to}")
    return {"up_to": up_to, "head": by_revision[up_to].hash}


def problems(checked: Checked, source: audit.Source = "cluster") -> list[audit.Problem]:
    """``audit verify --key``: each record no trusted key vouches for, as a ``signature`` problem."""
    return [
        audit.Problem(
            r.record.revision,
            "signature",
            source,
            f"revision {r.record.revision}: {r.reason}; deployctl's key did not write it",
        )
        for r in checked.refused
    ]
