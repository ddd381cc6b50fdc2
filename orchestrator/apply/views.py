"""Read-only views of a release and the cluster: history, status, diff, inventory and audit.

Each function connects, reads, and returns plain data for the CLI to print; none of them writes
to the cluster (diff uses a server-side dry-run).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sized
from typing import Any, Literal, TypedDict

import yaml

from orchestrator import conventions, errors, user_files
from orchestrator.apply import applyset, sequence, time_to_serving
from orchestrator.kube import Kube, connect, connection
from orchestrator.plan import node_reports, planner
from orchestrator.profile.model import Profile
from orchestrator.records import audit, purge, releases, revisions, writer
from orchestrator.records import trust as record_trust
from orchestrator.render import manifests as render


class PodRow(TypedDict):
    """One pod of the release in ``status``."""

    name: str
    ready: bool
    phase: str | None
    node: str | None
    gpus: int
    copy: str | None  # the copy across nodes it belongs to, and its role there; None for one-pod copies
    role: str | None


class Replicas(TypedDict):
    desired: int | None
    ready: int
    updated: int


class Uninstalled(TypedDict):
    """The uninstall that removed the release, and the revision a rollback would re-deploy."""

    revision: int
    timestamp: str
    actor: Mapping[str, object]
    deleted: list[str]
    restorable: int | None


class Status(TypedDict):
    """``deployctl status``: the live revision, its pods and the last failure."""

    release: str
    namespace: str
    live_revision: int | None
    live_description: str | None
    image: str | None
    model: Mapping[str, object] | None
    replicas: Replicas
    pods: list[PodRow]
    gate: Mapping[str, object] | None
    planner: Mapping[str, object] | None
    time_to_serving: Mapping[str, object] | None  # the live revision's (record format 4), by step and pod
    last_failure: Mapping[str, object] | None
    revisions: int
    uninstalled: Uninstalled | None  # set when `deployctl uninstall` removed it and nothing was deployed since


class ObjectDiff(TypedDict):
    """One rendered object in ``deployctl diff``: what applying it would change, as a unified diff."""

    kind: str
    name: str
    namespace: str | None
    change: Literal["create", "update", "unchanged"]
    diff: str


class Verified(TypedDict):
    """``deployctl audit verify``: whether the chain (and signatures) hold, and each problem found."""

    ok: bool
    records: int
    head: str
    signatures: str
    problems: list[dict[str, object]]


class Trusted(TypedDict):
    """``deployctl audit trust``: the trust record appended and what it vouches for."""

    revision: int
    up_to: int
    head: str
    keyid: str


def history(options: connection.Connection, name: str, namespace: str) -> list[dict[str, Any]]:
    kube = connect(options.kubeconfig, options.context)
    records = releases.load_history(kube, name, namespace)
    if not records:
        raise _no_records(kube, name, namespace)
    return revisions.summaries(records)


def status(options: connection.Connection, name: str, namespace: str) -> Status:
    kube = connect(options.kubeconfig, options.context)
    records = releases.load_history(kube, name, namespace)
    if not records:
        raise _no_records(kube, name, namespace)
    live = revisions.live(records)
    gone = revisions.uninstalled(records)
    last_failed = next((r for r in reversed(records) if r.outcome == "failed"), None)
    deployment = kube.get("Deployment", name, namespace) or {}
    pods, _ = kube.list("Pod", namespace, labels=f"{conventions.RELEASE_LABEL}={name}")
    pod_rows = [_pod_row(pod) for pod in sorted(pods, key=lambda p: p["metadata"]["name"])]
    dep_status = deployment.get("status") or {}
    groups = applyset.release_objects(kube, "RayCluster", name, namespace)
    # A running canary's copies are not the release's: `deployctl rollout status` shows them.
    copies = [g for g in groups if (g["metadata"].get("labels") or {}).get(conventions.TRACK_LABEL) != "canary"]
    return {
        "release": name,
        "namespace": namespace,
        "live_revision": live.revision if live else None,
        "live_description": live.description if live else None,
        "image": live.image if live else None,
        "model": live.model.model_dump() if live else None,
        "replicas": _copy_counts(copies, pod_rows)
        if groups
        else {
            "desired": deployment.get("spec", {}).get("replicas"),
            "ready": dep_status.get("readyReplicas", 0),
            "updated": dep_status.get("updatedReplicas", 0),
        },
        "pods": pod_rows,
        "gate": live.gate if live else None,
        "planner": live.planner_check() if live else None,
        "time_to_serving": live.time_to_serving if live else None,
        "last_failure": ({"revision": last_failed.revision, **(last_failed.failure or {})} if last_failed else None),
        "revisions": len(records),
        "uninstalled": _uninstalled(gone, records) if gone else None,
    }


def _pod_row(pod: Mapping[str, Any]) -> PodRow:
    """One pod of the release as ``status`` lists it."""
    status = pod.get("status") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    try:
        gpus = conventions.pod_gpus(pod)
    except ValueError:
        gpus = 0  # an unreadable quantity on someone's pod must not hide the release's status
    labels = pod["metadata"].get("labels") or {}
    return {
        "name": pod["metadata"]["name"],
        "ready": conditions.get("Ready") == "True",
        "phase": status.get("phase"),
        "node": pod.get("spec", {}).get("nodeName"),
        "gpus": gpus,
        # A copy across nodes: which copy the pod belongs to and its role in it.
        "copy": labels.get(conventions.COPY_LABEL),
        "role": labels.get(conventions.GROUP_ROLE_LABEL),
    }


def _uninstalled(gone: releases.Record, records: list[releases.Record]) -> Uninstalled:
    """The uninstall record's summary, and the revision a rollback would re-deploy."""
    target = revisions.rollback_target(records)
    return {
        "revision": gone.revision,
        "timestamp": gone.timestamp,
        "actor": gone.actor,
        "deleted": gone.deleted or [],
        "restorable": target.revision if target else None,
    }


def _no_records(kube: Kube, name: str, namespace: str) -> errors.UnknownRelease:
    """No records: say so, and when they were purged, by whom and where they went."""
    stones = purge.tombstones(kube, name, namespace)
    return errors.UnknownRelease(purge.explained(conventions.no_records_message(name, namespace), stones, namespace))


def _copy_counts(copies: list[dict[str, Any]], pods: list[PodRow]) -> Replicas:
    """Copies across nodes: each is ready when all its pods are (the head serves only once its
    workers joined Ray), and KubeRay counts its ready workers."""
    ready = 0
    for copy in copies:
        name = copy["metadata"]["name"]
        members = [p for p in pods if p["copy"] == name]
        workers = sum(int(g.get("replicas", 0)) for g in copy.get("spec", {}).get("workerGroupSpecs") or [])
        joined = int((copy.get("status") or {}).get("readyWorkerReplicas", 0))
        if len(members) == workers + 1 and all(p["ready"] for p in members) and joined >= workers:
            ready += 1
    return {"desired": len(copies), "ready": ready, "updated": len(copies)}


def planner_line(check: Mapping[str, object]) -> str:
    """Predicted against observed KV cache, e.g. `KV cache 1,006,560 tokens planned, 1,012,000 observed (+0.5%)`."""
    planned, observed = check.get("kv_tokens_planned"), check.get("kv_tokens_observed")
    text = f"KV cache {planned:,} tokens planned" if isinstance(planned, int) else "KV cache not planned"
    if isinstance(observed, int):
        text += f", {observed:,} observed"
        if isinstance(planned, int) and planned > 0:
            text += f" ({observed / planned - 1:+.1%})"
    else:
        text += ", not observed (the pods' logs held no vLLM start-up lines)"
    if isinstance(check.get("load_seconds"), (int, float)):
        text += f"; model load {check['load_seconds']:.0f}s"
    return text


def format_status(data: Status) -> str:
    from orchestrator import output

    count = f"{data['revisions']} revision{'s' if data['revisions'] != 1 else ''}"
    gone = data.get("uninstalled")
    if gone:
        restore = gone.get("restorable")
        lines = [
            f"release {data['release']} in {data['namespace']}: uninstalled at revision {gone['revision']} "
            f"({gone['timestamp']} by {gone['actor'].get('user', '?')}, {len(gone['deleted'])} objects deleted), "
            f"{count} kept",
            f"`deployctl rollback {data['release']} -n {data['namespace']}` re-deploys revision {restore}"
            if restore
            else "no deployed revision to re-deploy; `deployctl apply PROFILE` installs it again",
        ]
    else:
        lines = [
            f"release {data['release']} in {data['namespace']}: live revision {data['live_revision']} "
            f"({data['live_description']}), {count}",
            f"image: {data['image']}",
            f"{'copies' if any(p.get('copy') for p in data['pods']) else 'replicas'}: "
            f"{data['replicas']['ready']}/{data['replicas']['desired']} ready",
        ]
    pods = data["pods"]
    if any(p.get("copy") for p in pods):  # copies across nodes: every member, its copy and role
        lines.append(
            output.table(
                ["COPY", "ROLE", "POD", "READY", "PHASE", "NODE", "GPUS"],
                [
                    [p["copy"], p["role"], p["name"], "yes" if p["ready"] else "no", p["phase"], p["node"], p["gpus"]]
                    for p in sorted(pods, key=lambda p: (p["copy"] or "", p["role"] != "leader", p["name"]))
                ],
            )
        )
    elif pods:
        lines.append(
            output.table(
                ["POD", "READY", "PHASE", "NODE", "GPUS"],
                [[p["name"], "yes" if p["ready"] else "no", p["phase"], p["node"], p["gpus"]] for p in pods],
            )
        )
    gate = data.get("gate")
    if gate:
        lines.append(f"gate: {gate.get('summary') or gate.get('verdict')}")
    check = data.get("planner")
    if check and check.get("kv_tokens_observed") is not None:  # nothing to compare before vLLM has said
        lines.append(f"planner: {planner_line(check)}")
    serving = data.get("time_to_serving")
    if serving:
        lines.append(f"time to serving: {time_to_serving.summary(serving)}")
    failure = data.get("last_failure")
    if failure:
        lines.append(
            f"last failure: revision {failure['revision']}: {failure.get('class')}: "
            f"{errors.shorten(str(failure.get('message', '')), 200)}"
        )
    return "\n".join(lines)


def diff(options: connection.Connection, profile: Profile, plan: planner.Plan) -> str:
    """Unified diff between the live objects and what a server-side apply would make of the render."""
    return "".join(d["diff"] for d in diff_objects(options, profile, plan))


def diff_objects(options: connection.Connection, profile: Profile, plan: planner.Plan) -> list[ObjectDiff]:
    """Per rendered object: kind, name, namespace, change (create, update or unchanged) and its unified diff."""
    kube = connect(options.kubeconfig, options.context)
    out: list[ObjectDiff] = []
    live_deployment = kube.get("Deployment", profile.metadata.name, profile.metadata.namespace)
    # The rollout strategy is chosen by apply's preflight from free GPUs, not by the profile:
    # compare against the live choice so that only what the profile changes shows.
    strategy = (live_deployment or {}).get("spec", {}).get("strategy")
    for obj in render.render(profile, plan, strategy=strategy):
        kind, name = obj["kind"], obj["metadata"]["name"]
        namespace = obj["metadata"].get("namespace")
        live = kube.get(kind, name, namespace)
        # Dry-run cannot run in a missing namespace: show the render.
        no_namespace = live is None and kube.get("Namespace", profile.metadata.namespace) is None
        after = obj if no_namespace else kube.apply(obj, dry_run=True)
        before = _clean(live) if live else ""
        after_text = _clean(after)
        label = f"{kind}/{name}"
        text = "".join(
            difflib.unified_diff(
                before.splitlines(keepends=True),
                after_text.splitlines(keepends=True),
                fromfile=f"live/{label}",
                tofile=f"profile/{label}",
            )
        )
        change: Literal["create", "update", "unchanged"] = (
            "create" if live is None else "update" if text else "unchanged"
        )
        out.append({"kind": kind, "name": name, "namespace": namespace, "change": change, "diff": text})
    return out


def _clean(obj: dict[str, Any]) -> str:
    return yaml.safe_dump(applyset.clean(obj), sort_keys=True, default_flow_style=False)


def inventory(options: connection.Connection) -> list[node_reports.GpuPool]:
    kube = connect(options.kubeconfig, options.context)
    nodes, _ = kube.list("Node")
    pods, _ = kube.list("Pod")
    return node_reports.gpu_pools(nodes, pods)


def audit_export(options: connection.Connection, name: str, namespace: str) -> dict[str, Any]:
    kube = connect(options.kubeconfig, options.context)
    records = releases.load_history(kube, name, namespace)
    if not records:
        raise _no_records(kube, name, namespace)
    return audit.export(records, release=name, namespace=namespace)


def audit_verify(
    options: sequence.Options, name: str | None, namespace: str, export_file: str | None, against: str | None
) -> Verified:
    if export_file:
        doc = _read_export(export_file)
        problems = audit.verify_export(doc, f"audit export {export_file}")
        if options.keys.trusted:  # offline, with the public key alone
            in_export = audit.export_records(doc, f"audit export {export_file}")
            checked = record_trust.check(in_export, options.keys, str(doc.get("release")), str(doc.get("namespace")))
            problems += record_trust.problems(checked, "export")
        in_doc = doc.get("records", [])
        count = len(in_doc) if isinstance(in_doc, Sized) else 0
        head = str(doc.get("head", ""))
    else:
        assert name is not None
        kube = connect(options.kubeconfig, options.context)
        foreign: list[str] = []
        records = releases.load_history(kube, name, namespace, warn=foreign.append)
        if not records:
            raise _no_records(kube, name, namespace)
        problems = audit.verify(records, release=name, namespace=namespace)
        if options.keys.trusted:
            problems += record_trust.problems(record_trust.check(records, options.keys, name, namespace))
        # Not in the chain, so no revision's problem; but an object posing as a record is a finding.
        problems += [audit.Problem(None, "foreign", "cluster", message) for message in foreign]
        if against:
            doc = _read_export(against)
            exported = f"audit export {against}"
            problems += audit.verify_export(doc, exported) + audit.compare_with_export(records, doc, exported)
        count = len(records)
        head = records[-1].hash
    return {
        "ok": not problems,
        "records": count,
        "head": head,
        "signatures": "checked" if options.keys.trusted else "not checked (no --key)",
        "problems": [p.to_dict() for p in problems],
    }


def audit_trust(
    options: sequence.Options, name: str, namespace: str, up_to: int | None, report: record_trust.Report
) -> Trusted:
    """``deployctl audit trust``: append a signed record that vouches for revisions 1 to ``up_to``
    (default: the newest) through the hash they chain to. Refused unless that chain verifies."""
    signer = options.keys.signer
    if signer is None:
        raise errors.UsageError(
            "audit trust signs the record it appends: give --signing-key KEY.pem (DEPLOYCTL_SIGNING_KEY)"
        )
    kube = connect(options.kubeconfig, options.context)
    user = kube.whoami()
    with sequence.release_lock(kube, namespace, name, user, options, report):
        records = releases.load_history(kube, name, namespace)
        if not records:
            raise _no_records(kube, name, namespace)
        checked = record_trust.check(records, options.keys, name, namespace)
        newest = up_to or records[-1].revision
        trust = record_trust.trust_body(checked, newest)
        problems = [
            p
            for p in audit.verify(records, release=name, namespace=namespace)
            if p.revision is None or p.revision <= newest
        ]
        # A signature that does not verify is no record from before signing: never vouched for.
        problems += [
            audit.Problem(r.record.revision, "signature", "cluster", f"revision {r.record.revision}: {r.reason}")
            for r in checked.refused
            if r.record.envelope is not None and r.record.revision <= newest
        ]
        if problems:
            raise errors.AuditFailed(
                f"revisions 1-{newest} of {name} do not verify, so they are not vouched for: "
                f"{'; '.join(p.message for p in problems[:3])}. Compare them with an export you kept "
                "(deployctl audit verify --against) and repair the history first. Nothing was changed"
            )
        base = revisions.get(records, newest)
        actor = writer.actor(user, options.environ)
        draft = writer.Draft.following(base, actor, signer, manifests=b"", profile_text="")
        description = f"trust step: revisions 1-{newest} (head {trust['head'][:12]}) vouched for by {user}"
        record = writer.append(kube, writer.NewRecord(draft, "trusted", description, trust=trust))
    return {"revision": record.revision, "up_to": newest, "head": trust["head"], "keyid": signer.keyid}


def _read_export(path: str) -> dict[str, object]:
    raw = user_files.read(path, "audit export", user_files.EXPORT_BYTES)  # no FIFO or device, a bounded read
    if len(raw) > user_files.EXPORT_BYTES:
        raise errors.UsageError(
            f"audit export {path} is over {user_files.EXPORT_BYTES:,} bytes; an export of one release is far smaller: "
            "is it the right file?"
        )
    try:
        text = raw.decode("utf-8")
        try:
            doc = json.loads(text)
        except ValueError:
            # `audit export -o yaml`: the same document; its strings were written quoted where
            # YAML would read them as something else, so they load back as the same strings.
            doc = yaml.safe_load(text)
    except RecursionError as e:  # JSON or YAML nested thousands deep: no export is
        raise errors.UsageError(
            f"cannot read audit export {path}: it is nested too deeply to be an audit export; is it the right file?"
        ) from e
    except (ValueError, yaml.YAMLError) as e:
        raise errors.UsageError(f"cannot read audit export {path}: {errors.excerpt(str(e))}") from e
    if not isinstance(doc, dict):
        raise errors.UsageError(f"{path} is not a deployctl audit export (expected a JSON object)")
    return doc


def calibration(options: connection.Connection, release: str, namespace: str, profile: Profile) -> planner.Calibration:
    """The planner's error as the newest deployed revision of ``release`` with a start-up
    observation showed it, for ``plan --calibrate-from``; refused when that revision ran another
    model, GPU, vLLM version or TP size, since the error does not carry over."""
    kube = connect(options.kubeconfig, options.context)
    records = releases.load_history(kube, release, namespace)
    if not records:
        raise errors.UnknownRelease(conventions.no_records_message(release, namespace))
    found = sequence.calibration(records, release, namespace, profile)
    if isinstance(found, str):
        raise errors.UsageError(found)
    return found
