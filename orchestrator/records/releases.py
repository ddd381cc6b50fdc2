"""Release records: one immutable ConfigMap per revision of a release, chained by hash.

Every apply, rollback and gate of a release appends revision N as the ConfigMap
``deployctl.<release>.v<N>`` in the release's namespace (Helm keeps its release records the same
way, in Secrets; ours hold nothing secret, so ConfigMaps let auditors read them with plain RBAC).
A record holds the exact applied manifest bytes (gzip, deterministic) and ``record.json``: who,
when, what, the profile, the plan, the gate report and ``prev_hash``, the sha256 of revision
N−1's record. The sha256 of ``record.json`` sits in the annotation ``deployctl.dev/record-sha256``.
Since format 2 a record names its format, in ``record.json`` and in a label; a record in a format
this deployctl does not read is refused before its fields are (``orchestrator.records.format``).
Since format 3 a record is signed: ``record.dsse.json`` holds a DSSE envelope over an in-toto
Statement of the record (``orchestrator.records.attestation``), made with the writer's key when one is
configured; ``orchestrator.records.trust`` decides which records a command that writes may use.

Records are append-only: created once with ``immutable: true`` and never updated, so the chain
covers every byte of history. Revision numbers are allocated by ``create``: the API server
refuses a second object with the same name, so two writers can never both get revision N.
What the chain can and cannot prove is explained in ``orchestrator.records.audit``.

Only what the caller passes is stored. The profile names its Secrets and never holds their values,
and ``actor`` copies a fixed list of CI variables, never the environment.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime
import gzip
import hashlib
import io
import json
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Protocol

import pydantic
import yaml
from pydantic import ConfigDict

from orchestrator import conventions, errors
from orchestrator.profile.model import Profile
from orchestrator.records import attestation, signing
from orchestrator.records import format as record_format

LABEL_RECORD = conventions.RECORD_LABEL
LABEL_RELEASE = conventions.RELEASE_LABEL
LABEL_REVISION = conventions.REVISION_LABEL
LABEL_OUTCOME = conventions.OUTCOME_LABEL
ANNOTATION_HASH = conventions.RECORD_HASH_ANNOTATION
LABEL_FORMAT = conventions.RECORD_FORMAT_LABEL
RECORD_KEY = "record.json"
MANIFESTS_KEY = "manifests.yaml.gz"
SIGNATURE_KEY = "record.dsse.json"  # format 3: the DSSE envelope, beside record.json

# The record format this CLI writes, and every format it reads. Format 1 is deployctl 0.1.0's
# record, which names no format; each later format names itself in record.json. docs/upgrading.md
# has the table of which deployctl reads which format; record_format holds the rules.
RECORD_FORMAT = record_format.RECORD_FORMAT
RECORD_FORMATS_READ = record_format.RECORD_FORMATS_READ

# A lock (Lease) serialises writers of one release, so a lost race is rare; a few retries cover
# a writer that bypassed the lock without spinning forever against a broken store.
APPEND_ATTEMPTS = 5

# CI variables that say which job acted. An allow-list, never a prefix match: CI_JOB_TOKEN and
# GITHUB_TOKEN sit right next to these and must never reach a record.
CI_VARIABLES = (
    "CI",
    "GITHUB_RUN_ID",
    "GITHUB_REPOSITORY",
    "GITHUB_ACTOR",
    "CI_JOB_ID",
    "CI_PROJECT_PATH",
    "GITLAB_USER_LOGIN",
    "BUILD_ID",
    "JOB_NAME",
)
_CI_VALUE_LIMIT = 200

# "uninstalled": `deployctl uninstall` removed the release's objects; the record says what it deleted.
# "trusted": `deployctl audit trust` vouched, with its key, for the unsigned records before it
# (format 3; its ``trust`` field says up to which revision and hash). It deployed nothing.
Outcome = Literal["deployed", "failed", "uninstalled", "trusted"]
Status = Literal["deployed", "superseded", "failed", "uninstalled", "trusted"]


class _Strict(pydantic.BaseModel):
    # Strict and closed: a record that does not fit was not written by this version of deployctl,
    # and guessing (a "1" for 1, a true for 1) would change the bytes the hash covers.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class ModelRef(_Strict):
    """The served model and the weights revision (commit or tag) it was deployed with."""

    name: str
    revision: str | None


class Cluster(Protocol):
    """The part of ``orchestrator.kube.Kube`` that records need (a fake implements it in tests)."""

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None: ...

    def list(
        self, kind: str, namespace: str | None = None, *, labels: str | None = None, fields: str | None = None
    ) -> tuple[list[dict[str, Any]], str]: ...

    def create(self, obj: dict[str, Any]) -> dict[str, Any]: ...


class RecordBody(_Strict):
    """The fields of ``record.json``: what the hash covers."""

    release: str
    namespace: str
    revision: int
    outcome: Outcome
    description: str
    timestamp: str  # UTC, ISO-8601, second precision
    actor: dict[str, Any]
    model: ModelRef
    image: str
    profile_hash: str
    profile: str  # the profile YAML text, as applied
    plan: dict[str, Any] | None  # Plan.to_json()
    gate: dict[str, Any] | None  # GateReport.to_json()
    failure: dict[str, str] | None  # {"class": ..., "message": ...}
    rollback_of: int | None
    manifests_sha256: str
    prev_hash: str  # "" for revision 1
    # What each new pod's vLLM logged at start-up (startup_log.Observation.to_json()), beside the
    # plan. Added after the first records were written: left out of record.json when None, so
    # the hash of every older record stays what it was.
    observed: list[dict[str, Any]] | None = None
    # An uninstall's record: the objects it deleted, as "Kind/name" (their bytes are the record's
    # manifests). Left out of record.json when None, like ``observed``, for the same reason.
    deleted: list[str] | None = None
    # The record format (record_format); None in format 1, which names none and whose hash must
    # stay what 0.1.0 computed. Every record this deployctl writes names RECORD_FORMAT.
    format: int | None = None
    # A trust step's record (outcome "trusted", format 3): {"up_to": N, "head": hash of revision N}.
    trust: dict[str, Any] | None = None


class Record(RecordBody):
    """One revision of a release, as stored.

    ``hash`` is the hash the record was stored with (the annotation, or an export's copy of it);
    ``computed_hash()`` is what the content hashes to now. They differ when a record was edited.
    """

    hash: str
    manifests: bytes  # the exact applied manifest bytes, decompressed
    # The DSSE envelope stored beside record.json (format 3); None when the record is unsigned.
    envelope: dict[str, Any] | None = None

    def body(self) -> dict[str, Any]:
        """The fields of ``record.json``: everything but the hash and the manifest bytes."""
        body = self.model_dump(include=set(RecordBody.model_fields))
        for optional in ("observed", "deleted", "format", "trust"):
            if body[optional] is None:
                del body[optional]
        return body

    def record_json(self) -> bytes:
        return canonical_json(self.body())

    def check_signature(self, keys: signing.PublicKeys) -> str:
        """The keyid that signed this record; SignatureError saying why not."""
        return attestation.check(self.body(), self.manifests, self.envelope, keys)

    @property
    def format_version(self) -> int:
        """The record format: 1 for a record that names none (deployctl 0.1.0's)."""
        return self.format or 1

    def computed_hash(self) -> str:
        return sha256(self.record_json())

    def to_summary(self, status: Status) -> dict[str, Any]:
        """One row of ``deployctl history --output json``; ``status`` comes from ``status_of``."""
        return {
            "revision": self.revision,
            "format": self.format_version,
            "status": status,
            "description": self.description,
            "timestamp": self.timestamp,
            "actor": self.actor,
            "profile_hash": self.profile_hash,
            "image": self.image,
            "gate": (self.gate or {}).get("verdict"),  # pass|inconclusive|error|fail; None: not gated
            "planner": self.planner_check(),
        }

    def planner_check(self) -> dict[str, Any]:
        """The plan's KV cache against what the pods' vLLM logged (the smallest pod's), and the load time."""
        kv = [o["kv_cache_tokens"] for o in self.observed or [] if isinstance(o.get("kv_cache_tokens"), int)]
        loads = [o["load_seconds"] for o in self.observed or [] if isinstance(o.get("load_seconds"), (int, float))]
        return {
            "kv_tokens_planned": (self.plan or {}).get("kv_cache_tokens"),
            "kv_tokens_observed": min(kv) if kv else None,
            "load_seconds": max(loads) if loads else None,
        }

    def stored_settings(self) -> dict[str, Any]:
        """The gate section of the stored profile (``stored_section``)."""
        return self.stored_section("gate")

    def stored_section(self, name: str) -> dict[str, Any]:
        """A top-level section of the stored profile, read leniently (plain YAML, not today's schema):
        a rollback must work for a revision written by an older deployctl. Empty when unreadable."""
        try:
            stored = yaml.safe_load(self.profile) or {}
        except yaml.YAMLError:
            return {}
        if isinstance(stored, dict) and isinstance(stored.get("spec"), dict):
            stored = stored["spec"]  # applied from an InferenceProfile object: the sections are its spec
        section = stored.get(name) if isinstance(stored, dict) else None
        return section if isinstance(section, dict) else {}


@dataclasses.dataclass(frozen=True)
class Draft:
    """What a new revision is, for its record: everything but the outcome."""

    release: str
    namespace: str
    manifests: bytes
    profile_text: str
    plan: dict[str, Any] | None
    model: ModelRef
    image: str
    profile_hash: str
    actor: dict[str, Any]
    signer: signing.Signer | None = None  # signs the record (None: written unsigned, with a warning)

    @classmethod
    def of_profile(
        cls,
        profile: Profile,
        plan: dict[str, Any],
        manifests: bytes,
        profile_text: str,
        actor: dict[str, Any],
        signer: signing.Signer | None = None,
    ) -> Draft:
        """A new revision of ``profile``'s release with these manifests, planned as ``plan``."""
        return cls(
            profile.metadata.name,
            profile.metadata.namespace,
            manifests,
            profile_text,
            plan,
            ModelRef(name=profile.model.name, revision=profile.model.revision),
            profile.engine.image,
            profile.spec_hash(),
            actor,
            signer,
        )

    @classmethod
    def of(cls, record: Record, actor: dict[str, Any], signer: signing.Signer | None = None) -> Draft:
        """A new revision with the stored bytes of ``record`` (a rollback), by ``actor``."""
        return cls(
            record.release,
            record.namespace,
            record.manifests,
            record.profile,
            record.plan,
            record.model,
            record.image,
            record.profile_hash,
            actor,
            signer,
        )

    def record(
        self,
        kube: Cluster,
        *,
        outcome: Outcome,
        description: str,
        gate: dict[str, Any] | None = None,
        failure: dict[str, str] | None = None,
        observed: list[dict[str, Any]] | None = None,
        rollback_of: int | None = None,
        deleted: list[str] | None = None,
    ) -> Record:
        return append(
            kube,
            self.release,
            self.namespace,
            outcome=outcome,
            description=description,
            manifests=self.manifests,
            profile_text=self.profile_text,
            plan=self.plan,
            gate=gate,
            failure=failure,
            observed=observed,
            rollback_of=rollback_of,
            deleted=deleted,
            model=self.model,
            image=self.image,
            profile_hash=self.profile_hash,
            actor=self.actor,
            signer=self.signer,
        )


# -- encoding -------------------------------------------------------------------------------------


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8: the same value always gives the same bytes to hash.

    NaN and infinity are refused: they are not JSON, and other tools could not read the record.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def gzip_bytes(data: bytes) -> bytes:
    """Deterministic gzip: no mtime, no file name and a fixed OS byte (``gzip.compress`` in 3.11
    takes the OS byte from zlib), so the same manifests give the same stored bytes anywhere."""
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", fileobj=buffer, mode="wb", compresslevel=9, mtime=0) as f:
        f.write(data)
    return buffer.getvalue()


def record_name(release: str, revision: int) -> str:
    return f"deployctl.{release}.v{revision}"


def record_from_body(
    body: Mapping[str, Any], *, hash: str, manifests: bytes, what: str = "", envelope: dict[str, Any] | None = None
) -> Record:
    """Check a parsed ``record.json`` field by field and build the Record; ValueError says what is wrong.

    The format comes first: a record in a format this deployctl does not read is refused as such
    (NewerRecordFormat, naming ``what``), before any of its fields is looked at.
    """
    if not isinstance(body, Mapping) or {"hash", "manifests"} & set(body):
        raise ValueError("record.json must be an object without 'hash' or 'manifests' keys")
    found = record_format.of_body(body)
    record_format.check_readable(found, what or f"release {body.get('release')} revision {body.get('revision')}")
    record_format.check_fields(body, found)
    if body.get("outcome") == "trusted" and found < record_format.SIGNED_FORMAT:
        raise ValueError(f"record.json has outcome 'trusted', which record format {found} does not have")
    try:
        return Record(**body, hash=hash, manifests=manifests, envelope=envelope)
    except pydantic.ValidationError as e:
        # pydantic's own text is several lines per field and names its docs; one clause each.
        problems = [f"{'.'.join(str(p) for p in err['loc']) or 'record'}: {err['msg']}" for err in e.errors()]
        raise ValueError(f"record.json does not fit record format {found}: {'; '.join(problems[:3])}") from None


def to_configmap(record: Record) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": record_name(record.release, record.revision),
            "namespace": record.namespace,
            "labels": {
                LABEL_RECORD: "true",
                LABEL_RELEASE: record.release,
                LABEL_REVISION: str(record.revision),
                LABEL_OUTCOME: record.outcome,
                "app.kubernetes.io/managed-by": "deployctl",
                # Format 1 (0.1.0) had no label: a record keeps the labels of its format.
                **({LABEL_FORMAT: str(record.format)} if record.format is not None else {}),
            },
            "annotations": {ANNOTATION_HASH: record.hash},
        },
        # The API server then refuses any change to data/binaryData: an edit needs delete and
        # re-create, which the hash chain (and the new uid) shows.
        "immutable": True,
        "data": {
            RECORD_KEY: record.record_json().decode(),
            **({SIGNATURE_KEY: canonical_json(record.envelope).decode()} if record.envelope is not None else {}),
        },
        "binaryData": {MANIFESTS_KEY: base64.b64encode(gzip_bytes(record.manifests)).decode()},
    }


def from_configmap(cm: Mapping[str, Any]) -> Record:
    """Parse a record ConfigMap; ValueError says what is unreadable, NewerRecordFormat that this
    deployctl does not read its format (told by the label before the body is even parsed)."""
    meta = cm.get("metadata") or {}
    labels = meta.get("labels") or {}
    what = (
        f"release {labels.get(LABEL_RELEASE, '?')} revision {labels.get(LABEL_REVISION, '?')} in namespace "
        f"{meta.get('namespace', '?')} (ConfigMap {meta.get('name', '?')})"
    )
    labelled = record_format.of_label(labels.get(LABEL_FORMAT))
    if labelled is not None:
        record_format.check_readable(labelled, what)
    text = (cm.get("data") or {}).get(RECORD_KEY)
    signed = (cm.get("data") or {}).get(SIGNATURE_KEY)
    packed = (cm.get("binaryData") or {}).get(MANIFESTS_KEY)
    if text is None or packed is None:
        raise ValueError(f"it lacks data[{RECORD_KEY!r}] or binaryData[{MANIFESTS_KEY!r}]")
    if not isinstance(text, str) or not isinstance(packed, str) or not isinstance(signed, (str, type(None))):
        raise ValueError(
            f"data[{RECORD_KEY!r}], data[{SIGNATURE_KEY!r}] or binaryData[{MANIFESTS_KEY!r}] is not a string"
        )
    try:
        body = json.loads(text)
        manifests = _gunzip(base64.b64decode(packed, validate=True))
        envelope = None if signed is None else json.loads(signed)
    except RecursionError as e:  # JSON nested past the parser's stack: no record is
        raise ValueError(f"{RECORD_KEY} is nested too deeply to be a record") from e
    except (ValueError, binascii.Error, OSError, EOFError, zlib.error) as e:
        raise ValueError(str(e)) from e
    if not isinstance(body, dict):
        raise ValueError(f"{RECORD_KEY} is not a JSON object")
    found = record_format.of_body(body)
    record_format.check_readable(found, what)
    if (labelled or 1) != found:
        # The label is outside the hash, the body inside: either may have been changed, so neither wins.
        raise ValueError(
            f"its label {LABEL_FORMAT} says format {labelled or '(none)'} but {RECORD_KEY} names "
            f"{found if found > 1 else 'no format (format 1)'}; both name the same format when deployctl writes them"
        )
    if envelope is not None and (found < record_format.SIGNED_FORMAT or not isinstance(envelope, dict)):
        raise ValueError(f"its {SIGNATURE_KEY} is not a JSON object, or its record format {found} is not signed")
    stored_hash = str((meta.get("annotations") or {}).get(ANNOTATION_HASH, ""))
    return record_from_body(body, hash=stored_hash, manifests=manifests, what=what, envelope=envelope)


# A release's manifests are tens of KiB; a ConfigMap holds at most 1 MiB, which gzip can inflate a
# thousandfold. Past this the record is refused rather than inflated (a bomb from a namespace editor).
MANIFESTS_MAX_BYTES = 64 << 20


def _gunzip(packed: bytes) -> bytes:
    inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # the gzip container, as gzip.compress writes it
    out = inflate.decompress(packed, MANIFESTS_MAX_BYTES + 1)
    if len(out) > MANIFESTS_MAX_BYTES or inflate.unconsumed_tail:
        raise ValueError(f"its manifests inflate to more than {MANIFESTS_MAX_BYTES:,} bytes")
    if not inflate.eof:
        raise ValueError("its manifests are a cut-off gzip stream")
    return out


# -- the store ------------------------------------------------------------------------------------


def is_record_name(name: object, release: str) -> bool:
    """Whether ``name`` is the name of a record of ``release``: ``deployctl.<release>.v<N>``."""
    return isinstance(name, str) and re.fullmatch(re.escape(f"deployctl.{release}.v") + "[1-9][0-9]*", name) is not None


def foreign_message(name: str, release: str, namespace: str) -> str:
    """What is said of a ConfigMap that carries a record's labels under a name no record has."""
    return (
        f"ConfigMap {name} in namespace {namespace} has the labels of a record of release {release} but is not a "
        f"deployctl record (records are named deployctl.{release}.v<N>): skipped. Find out who created it, "
        f"and delete it when nobody needs it (kubectl delete configmap {name} -n {namespace})"
    )


def load_history(
    kube: Cluster, release: str, namespace: str, *, warn: Callable[[str], None] | None = None
) -> list[Record]:
    """All records of a release, oldest first.

    A ConfigMap with the record labels under a name that no record has (``is_record_name``) is not
    a record: it is skipped and said through ``warn`` (``foreign_message``), so that one junk
    object can never block an apply, a rollback or the controller. A ConfigMap under a record's
    name is judged as a record: it holds revision N's place in the chain.

    Raises AuditFailed when a record cannot be parsed: it was edited outside deployctl, and
    history, rollback and verify must not go on as if it were not there. Raises NewerRecordFormat
    when a record is in a format this deployctl does not read: every command that writes reads
    the history first, so a newer deployctl's release is never changed by an older one.
    """
    items, _ = kube.list("ConfigMap", namespace, labels=f"{LABEL_RECORD}=true,{LABEL_RELEASE}={release}")
    records: list[Record] = []
    unreadable: list[str] = []
    newer: list[errors.NewerRecordFormat] = []
    for cm in items:
        name = cm.get("metadata", {}).get("name", "?")
        if not is_record_name(name, release):
            if warn is not None:
                warn(foreign_message(str(name), release, namespace))
            continue
        try:
            records.append(from_configmap(cm))
        except errors.NewerRecordFormat as e:
            newer.append(e)
        except ValueError as e:
            unreadable.append(f"{name} ({errors.shorten(str(e), 240)})")
    if newer:
        # Told first: a newer deployctl may read what looks unreadable here.
        raise newer[0]
    if unreadable:
        raise errors.AuditFailed(
            f"release {release!r} in namespace {namespace!r} has unreadable records: "
            f"{'; '.join(unreadable)}. They were changed outside deployctl; compare with an exported copy "
            "(deployctl audit verify --against)"
        )
    return sorted(records, key=lambda r: r.revision)


def append(
    kube: Cluster,
    release: str,
    namespace: str,
    *,
    outcome: Outcome,
    description: str,
    manifests: bytes,
    profile_text: str,
    plan: dict[str, Any] | None,
    gate: dict[str, Any] | None,
    failure: dict[str, str] | None,
    rollback_of: int | None,
    model: ModelRef,
    observed: list[dict[str, Any]] | None = None,
    deleted: list[str] | None = None,
    image: str,
    profile_hash: str,
    actor: dict[str, Any],
    now: datetime.datetime | None = None,
    signer: signing.Signer | None = None,
    trust: dict[str, Any] | None = None,
) -> Record:
    """Store the next revision of ``release`` and return it, signed by ``signer`` when given.

    The next number is the last one + 1 and ``prev_hash`` is the last record's stored hash (so an
    earlier edit that did not update the chain stays visible). If another writer took that number
    first, the API server answers Conflict and we re-read and try the next one.
    """
    timestamp = (now or datetime.datetime.now(datetime.timezone.utc)).astimezone(datetime.timezone.utc)
    for _ in range(APPEND_ATTEMPTS):
        history = load_history(kube, release, namespace)
        last = history[-1] if history else None
        body: dict[str, Any] = {
            "release": release,
            "namespace": namespace,
            "revision": last.revision + 1 if last else 1,
            "outcome": outcome,
            "description": description,
            "timestamp": timestamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "actor": actor,
            "model": model.model_dump(),
            "image": image,
            "profile_hash": profile_hash,
            "profile": profile_text,
            "plan": plan,
            "gate": gate,
            "failure": failure,
            "rollback_of": rollback_of,
            "manifests_sha256": sha256(manifests),
            "prev_hash": last.hash if last else "",
            "format": RECORD_FORMAT,
        }
        if observed is not None:
            body["observed"] = observed
        if deleted is not None:
            body["deleted"] = deleted
        if trust is not None:
            body["trust"] = trust
        try:
            envelope = attestation.sign(body, manifests, signer) if signer is not None else None
            record = record_from_body(body, hash=sha256(canonical_json(body)), manifests=manifests, envelope=envelope)
        except (TypeError, ValueError) as e:  # ValueError: pydantic's, or canonical_json's for NaN
            raise errors.UsageError(
                f"cannot record revision {body['revision']} of {release!r}: {e}. "
                "The plan, gate report and actor must be plain JSON objects (no NaN, no other types)"
            ) from e
        try:
            kube.create(to_configmap(record))
        except errors.Conflict:
            name = record_name(release, record.revision)
            if kube.get("ConfigMap", name, namespace) is not None and record.revision not in {
                r.revision for r in load_history(kube, release, namespace)
            }:
                # Not a race: an object holds the name without the record labels, so every retry
                # would meet it again.
                raise errors.AuditFailed(
                    f"ConfigMap {name} in namespace {namespace!r} exists but is not a record of release "
                    f"{release!r} (its labels were changed or removed); inspect it with kubectl before "
                    "deploying"
                ) from None
            continue
        return record
    raise errors.Conflict(
        f"could not store a record for release {release!r} in namespace {namespace!r}: another writer took "
        f"the next revision {APPEND_ATTEMPTS} times in a row. Is a deployctl running without the "
        "release lock?"
    )


def actor(kube_user: str, env: Mapping[str, str]) -> dict[str, Any]:
    """Who acted: the user the API server authenticated, and the CI job when there is one."""
    ci = {name: env[name][:_CI_VALUE_LIMIT] for name in CI_VARIABLES if env.get(name)}
    return {"user": kube_user, "ci": ci}


# -- reading history ------------------------------------------------------------------------------


def status_of(history: Sequence[Record]) -> dict[int, Status]:
    """Revision → status: the newest deployed record is ``deployed`` (live), older deployed ones are
    ``superseded``, failed ones stay ``failed`` and uninstall records are ``uninstalled``.

    ``deployed`` means "the newest revision that passed": when the newest record is failed and its
    automatic rollback failed too, the cluster may still run the failed revision's objects.
    """
    current = live(history)
    statuses: dict[int, Status] = {}
    for record in history:
        if record.outcome in ("failed", "uninstalled", "trusted"):
            statuses[record.revision] = record.outcome
        else:
            statuses[record.revision] = "deployed" if record is current else "superseded"
    return statuses


def summaries(history: Sequence[Record]) -> list[dict[str, Any]]:
    """``deployctl history --output json``: one summary per revision, oldest first."""
    statuses = status_of(history)
    return [record.to_summary(statuses[record.revision]) for record in history]


def live(history: Sequence[Record]) -> Record | None:
    """The newest record that was deployed and passed, the target of an automatic rollback; None
    when an uninstall came after it (nothing is live, and a failed apply removes what it created)."""
    for record in reversed(history):
        if record.outcome == "deployed":
            return record
        if record.outcome == "uninstalled":
            return None
    return None


def uninstalled(history: Sequence[Record]) -> Record | None:
    """The uninstall record, when the release is uninstalled: no revision was deployed after it."""
    for record in reversed(history):
        if record.outcome == "deployed":
            return None
        if record.outcome == "uninstalled":
            return record
    return None


def last_good_before(history: Sequence[Record], revision: int) -> Record | None:
    """The newest deployed record older than ``revision`` whose manifests differ from its own.

    Say revision 1 installed A, 2 upgraded to B, 3 tried C and failed its gate, and 4 is the
    automatic "rollback to 2", live again with B's bytes. An engineer who now asks to roll back
    means "go back to before B": 3 failed and 2 holds exactly what already runs, so the answer
    is 1. Failed records and records with the same bytes as ``revision`` are skipped; None when
    nothing earlier is different.
    """
    by_revision = {r.revision: r for r in history}
    if revision not in by_revision:
        raise errors.UnknownRelease(f"revision {revision} is not in the history ({_revisions(history)})")
    current = by_revision[revision].manifests_sha256
    return next(
        (
            r
            for r in reversed(history)
            if r.revision < revision and r.outcome == "deployed" and r.manifests_sha256 != current
        ),
        None,
    )


def rollback_target(history: Sequence[Record]) -> Record | None:
    """What ``deployctl rollback`` without ``--to`` restores.

    If the newest record failed (an upgrade or rollback whose own rollback did not finish), the
    cluster may be running its bytes, so the target is the live record: restore the last good
    state. Otherwise the target is ``last_good_before`` the live record. Re-applying the live
    bytes is harmless (server-side apply is idempotent and the gate runs again), whereas going
    one step further back than the engineer meant would not be. After an uninstall, the target
    is the revision that was live when it ran.
    """
    gone = uninstalled(history)
    if gone is not None:
        # Undo the uninstall: the revision that was live when it ran (as `helm rollback` after
        # `helm uninstall --keep-history` goes back to the revision before the uninstalled one).
        return next((r for r in reversed(history) if r.revision < gone.revision and r.outcome == "deployed"), None)
    current = live(history)
    if current is None:
        return None
    acted = [r for r in history if r.outcome != "trusted"]  # a trust step changed nothing in the cluster
    if acted and acted[-1].outcome == "failed":
        return current
    return last_good_before(history, current.revision)


def get(history: Sequence[Record], revision: int) -> Record:
    """Revision ``revision``, or NotFound naming the revisions there are (for ``rollback --to``)."""
    for record in history:
        if record.revision == revision:
            return record
    raise errors.UnknownRelease(f"revision {revision} is not in the history ({_revisions(history)})")


def _revisions(history: Sequence[Record]) -> str:
    if not history:
        return "the release has no records"
    return f"it has revisions {history[0].revision} to {history[-1].revision}"
