"""`deployctl uninstall` without a cluster: what it deletes, what it records, the purge's export and
tombstone, the status after it, and the command line's refusals.

The records are written through ``writer.append`` into the in-memory API server stand-in of
tests/test_releases.py; the whole sequence against a real control plane is e2e/test_uninstall_cluster.py.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
import pathlib
from typing import Any

import pytest
import test_releases as tr
from click.testing import CliRunner

from orchestrator import errors
from orchestrator.apply import outcome, pipeline, pods_gone, uninstall
from orchestrator.cli import app as cli
from orchestrator.errors import ExitCode
from orchestrator.records import audit, encoding, purge, releases, revisions, writer

NS, RELEASE = tr.NS, tr.RELEASE
NOW = datetime.datetime(2024, 6, 1, 8, 30, 0, tzinfo=datetime.timezone.utc)


class ClusterKube(tr.FakeKube):
    """The record stand-in, plus what an uninstall reads of the workload: kinds whose CRD is not
    installed answer NotFound, kinds the identity may not list answer Forbidden, as the API does."""

    def __init__(self, *, missing: tuple[str, ...] = (), forbidden: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.missing, self.forbidden = missing, forbidden

    def list(
        self, kind: str, namespace: str | None = None, *, labels: str | None = None, fields: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        if kind in self.missing:
            raise errors.NotFound(f"the server could not find the requested resource ({kind})")
        if kind in self.forbidden:
            raise errors.Forbidden(f"list {kind}: forbidden")
        return super().list(kind, namespace, labels=labels, fields=fields)


def workload(
    kind: str, name: str, *, release: str = RELEASE, managers: tuple[str, ...] = ("deployctl",)
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"deployctl.dev/release": release},
            "uid": "0b7c",
            "resourceVersion": "42",
            "managedFields": [{"manager": m, "operation": "Apply"} for m in managers],
        },
        "spec": {"replicas": 1},
        "status": {"readyReplicas": 1},
    }


def put(kube: tr.FakeKube, *objects: dict[str, Any]) -> None:
    for obj in objects:
        kube.create(obj)


def installed_and_upgraded(kube: tr.FakeKube) -> None:
    tr.record(kube, "A", description="install")
    tr.record(kube, "B", description="upgrade")


def uninstall_record(kube: tr.FakeKube, deleted: list[dict[str, Any]]) -> releases.Record:
    history = tr.history(kube)
    return uninstall.record_uninstall(kube, history, deleted, {"user": "bob", "ci": {}}, None)


# --- what belongs to the release ------------------------------------------------------------------


def test_release_objects_are_the_labelled_objects_of_the_applied_kinds_workloads_first() -> None:
    kube = ClusterKube()
    put(
        kube,
        workload("ServiceAccount", RELEASE),
        workload("Service", RELEASE),
        workload("NetworkPolicy", RELEASE),
        workload("PodDisruptionBudget", RELEASE),
        workload("Deployment", RELEASE),
        workload("PodMonitor", RELEASE),
        workload("Deployment", "other", release="someone-else"),
        # Never the release's: the user's claim and Secret, and the records (ConfigMaps), even labelled.
        workload("PersistentVolumeClaim", "models"),
        workload("Secret", "hf-token"),
        workload("ConfigMap", "notes"),
    )

    found = [uninstall._ref(o) for o in uninstall.release_objects(kube, RELEASE, NS, set())]

    # Pods stop before their Service and NetworkPolicy go; the ServiceAccount, created first, goes last.
    assert found == [
        f"PodMonitor/{RELEASE}",
        f"Deployment/{RELEASE}",
        f"PodDisruptionBudget/{RELEASE}",
        f"Service/{RELEASE}",
        f"NetworkPolicy/{RELEASE}",
        f"ServiceAccount/{RELEASE}",
    ]


def test_a_kind_whose_crd_is_missing_has_no_objects_but_one_the_release_used_must_be_listable() -> None:
    kube = ClusterKube(missing=("RayCluster", "LeaderWorkerSet"), forbidden=("PodMonitor",))
    put(kube, workload("Deployment", RELEASE))

    assert [o["kind"] for o in uninstall.release_objects(kube, RELEASE, NS, set())] == ["Deployment"]
    # A release that applied a PodMonitor would leave it behind unseen: that is an error, not nothing.
    with pytest.raises(errors.Forbidden, match="PodMonitor"):
        uninstall.release_objects(kube, RELEASE, NS, {"PodMonitor"})


def test_the_optional_kinds_a_release_used_are_read_from_its_stored_manifests() -> None:
    kube = tr.FakeKube()
    tr.record(kube, "A", description="install")
    assert uninstall.rendered_optional_kinds(tr.history(kube)) == set()

    writer.append(
        kube,
        writer.NewRecord(
            writer.Draft(
                RELEASE,
                NS,
                manifests=b"kind: Service\n---\napiVersion: ray.io/v1\nkind: RayCluster\n---\nkind: PodMonitor\n",
                profile_text="p",
                plan=None,
                model=releases.ModelRef(name="m", revision="r"),
                image="i",
                profile_hash="h",
                actor={"user": "alice"},
            ),
            outcome="deployed",
            description="upgrade to two nodes",
        ),
    )

    assert uninstall.rendered_optional_kinds(tr.history(kube)) == {"RayCluster", "PodMonitor"}


def test_objects_another_tool_applies_are_named_with_their_managers() -> None:
    ours = workload("Deployment", RELEASE)
    helm = workload("Service", RELEASE, managers=("helm",))
    flux = workload("NetworkPolicy", RELEASE, managers=("kustomize-controller", "kubectl-edit"))
    stripped = workload("ServiceAccount", RELEASE, managers=())
    edited = workload("PodDisruptionBudget", RELEASE, managers=("deployctl", "kubectl-edit"))

    found = uninstall.applied_by_others([ours, helm, flux, stripped, edited])

    assert found == [f"Service/{RELEASE} (helm)", f"NetworkPolicy/{RELEASE} (kubectl-edit, kustomize-controller)"]


# --- the uninstall record -------------------------------------------------------------------------


def test_the_uninstall_record_says_who_and_what_was_deleted_and_keeps_the_chain_verifiable() -> None:
    kube = tr.FakeKube()
    installed_and_upgraded(kube)
    deleted = [workload("Deployment", RELEASE), workload("Service", RELEASE)]

    record = uninstall_record(kube, deleted)
    history = tr.history(kube)

    assert record.revision == 3 and record.outcome == "uninstalled"
    assert record.deleted == [f"Deployment/{RELEASE}", f"Service/{RELEASE}"]
    assert record.actor["user"] == "bob"
    assert record.description == "uninstall (revision 2 was live; 2 objects deleted)"
    # The identity of what was removed is the live revision's; the bytes are the objects as applied.
    assert record.image == history[1].image and record.profile == history[1].profile
    stored = record.manifests.decode()
    assert "kind: Deployment" in stored and "kind: Service" in stored
    assert "resourceVersion" not in stored and "managedFields" not in stored and "readyReplicas" not in stored
    assert record.prev_hash == history[1].hash
    assert audit.verify(history, release=RELEASE, namespace=NS) == []
    assert json.loads(tr.configmap(kube, 3)["data"]["record.json"])["deleted"] == record.deleted


def test_the_uninstall_record_round_trips_through_an_export_and_an_edit_of_it_is_caught() -> None:
    kube = tr.FakeKube()
    installed_and_upgraded(kube)
    uninstall_record(kube, [workload("Deployment", RELEASE)])

    doc = audit.export(tr.history(kube), release=RELEASE, namespace=NS)
    assert audit.verify_export(doc) == []
    assert doc["records"][-1]["deleted"] == [f"Deployment/{RELEASE}"]

    tr.tamper(kube, 3, lambda cm: tr.edit_record_json(cm, rehash=False, deleted=[]))
    assert [p.revision for p in audit.verify(tr.history(kube), release=RELEASE, namespace=NS)] == [3]


def test_records_without_deleted_keep_their_hash() -> None:
    kube = tr.FakeKube()
    first = tr.record(kube, "A", description="install")

    assert "deleted" not in json.loads(first.record_json())
    assert first.hash == encoding.sha256(encoding.canonical_json(first.body()))


def test_after_uninstall_nothing_is_live_and_rollback_targets_the_revision_that_was() -> None:
    kube = tr.FakeKube()
    installed_and_upgraded(kube)
    uninstall_record(kube, [workload("Deployment", RELEASE)])
    history = tr.history(kube)

    assert revisions.status_of(history) == {1: "superseded", 2: "superseded", 3: "uninstalled"}
    assert revisions.live(history) is None
    gone = revisions.uninstalled(history)
    assert gone is not None and gone.revision == 3
    target = revisions.rollback_target(history)
    assert target is not None and target.revision == 2
    assert [s["status"] for s in revisions.summaries(history)] == ["superseded", "superseded", "uninstalled"]


def test_a_rollback_after_uninstall_makes_the_release_live_again() -> None:
    kube = tr.FakeKube()
    installed_and_upgraded(kube)
    uninstall_record(kube, [workload("Deployment", RELEASE)])
    tr.record(kube, "B", description="rollback to 2", rollback_of=2)
    history = tr.history(kube)

    assert revisions.uninstalled(history) is None
    live = revisions.live(history)
    assert live is not None and live.revision == 4
    assert revisions.status_of(history)[4] == "deployed"


def test_rollback_to_the_uninstall_record_itself_is_refused_naming_it() -> None:
    kube = tr.FakeKube()
    installed_and_upgraded(kube)
    uninstall_record(kube, [workload("Deployment", RELEASE)])

    with pytest.raises(errors.UsageError, match=r"revision 3 of .* records an uninstall"):
        pipeline._rollback_target(tr.history(kube), RELEASE, 3)
    assert pipeline._rollback_target(tr.history(kube), RELEASE, 1).revision == 1


def test_a_refused_delete_is_recorded_as_a_failed_uninstall_and_the_release_stays_live() -> None:
    kube = tr.FakeKube()
    installed_and_upgraded(kube)
    failure = outcome.Failure("cluster_error", "deleting Service/x failed: forbidden", "delete")

    record = uninstall.record_uninstall(
        kube, tr.history(kube), [workload("Deployment", RELEASE)], {"user": "bob"}, failure
    )

    assert record.outcome == "failed" and record.failure is not None
    assert record.description.startswith("uninstall failed (revision 2 was live; 1 deleted")
    live = revisions.live(tr.history(kube))
    assert live is not None and live.revision == 2  # the next apply's automatic rollback still has a target


def test_uninstall_endings_exit_0_a_refused_delete_4_and_pods_outliving_the_timeout_5() -> None:
    assert outcome.exit_code("uninstalled", None) == ExitCode.OK
    assert outcome.exit_code("already_uninstalled", None) == ExitCode.OK
    refused = outcome.Failure("cluster_error", "deleting Service/x failed", "delete")
    assert outcome.exit_code("uninstall_failed", refused) == ExitCode.CLUSTER_ERROR
    slow = outcome.Failure("timeout", "pods left", "wait")
    assert outcome.exit_code("uninstall_failed", slow) == ExitCode.ROLLOUT_FAILED


# --- waiting for the pods -------------------------------------------------------------------------


def test_pods_being_waited_for_are_named_with_their_state_four_at_most() -> None:
    now = datetime.datetime(2024, 6, 1, 8, 30, 12, tzinfo=datetime.timezone.utc)
    pods = [
        {"metadata": {"name": "a", "deletionTimestamp": "2024-06-01T08:30:00Z"}, "status": {"phase": "Running"}},
        {"metadata": {"name": "b"}, "status": {"phase": "Running"}},
        {"metadata": {"name": "c"}},
        *({"metadata": {"name": f"z{i}"}, "status": {"phase": "Running"}} for i in range(3)),
    ]

    text = pods_gone.describe_pods(pods, now)

    assert text == (
        "waiting for 6 pods to terminate: a (terminating 12s), b (Running), c (Pending), z0 (Running), and 2 more"
    )


# --- the purge ------------------------------------------------------------------------------------


def test_a_purge_export_is_a_new_verified_file_and_the_tombstone_carries_its_digest(tmp_path: pathlib.Path) -> None:
    kube = tr.FakeKube()
    installed_and_upgraded(kube)
    uninstall_record(kube, [workload("Deployment", RELEASE)])
    history = tr.history(kube)
    path = tmp_path / "llama-audit.json"

    digest = purge.write_export(history, RELEASE, NS, purge.check_export_path(str(path)))
    stone = purge.tombstone(
        history,
        release=RELEASE,
        namespace=NS,
        actor={"user": "carol"},
        export_sha256=digest,
        export_file=str(path),
        now=NOW,
    )

    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()
    assert audit.verify_export(json.loads(path.read_text())) == []
    assert stone["metadata"]["name"] == f"deployctl.{RELEASE}.purged.20240601t083000z"
    assert stone["immutable"] is True
    body = purge.read_tombstone(stone)
    assert body is not None and body["intact"] is True
    assert body["head"] == {"revision": 3, "hash": history[-1].hash}
    assert [r["outcome"] for r in body["revisions"]] == ["deployed", "deployed", "uninstalled"]
    assert body["export"] == {"sha256": digest, "file": "llama-audit.json"}
    # An existing export is evidence: never overwritten.
    with pytest.raises(errors.UsageError, match="already exists"):
        purge.check_export_path(str(path))


def test_the_tombstone_is_not_a_record_and_explains_a_release_without_records(tmp_path: pathlib.Path) -> None:
    kube = tr.FakeKube()
    installed_and_upgraded(kube)
    history = tr.history(kube)
    digest = purge.write_export(history, RELEASE, NS, tmp_path / "e.json")
    kube.create(
        purge.tombstone(
            history, release=RELEASE, namespace=NS, actor={"user": "carol"}, export_sha256=digest,
            export_file="e.json", now=NOW,
        )
    )  # fmt: skip
    purge.delete_records(kube, history)

    assert tr.history(kube) == []
    stones = purge.tombstones(kube, RELEASE, NS)
    text = purge.explained("no records", stones, NS)
    assert "revisions 1–2" in text and "by carol" in text and "e.json" in text and digest[:16] in text
    assert "edited" not in text

    edited = copy.deepcopy(kube.get("ConfigMap", stones[0]["name"], NS))
    assert edited is not None
    edited["data"][purge.TOMBSTONE_KEY] = edited["data"][purge.TOMBSTONE_KEY].replace("carol", "mallory")
    body = purge.read_tombstone(edited)
    assert body is not None and body["intact"] is False
    assert "it was edited" in purge.explained("no records", [body], NS)


def test_a_chain_that_does_not_verify_is_not_purged() -> None:
    kube = tr.FakeKube()
    installed_and_upgraded(kube)
    tr.tamper(kube, 1, lambda cm: tr.edit_record_json(cm, rehash=False, description="nothing to see"))

    with pytest.raises(errors.AuditFailed, match="not purged"):
        purge.check_chain(tr.history(kube), RELEASE, NS)


# --- the command line -----------------------------------------------------------------------------


def run(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(cli.main, ["uninstall", *args], env=env)


def test_a_name_that_cannot_be_a_release_is_refused_before_connecting() -> None:
    result = run("Llama_3", "--kubeconfig", "/nonexistent/kubeconfig")

    assert result.exit_code == ExitCode.USAGE
    assert "NAME 'Llama_3' is not a release name" in result.stderr
    assert "Traceback" not in result.output


def test_purge_without_an_export_file_is_refused_naming_the_flag() -> None:
    result = run(RELEASE, "--purge", "--kubeconfig", "/nonexistent/kubeconfig")

    assert result.exit_code == ExitCode.USAGE
    assert "give --audit-export FILE" in result.stderr


def test_an_export_file_without_purge_points_at_audit_export() -> None:
    result = run(RELEASE, "--audit-export", "x.json", "-o", "json", "--kubeconfig", "/nonexistent/kubeconfig")

    assert result.exit_code == ExitCode.USAGE
    assert json.loads(result.stdout)["exit_code"] == ExitCode.USAGE
    assert "deployctl audit export" in result.stderr


def test_purge_refuses_an_existing_export_file_before_connecting(tmp_path: pathlib.Path) -> None:
    old = tmp_path / "old.json"
    old.write_text("{}")

    result = run(RELEASE, "--purge", "--audit-export", str(old), "--kubeconfig", "/nonexistent/kubeconfig")

    assert result.exit_code == ExitCode.USAGE
    assert f"--audit-export {old} already exists" in result.stderr
    assert old.read_text() == "{}"


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["--timeout", "ten minutes"], {}, "--timeout"),
        (["--timeout", "0s"], {}, "--timeout"),
        (["--lock-ttl", "2s"], {}, "--lock-ttl"),
        (["-o", "table"], {}, "--output"),
        ([], {"DEPLOYCTL_UNINSTALL_TIMEOUT": "soon"}, "--timeout"),
    ],
)
def test_bad_durations_and_formats_name_the_option(args: list[str], env: dict[str, str], needle: str) -> None:
    result = run(RELEASE, *args, env=env)

    assert result.exit_code == ExitCode.USAGE
    assert needle in result.stderr
    assert "Traceback" not in result.output


def test_unknown_kubeconfig_is_a_clear_error_not_a_traceback(tmp_path: pathlib.Path) -> None:
    result = run(RELEASE, "-n", "inference", "--kubeconfig", str(tmp_path / "missing"))

    assert result.exit_code != 0
    assert "Traceback" not in result.output
    assert result.stderr.startswith("error: ")


def test_options_read_their_deployctl_uninstall_variables(tmp_path: pathlib.Path) -> None:
    # DEPLOYCTL_UNINSTALL_PURGE reaches the library: it asks for the export file the purge needs.
    purge_only = run(RELEASE, env={"DEPLOYCTL_UNINSTALL_PURGE": "1"})
    assert purge_only.exit_code == ExitCode.USAGE and "give --audit-export FILE" in purge_only.stderr

    old = tmp_path / "kept.json"
    old.write_text("{}")
    both = run(RELEASE, env={"DEPLOYCTL_UNINSTALL_PURGE": "true", "DEPLOYCTL_UNINSTALL_AUDIT_EXPORT": str(old)})
    assert both.exit_code == ExitCode.USAGE and f"--audit-export {old} already exists" in both.stderr
