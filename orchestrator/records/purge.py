"""Purging a release's records: the audit trail leaves the cluster only into a verified export,
and a tombstone stays behind to say so.

The release records (``orchestrator.records.releases``) are the audit trail of every apply, gate,
rollback and uninstall. EU GMP Annex 11 (§9 audit trails, §17 archiving) and 21 CFR 11.10(e) ask
that an audit trail be kept for the retention period and that its removal be attributable, so
``deployctl uninstall --purge`` never just deletes it:

1. it refuses while the chain does not verify (``audit.verify``): a tampered chain is evidence
   for an investigation, not something to tidy away;
2. it writes ``deployctl audit export``'s document, the uninstall record included, to a new file
   the user names (never over an existing one), reads the file back and checks it offline
   (``verify_export``) and against the cluster (``compare_with_export``);
3. it creates a tombstone, an immutable ConfigMap ``deployctl.<release>.purged.<time>`` that is no
   record and survives the purge: who purged, when, every revision's hash, the chain head and the
   sha256 of the export file. An auditor who finds the tombstone knows a purge happened and can
   prove a kept export is that one (same sha256, same head);
4. only then it deletes the records, oldest first, so an interrupted purge leaves a chain whose
   missing revisions ``audit verify`` reports, next to a tombstone that explains them.

The tombstone's own hash sits in an annotation, as a record's does; like records, it can be
deleted by whoever may delete ConfigMaps, which is why deployctl's own Role may not
(docs/runbook.md: who may purge) and why the export belongs in write-once storage.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from orchestrator import conventions, errors, output
from orchestrator.records import audit, encoding, releases

PURGED_LABEL = "deployctl.dev/purged"  # on tombstones; never the record label, so history skips them
TOMBSTONE_KEY = "purge.json"
TOMBSTONE_HASH_ANNOTATION = "deployctl.dev/purge-sha256"


class Cluster(releases.Cluster, Protocol):
    """What a purge needs of ``orchestrator.kube.Kube``: the records' verbs and delete."""

    def delete(self, kind: str, name: str, namespace: str | None = None) -> bool: ...


def tombstone_name(release: str, when: datetime.datetime) -> str:
    return f"deployctl.{release}.purged.{when.strftime('%Y%m%dt%H%M%Sz')}"


def check_export_path(path: str) -> pathlib.Path:
    """The export file to write, refused before anything is deleted when it cannot be a new file."""
    target = pathlib.Path(path)
    if target.exists():
        raise errors.UsageError(
            f"--audit-export {path} already exists; give a new file name. An earlier export is evidence, "
            "and deployctl never overwrites one"
        )
    parent = target.parent if str(target.parent) else pathlib.Path(".")
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise errors.UsageError(
            f"--audit-export {path}: directory {parent} does not exist or is not writable; "
            "create it or choose another path"
        )
    return target


def check_chain(history: Sequence[releases.Record], release: str, namespace: str) -> None:
    """Refuse to purge a chain that does not verify: its problems are for an auditor to see."""
    problems = audit.verify(history, release=release, namespace=namespace)
    if problems:
        raise errors.AuditFailed(
            f"release {release} in namespace {namespace} fails its integrity check, so its records are not "
            f"purged: {'; '.join(p.message for p in problems[:3])}. Investigate first "
            f"(`deployctl audit verify {release} -n {namespace}`); uninstall without --purge keeps them"
        )


def write_export(history: Sequence[releases.Record], release: str, namespace: str, path: pathlib.Path) -> str:
    """Write the export to ``path`` (a new file), read it back and verify it; its sha256."""
    text = output.emit(audit.export(history, release=release, namespace=namespace), "json") + "\n"
    try:
        with path.open("x", encoding="utf-8") as f:  # "x": never over an existing file
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        written = path.read_bytes()
    except OSError as e:
        raise errors.UsageError(
            f"cannot write the audit export to {path}: {errors.shorten(str(e), 200)}. Nothing was purged"
        ) from e
    try:
        doc = json.loads(written)
    except ValueError as e:
        raise errors.AuditFailed(f"the audit export {path} does not read back as JSON ({e}); nothing was purged") from e
    exported = f"audit export {path}"
    problems = audit.verify_export(doc, exported) + audit.compare_with_export(history, doc, exported)
    if problems or len(doc.get("records", [])) != len(history):
        found = "; ".join(p.message for p in problems[:3]) or "it does not hold every record"
        raise errors.AuditFailed(f"the audit export {path} does not verify ({found}); nothing was purged")
    return hashlib.sha256(written).hexdigest()


def tombstone(
    history: Sequence[releases.Record],
    *,
    release: str,
    namespace: str,
    actor: dict[str, object],
    export_sha256: str,
    export_file: str,
    now: datetime.datetime,
) -> dict[str, Any]:
    """The tombstone ConfigMap of a purge of ``history`` (oldest first, not empty)."""
    when = now.astimezone(datetime.timezone.utc)
    body = {
        "release": release,
        "namespace": namespace,
        "purged_at": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "actor": actor,
        "revisions": [{"revision": r.revision, "outcome": r.outcome, "hash": r.hash} for r in history],
        "head": {"revision": history[-1].revision, "hash": history[-1].hash},
        "export": {"sha256": export_sha256, "file": pathlib.Path(export_file).name},
    }
    text = encoding.canonical_json(body)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": tombstone_name(release, when),
            "namespace": namespace,
            "labels": {
                PURGED_LABEL: "true",
                conventions.RELEASE_LABEL: release,
                conventions.MANAGED_BY_LABEL: conventions.MANAGED_BY,
            },
            "annotations": {TOMBSTONE_HASH_ANNOTATION: encoding.sha256(text)},
        },
        "immutable": True,
        "data": {TOMBSTONE_KEY: text.decode()},
    }


def read_tombstone(cm: Mapping[str, object]) -> dict[str, object] | None:
    """A tombstone's body with ``name`` and ``intact`` (its hash matches), or None when unreadable."""
    text = encoding.object_at(cm, "data").get(TOMBSTONE_KEY)
    try:
        body = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    meta = encoding.object_at(cm, "metadata")
    stored = encoding.object_at(meta, "annotations").get(TOMBSTONE_HASH_ANNOTATION)
    intact = stored == encoding.sha256(encoding.canonical_json(body))
    return {**body, "name": meta.get("name"), "intact": intact}


def tombstones(kube: releases.Cluster, release: str, namespace: str) -> list[dict[str, object]]:
    """The release's purge tombstones, oldest first; an unreadable one shows as unreadable."""
    items, _ = kube.list("ConfigMap", namespace, labels=f"{PURGED_LABEL}=true,{conventions.RELEASE_LABEL}={release}")
    found = []
    for cm in items:
        body = read_tombstone(cm)
        found.append(body or {"name": encoding.object_at(cm, "metadata").get("name"), "intact": False, "purged_at": ""})
    return sorted(found, key=lambda t: str(t.get("purged_at", "")))


def explained(message: str, stones: Sequence[Mapping[str, object]], namespace: str) -> str:
    """``message`` about a release without records, followed by what its newest purge tombstone says."""
    if not stones:
        return message
    last = stones[-1]
    revisions = last.get("revisions")
    if not isinstance(revisions, list) or not revisions:
        return f"{message}. ConfigMap {last.get('name')} says its records were purged, but it is unreadable: inspect it"
    first, newest = (r if isinstance(r, Mapping) else {} for r in (revisions[0], revisions[-1]))
    who = encoding.object_at(last, "actor").get("user", "?")
    export = encoding.object_at(last, "export")
    return (
        f"{message}. Its records (revisions {first.get('revision')}–{newest.get('revision')}, head "
        f"{str(encoding.object_at(last, 'head').get('hash'))[:12]}) were purged at {last.get('purged_at')} by {who} "
        f"after their export to {export.get('file')} (sha256 {str(export.get('sha256'))[:16]}…); "
        f"`kubectl get configmap {last.get('name')} -n {namespace} -o yaml` shows the tombstone"
        + ("" if last.get("intact") else " (its hash does not match: it was edited)")
    )


def delete_records(kube: Cluster, history: Sequence[releases.Record]) -> list[str]:
    """Delete the records, oldest first; the names of the ConfigMaps deleted."""
    deleted = []
    for record in history:
        name = releases.record_name(record.release, record.revision)
        kube.delete("ConfigMap", name, record.namespace)
        deleted.append(name)
    return deleted
