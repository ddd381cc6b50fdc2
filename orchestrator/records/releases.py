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
covers every byte of history. ``orchestrator.records.writer`` appends them, ``orchestrator.records.revisions``
reads what a history means. What the chain can and cannot prove is explained in ``orchestrator.records.audit``.

Only what the caller passes is stored. The profile names its Secrets and never holds their values,
and ``writer.actor`` copies a fixed list of CI variables, never the environment.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

import pydantic
import yaml
from pydantic import ConfigDict

from orchestrator import conventions, errors
from orchestrator.records import attestation, encoding, signing
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

    def get(self, kind: str, name: str, namespace: str | None = None) -> encoding.JsonObject | None: ...

    def list(
        self, kind: str, namespace: str | None = None, *, labels: str | None = None, fields: str | None = None
    ) -> tuple[list[encoding.JsonObject], str]: ...

    def create(self, obj: encoding.JsonObject) -> encoding.JsonObject: ...


class RecordBody(_Strict):
    """The fields of ``record.json``: what the hash covers."""

    release: str
    namespace: str
    revision: int
    outcome: Outcome
    description: str
    timestamp: str  # UTC, ISO-8601, second precision
    actor: encoding.JsonObject
    model: ModelRef
    image: str
    profile_hash: str
    profile: str  # the profile YAML text, as applied
    plan: encoding.JsonObject | None  # Plan.to_json()
    gate: encoding.JsonObject | None  # GateReport.to_json()
    failure: dict[str, str] | None  # {"class": ..., "message": ...}
    rollback_of: int | None
    manifests_sha256: str
    prev_hash: str  # "" for revision 1
    # What each new pod's vLLM logged at start-up (startup_log.Observation.to_json()), beside the
    # plan. Added after the first records were written: left out of record.json when None, so
    # the hash of every older record stays what it was.
    observed: list[encoding.JsonObject] | None = None
    # An uninstall's record: the objects it deleted, as "Kind/name" (their bytes are the record's
    # manifests). Left out of record.json when None, like ``observed``, for the same reason.
    deleted: list[str] | None = None
    # The record format (record_format); None in format 1, which names none and whose hash must
    # stay what 0.1.0 computed. Every record this deployctl writes names RECORD_FORMAT.
    format: int | None = None
    # A trust step's record (outcome "trusted", format 3): {"up_to": N, "head": hash of revision N}.
    trust: encoding.JsonObject | None = None
    # How long the revision took to serve and where the time went (format 4,
    # apply.time_to_serving.TimeToServing.to_json()); None when it never became healthy.
    time_to_serving: encoding.JsonObject | None = None
    # The canary's steps and what each measured (format 5, apply.canary.Steps.evidence); None when
    # the revision ran no canary.
    canary: encoding.JsonObject | None = None


class Record(RecordBody):
    """One revision of a release, as stored.

    ``hash`` is the hash the record was stored with (the annotation, or an export's copy of it);
    ``computed_hash()`` is what the content hashes to now. They differ when a record was edited.
    """

    hash: str
    manifests: bytes  # the exact applied manifest bytes, decompressed
    # The DSSE envelope stored beside record.json (format 3); None when the record is unsigned.
    envelope: encoding.JsonObject | None = None

    def body(self) -> encoding.JsonObject:
        """The fields of ``record.json``: everything but the hash and the manifest bytes."""
        body = self.model_dump(include=set(RecordBody.model_fields))
        for optional in ("observed", "deleted", "format", "trust", "time_to_serving", "canary"):
            if body[optional] is None:
                del body[optional]
        return body

    def record_json(self) -> bytes:
        return encoding.canonical_json(self.body())

    def check_signature(self, keys: signing.PublicKeys) -> str:
        """The keyid that signed this record; SignatureError saying why not."""
        return attestation.check(self.body(), self.manifests, self.envelope, keys)

    @property
    def format_version(self) -> int:
        """The record format: 1 for a record that names none (deployctl 0.1.0's)."""
        return self.format or 1

    def computed_hash(self) -> str:
        return encoding.sha256(self.record_json())

    def planner_check(self) -> encoding.JsonObject:
        """The plan's KV cache against what the pods' vLLM logged (the smallest pod's), and the load time."""
        kv = [k for o in self.observed or [] if isinstance(k := o.get("kv_cache_tokens"), int)]
        loads = [s for o in self.observed or [] if isinstance(s := o.get("load_seconds"), (int, float))]
        return {
            "kv_tokens_planned": (self.plan or {}).get("kv_cache_tokens"),
            "kv_tokens_observed": min(kv) if kv else None,
            "load_seconds": max(loads) if loads else None,
        }

    def stored_settings(self) -> dict[str, Any]:
        """The gate section of the stored profile (``stored_section``)."""
        return self.stored_section("gate")

    # Any: the sections of a profile YAML that any older deployctl wrote, read leniently; the
    # rollback's gate reads each value it uses with a default (apply.verify).
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


# -- the ConfigMap ----------------------------------------------------------------------------------


def record_name(release: str, revision: int) -> str:
    return f"deployctl.{release}.v{revision}"


def record_from_body(
    body: Mapping[str, object],
    *,
    hash: str,
    manifests: bytes,
    what: str = "",
    envelope: encoding.JsonObject | None = None,
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
        return Record.model_validate({**body, "hash": hash, "manifests": manifests, "envelope": envelope})
    except pydantic.ValidationError as e:
        # pydantic's own text is several lines per field and names its docs; one clause each.
        problems = [f"{'.'.join(str(p) for p in err['loc']) or 'record'}: {err['msg']}" for err in e.errors()]
        raise ValueError(f"record.json does not fit record format {found}: {'; '.join(problems[:3])}") from None


def to_configmap(record: Record) -> encoding.JsonObject:
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
            **(
                {SIGNATURE_KEY: encoding.canonical_json(record.envelope).decode()}
                if record.envelope is not None
                else {}
            ),
        },
        "binaryData": {MANIFESTS_KEY: base64.b64encode(encoding.gzip_bytes(record.manifests)).decode()},
    }


def from_configmap(cm: Mapping[str, object]) -> Record:
    """Parse a record ConfigMap; ValueError says what is unreadable, NewerRecordFormat that this
    deployctl does not read its format (told by the label before the body is even parsed)."""
    meta = encoding.object_at(cm, "metadata")
    labels = encoding.object_at(meta, "labels")
    what = (
        f"release {labels.get(LABEL_RELEASE, '?')} revision {labels.get(LABEL_REVISION, '?')} in namespace "
        f"{meta.get('namespace', '?')} (ConfigMap {meta.get('name', '?')})"
    )
    labelled = record_format.of_label(labels.get(LABEL_FORMAT))
    if labelled is not None:
        record_format.check_readable(labelled, what)
    text = encoding.object_at(cm, "data").get(RECORD_KEY)
    signed = encoding.object_at(cm, "data").get(SIGNATURE_KEY)
    packed = encoding.object_at(cm, "binaryData").get(MANIFESTS_KEY)
    if text is None or packed is None:
        raise ValueError(f"it lacks data[{RECORD_KEY!r}] or binaryData[{MANIFESTS_KEY!r}]")
    if not isinstance(text, str) or not isinstance(packed, str) or not isinstance(signed, (str, type(None))):
        raise ValueError(
            f"data[{RECORD_KEY!r}], data[{SIGNATURE_KEY!r}] or binaryData[{MANIFESTS_KEY!r}] is not a string"
        )
    try:
        body = json.loads(text)
        manifests = encoding.gunzip(base64.b64decode(packed, validate=True))
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
    stored_hash = str(encoding.object_at(meta, "annotations").get(ANNOTATION_HASH, ""))
    return record_from_body(body, hash=stored_hash, manifests=manifests, what=what, envelope=envelope)


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
        name = encoding.object_at(cm, "metadata").get("name", "?")
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
