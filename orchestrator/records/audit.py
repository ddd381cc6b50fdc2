"""Audit of release records: verify the hash chain, export it, and compare the cluster with an export.

What ``verify`` proves on its own, from the records in the cluster (or in an export):

- a record edited without recomputing its hash annotation (``edited``);
- a record edited with its annotation recomputed, as long as a newer record exists: the newer
  record's ``prev_hash`` still names the old content (``chain``);
- manifests replaced under an unchanged ``record.json`` (``manifests``);
- a deleted record that is not the newest: its revision is missing between 1 and the newest
  (``missing``); records copied in from elsewhere (``duplicate``, ``foreign``).

What the chain alone cannot prove: it is a checksum, not a signature. Since record format 3 each
record is also signed (``orchestrator.records.trust``); ``audit verify --key PUB.pem`` adds the
``signature`` check, which catches a record appended or rewritten by anyone without the key,
hashes and all. Without ``--key``:
Whoever can delete and create ConfigMaps in the namespace can delete the newest record(s),
rewrite the newest record with a fresh annotation, or rewrite every record from some revision
onward with hashes recomputed, and the remaining chain verifies. Catching that needs an anchor
kept outside the cluster's reach: ``deployctl audit export`` writes a document to keep (in a
ticket, git, a write-once bucket), and ``deployctl audit verify --against export.json`` runs
``verify`` on the cluster, ``verify_export`` on the document and ``compare_with_export`` on both:
every revision in the export must still be in the cluster with the same hash and the same
manifests, so a deleted newest record shows as ``deleted`` and a rewritten one as ``differs``.
Revisions written after the export chain on from its head, which ``verify`` checks. Keeping only
the head hash (``head`` in the export) anchors the chain just as well for deletion and rewrites.

Records are ConfigMaps with ``immutable: true``, so an edit takes delete and re-create (a new
uid, visible to the API server's audit log); RBAC cannot scope ConfigMap deletes by label, so
limit who may delete ConfigMaps in release namespaces.

An export names its format (``format``, the record format of the deployctl that wrote it; none in
deployctl 0.1.0's); an export, or a record in it, in a format this deployctl does not read is
refused (``NewerRecordFormat``), never half-read (docs/record-format.md).
"""

from __future__ import annotations

import base64
import binascii
import collections
import dataclasses
import datetime
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from orchestrator import errors
from orchestrator.records import encoding, releases
from orchestrator.records import format as record_format

EXPORT_API_VERSION = "deployctl.dev/v1"
EXPORT_KIND = "ReleaseAudit"

ProblemCode = Literal[
    "missing",
    "duplicate",
    "foreign",
    "edited",
    "chain",
    "manifests",
    "unreadable",
    "head",
    "deleted",
    "differs",
    "signature",
]
Source = Literal["cluster", "export"]


@dataclasses.dataclass(frozen=True)
class Problem:
    """One finding: which revision, where it was found, and what it means."""

    revision: int | None  # None when the problem concerns no single revision
    code: ProblemCode
    source: Source
    message: str

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def _short(digest: str) -> str:
    return digest[:12] or "(none)"


def verify(
    records: Sequence[releases.Record], *, release: str, namespace: str, source: Source = "cluster"
) -> list[Problem]:
    """Walk the chain of one release; no problems means every check above passed."""
    problems: list[Problem] = []

    def report(revision: int | None, code: ProblemCode, message: str) -> None:
        problems.append(Problem(revision, code, source, message))

    counts = collections.Counter(r.revision for r in records)
    by_revision = _check_each(records, counts, release, namespace, report)
    _check_links(counts, by_revision, report)
    return sorted(problems, key=lambda p: (p.revision or 0, p.code))


# How the checks below say what they found: revision, problem code, message.
_Report = Callable[[int | None, ProblemCode, str], None]


def _check_each(
    records: Sequence[releases.Record], counts: Mapping[int, int], release: str, namespace: str, report: _Report
) -> dict[int, releases.Record]:
    """Each record on its own: duplicated, copied from another release, edited, manifests replaced.
    Returns the records by revision, without the duplicated revisions (no record of those is trusted)."""
    by_revision: dict[int, releases.Record] = {}
    for record in sorted(records, key=lambda r: r.revision):
        if counts[record.revision] > 1:
            if record.revision not in by_revision:
                report(
                    record.revision,
                    "duplicate",
                    f"revision {record.revision} is recorded {counts[record.revision]} times; "
                    "all but one were created outside deployctl",
                )
            continue
        by_revision[record.revision] = record
        if (record.release, record.namespace) != (release, namespace):
            report(
                record.revision,
                "foreign",
                f"revision {record.revision} belongs to release {record.release!r} in namespace "
                f"{record.namespace!r}, not {release!r} in {namespace!r}: it was copied here",
            )
        computed = record.computed_hash()
        if computed != record.hash:
            report(
                record.revision,
                "edited",
                f"revision {record.revision}: record.json hashes to {_short(computed)} but was stored as "
                f"{_short(record.hash)}: it was edited after it was written",
            )
        actual = encoding.sha256(record.manifests)
        if actual != record.manifests_sha256:
            report(
                record.revision,
                "manifests",
                f"revision {record.revision}: the stored manifests hash to {_short(actual)}, the record says "
                f"{_short(record.manifests_sha256)}: the manifests were replaced after it was written",
            )
    return by_revision


def _check_links(counts: Mapping[int, int], by_revision: Mapping[int, releases.Record], report: _Report) -> None:
    """The chain between the records: a revision missing, revision 1 re-rooted, a link that does not match."""
    newest = max(counts, default=0)
    for revision in range(1, newest + 1):
        if revision not in counts:
            report(
                revision,
                "missing",
                f"revision {revision} is missing (the newest is {newest}): its record was deleted",
            )
            continue
        current = by_revision.get(revision)
        previous = by_revision.get(revision - 1)
        if current is None or (revision > 1 and previous is None):
            continue  # already reported as duplicate or missing; there is nothing to link to
        if previous is None:
            if current.prev_hash:
                report(
                    revision,
                    "chain",
                    f"revision 1 names a predecessor ({_short(current.prev_hash)}): the chain was cut and re-rooted",
                )
        elif current.prev_hash != previous.hash:
            # Both records may hash correctly on their own, so one was rewritten together with its
            # annotation; blame the older one, whose old content the newer one still records.
            report(
                revision - 1,
                "chain",
                f"revision {revision} records its predecessor's hash as {_short(current.prev_hash)}, but "
                f"revision {revision - 1} is stored as {_short(previous.hash)}: revision {revision - 1} "
                f"was rewritten after revision {revision} was written (or revision {revision}'s link was)",
            )


def export(
    records: Sequence[releases.Record], *, release: str, namespace: str, now: datetime.datetime | None = None
) -> dict[str, object]:
    """A JSON document of the whole chain, for an auditor to keep outside the cluster."""
    exported_at = (now or datetime.datetime.now(datetime.timezone.utc)).astimezone(datetime.timezone.utc)
    ordered = sorted(records, key=lambda r: r.revision)
    entries = []
    for record in ordered:
        entry = {**record.body(), "hash": record.hash}
        if record.envelope is not None:
            entry["envelope"] = record.envelope  # the signature verifies offline with the public key alone
        try:
            entry["manifests"] = record.manifests.decode("utf-8")
        except UnicodeDecodeError:
            # Rendered manifests are UTF-8 YAML; other bytes mean tampering, which the export
            # must still carry exactly so that the auditor can see it.
            entry["manifests_base64"] = base64.b64encode(record.manifests).decode()
        entries.append(entry)
    return {
        "apiVersion": EXPORT_API_VERSION,
        "kind": EXPORT_KIND,
        "format": releases.RECORD_FORMAT,
        "release": release,
        "namespace": namespace,
        "exported_at": exported_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "head": {"revision": ordered[-1].revision, "hash": ordered[-1].hash} if ordered else None,
        "records": entries,
    }


def _parse_export(doc: Mapping[str, object], name: str) -> tuple[list[releases.Record], list[Problem]]:
    entries = doc.get("records") if isinstance(doc, Mapping) else None
    if (
        not isinstance(doc, Mapping)
        or doc.get("apiVersion") != EXPORT_API_VERSION
        or doc.get("kind") != EXPORT_KIND
        or not isinstance(entries, list)
    ):
        raise errors.UsageError(
            f"this is not a deployctl audit export (expected apiVersion {EXPORT_API_VERSION}, "
            f"kind {EXPORT_KIND} and a records list); create one with deployctl audit export"
        )
    what = f"{name} of release {doc.get('release')} in namespace {doc.get('namespace')}"
    try:
        found = record_format.of_body(doc, "the export")
    except ValueError as e:
        raise errors.AuditFailed(f"{what} is unreadable: {e}. It was changed after deployctl wrote it") from None
    record_format.check_readable(found, what)
    records: list[releases.Record] = []
    problems: list[Problem] = []
    for index, entry in enumerate(entries):
        revision = entry.get("revision") if isinstance(entry, dict) else None
        try:
            if not isinstance(entry, dict):
                raise ValueError("it is not an object")
            if record_format.of_body(entry) > found:
                raise ValueError(f"it is record format {entry['format']}, newer than the export's format {found}")
            body = {k: v for k, v in entry.items() if k not in ("hash", "manifests", "manifests_base64", "envelope")}
            envelope = entry.get("envelope")
            if envelope is not None and not isinstance(envelope, dict):
                raise ValueError("its envelope is not a JSON object")
            if "manifests" in entry:
                manifests = str(entry["manifests"]).encode("utf-8")
            else:
                manifests = base64.b64decode(str(entry.get("manifests_base64", "")), validate=True)
            stored_hash = str(entry.get("hash", ""))
            entry_what = f"record #{index + 1} (revision {revision}) of {what}"
            records.append(
                releases.record_from_body(
                    body, hash=stored_hash, manifests=manifests, what=entry_what, envelope=envelope
                )
            )
        except (ValueError, binascii.Error) as e:
            problems.append(
                Problem(
                    revision if isinstance(revision, int) else None,
                    "unreadable",
                    "export",
                    f"record #{index + 1} of the export is unreadable: {errors.shorten(str(e), 160)}",
                )
            )
    return records, problems


def export_records(doc: Mapping[str, object], name: str = "the audit export") -> list[releases.Record]:
    """The records of an export that parse (``verify_export`` reports the others)."""
    return _parse_export(doc, name)[0]


def verify_export(doc: Mapping[str, object], name: str = "the audit export") -> list[Problem]:
    """``verify`` on an export document, offline, plus its head: the head must be the last record.

    ``name`` says which export in a refusal (NewerRecordFormat, AuditFailed), e.g. its file.
    """
    records, problems = _parse_export(doc, name)
    problems += verify(records, release=str(doc.get("release")), namespace=str(doc.get("namespace")), source="export")
    newest = max(records, key=lambda r: r.revision, default=None)
    head = doc.get("head")
    found = {"revision": newest.revision, "hash": newest.hash} if newest else None
    if head != found:
        problems.append(
            Problem(
                None,
                "head",
                "export",
                f"the export's head is {head} but its newest record is {found}: records were "
                "added to or removed from the export after it was written",
            )
        )
    return problems


def compare_with_export(
    records: Sequence[releases.Record], doc: Mapping[str, object], name: str = "the audit export"
) -> list[Problem]:
    """Every revision in the export must still be in the cluster, unchanged (see the module doc).

    Catches what ``verify`` alone cannot: a deleted or rewritten newest record. Run ``verify`` and
    ``verify_export`` as well; this compares the two and trusts neither to be intact on its own.
    """
    exported, _ = _parse_export(doc, name)  # verify_export reports unreadable entries
    problems: list[Problem] = []
    if records and (records[0].release, records[0].namespace) != (doc.get("release"), doc.get("namespace")):
        problems.append(
            Problem(
                None,
                "foreign",
                "cluster",
                f"the export is of release {doc.get('release')!r} in namespace "
                f"{doc.get('namespace')!r}, not {records[0].release!r} in "
                f"{records[0].namespace!r}",
            )
        )
        return problems
    in_cluster = {r.revision: r for r in records}
    taken = doc.get("exported_at", "?")
    for old in exported:
        current = in_cluster.get(old.revision)
        if current is None:
            problems.append(
                Problem(
                    old.revision,
                    "deleted",
                    "cluster",
                    f"revision {old.revision} is in the export of {taken} but not in the "
                    "cluster: its record was deleted",
                )
            )
        elif current.computed_hash() != old.hash or current.manifests != old.manifests:
            problems.append(
                Problem(
                    old.revision,
                    "differs",
                    "cluster",
                    f"revision {old.revision} in the cluster differs from the export of "
                    f"{taken}: it was rewritten after the export",
                )
            )
    return problems
