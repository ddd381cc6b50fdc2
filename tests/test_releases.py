"""Release records, their status and the audit chain, against an in-memory stand-in for the API server."""

from __future__ import annotations

import base64
import copy
import datetime
import gzip
import json
from collections.abc import Callable
from typing import Any

import pytest

from orchestrator import errors
from orchestrator.records import audit, encoding, releases, revisions, writer

NS = "inference"
RELEASE = "llama3-70b"
NOW = datetime.datetime(2024, 5, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)


class FakeKube:
    """The verbs of ``orchestrator.kube.Kube`` that records use, over a dict.

    Like the API server it refuses ``create`` of an existing name (Conflict) and changes to the data
    of an immutable ConfigMap; it stands in for the cluster in unit tests only (e2e/ uses a real one).
    """

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.creates = 0
        self.before_create: Callable[[dict[str, Any]], None] | None = None

    def _key(self, obj: dict[str, Any]) -> tuple[str, str, str]:
        return obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"]

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        obj = self.objects.get((kind, namespace or "", name))
        return copy.deepcopy(obj)

    def list(
        self, kind: str, namespace: str | None = None, *, labels: str | None = None, fields: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        wanted = dict(term.split("=", 1) for term in labels.split(",")) if labels else {}
        items = [
            copy.deepcopy(obj)
            for (k, ns, _), obj in sorted(self.objects.items())
            if k == kind
            and ns == namespace
            and all(obj["metadata"].get("labels", {}).get(key) == value for key, value in wanted.items())
        ]
        return items, "1"

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        if self.before_create is not None:
            hook, self.before_create = self.before_create, None
            hook(obj)
        if self._key(obj) in self.objects:
            raise errors.Conflict(f"create {obj['kind']} {obj['metadata']['name']}: conflict (already exists)")
        self.creates += 1
        self.objects[self._key(obj)] = copy.deepcopy(obj)
        return copy.deepcopy(obj)

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        old = self.objects[self._key(obj)]
        if old.get("immutable") and any(old.get(f) != obj.get(f) for f in ("data", "binaryData")):
            raise errors.ClusterError(
                "ConfigMap is invalid: data: Forbidden: field is immutable when `immutable` is set"
            )
        self.objects[self._key(obj)] = copy.deepcopy(obj)
        return copy.deepcopy(obj)

    def delete(self, kind: str, name: str, namespace: str | None = None) -> bool:
        return self.objects.pop((kind, namespace or "", name), None) is not None


def manifests(tag: str) -> bytes:
    return f"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {RELEASE}\n# image {tag}\n".encode()


def record(
    kube: FakeKube,
    tag: str,
    *,
    outcome: releases.Outcome = "deployed",
    description: str = "upgrade",
    rollback_of: int | None = None,
    gate: dict[str, Any] | None = None,
    failure: dict[str, str] | None = None,
    actor: dict[str, Any] | None = None,
    profile_text: str | None = None,
) -> releases.Record:
    return writer.append(
        kube,
        writer.NewRecord(
            writer.Draft(
                RELEASE,
                NS,
                manifests=manifests(tag),
                profile_text=profile_text or f"apiVersion: deployctl/v1\nkind: InferenceProfile\n# {tag}\n",
                plan={"fits": True, "kv_tokens": 123456, "max_concurrency": 15.07},
                model=releases.ModelRef(name="meta-llama/Meta-Llama-3-70B-Instruct", revision="abc123"),
                image=f"registry.internal/vllm/vllm-openai:{tag}",
                profile_hash=f"sha256:{tag}",
                actor=actor or {"user": "alice", "ci": {}},
            ),
            outcome=outcome,
            description=description,
            gate=gate,
            failure=failure,
            rollback_of=rollback_of,
        ),
        now=NOW,
    )


def chain(kube: FakeKube, n: int = 3) -> list[releases.Record]:
    return [record(kube, f"v{i}", description="install" if i == 1 else "upgrade") for i in range(1, n + 1)]


def history(kube: FakeKube) -> list[releases.Record]:
    return releases.load_history(kube, RELEASE, NS)


def configmap(kube: FakeKube, revision: int) -> dict[str, Any]:
    cm = kube.get("ConfigMap", releases.record_name(RELEASE, revision), NS)
    assert cm is not None
    return cm


def tamper(kube: FakeKube, revision: int, change: Callable[[dict[str, Any]], None]) -> None:
    """What someone with kubectl must do to an immutable record: delete it and create an altered copy."""
    cm = configmap(kube, revision)
    change(cm)
    kube.delete("ConfigMap", cm["metadata"]["name"], NS)
    kube.create(cm)


def edit_record_json(cm: dict[str, Any], *, rehash: bool, **changes: Any) -> None:
    body = json.loads(cm["data"]["record.json"])
    body.update(changes)
    text = encoding.canonical_json(body)
    cm["data"]["record.json"] = text.decode()
    if rehash:
        cm["metadata"]["annotations"][releases.ANNOTATION_HASH] = encoding.sha256(text)


def verify(records: list[releases.Record]) -> list[audit.Problem]:
    return audit.verify(records, release=RELEASE, namespace=NS)


def codes(problems: list[audit.Problem]) -> list[tuple[int | None, str]]:
    return [(p.revision, p.code) for p in problems]


# -- writing records -------------------------------------------------------------------------------


def test_append_numbers_revisions_and_links_each_to_the_previous_hash() -> None:
    kube = FakeKube()
    first, second, third = chain(kube)

    assert [r.revision for r in (first, second, third)] == [1, 2, 3]
    assert first.prev_hash == ""
    assert second.prev_hash == first.hash
    assert third.prev_hash == second.hash
    assert history(kube) == [first, second, third]


def test_record_configmap_is_immutable_labelled_and_annotated_with_the_hash_of_its_bytes() -> None:
    kube = FakeKube()
    stored = record(kube, "v1", description="install")
    cm = configmap(kube, 1)

    assert cm["metadata"]["name"] == "deployctl.llama3-70b.v1"
    assert cm["metadata"]["labels"] == {
        "deployctl.dev/release-record": "true",
        "deployctl.dev/release": RELEASE,
        "deployctl.dev/revision": "1",
        "deployctl.dev/outcome": "deployed",
        "app.kubernetes.io/managed-by": "deployctl",
        "deployctl.dev/record-format": str(releases.RECORD_FORMAT),
    }
    assert cm["immutable"] is True
    text = cm["data"]["record.json"].encode()
    assert cm["metadata"]["annotations"]["deployctl.dev/record-sha256"] == encoding.sha256(text) == stored.hash
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":")).encode()
    assert gzip.decompress(base64.b64decode(cm["binaryData"]["manifests.yaml.gz"])) == manifests("v1")
    body = json.loads(text)
    assert body["timestamp"] == "2024-05-01T12:00:00Z"
    assert body["manifests_sha256"] == encoding.sha256(manifests("v1"))
    assert body["model"] == {"name": "meta-llama/Meta-Llama-3-70B-Instruct", "revision": "abc123"}


def test_records_cannot_be_edited_in_place() -> None:
    kube = FakeKube()
    record(kube, "v1")
    cm = configmap(kube, 1)
    cm["data"]["record.json"] = "{}"

    with pytest.raises(errors.ClusterError, match="immutable"):
        kube.replace(cm)


def test_manifests_are_gzipped_deterministically() -> None:
    packed = encoding.gzip_bytes(manifests("v1"))

    assert packed == encoding.gzip_bytes(manifests("v1"))
    assert packed[4:8] == b"\0\0\0\0"  # mtime
    assert packed[9] == 0xFF  # OS "unknown", whatever machine wrote it
    assert gzip.decompress(packed) == manifests("v1")
    kube_a, kube_b = FakeKube(), FakeKube()
    record(kube_a, "v1")
    record(kube_b, "v1")
    assert configmap(kube_a, 1) == configmap(kube_b, 1)


def test_append_takes_the_next_number_when_another_writer_won_the_race() -> None:
    kube = FakeKube()
    chain(kube, 1)
    rival: list[releases.Record] = []
    kube.before_create = lambda obj: rival.append(record(kube, "rival"))

    ours = record(kube, "v2")

    assert rival[0].revision == 2
    assert ours.revision == 3
    assert ours.prev_hash == rival[0].hash
    assert verify(history(kube)) == []


def test_append_refuses_when_an_unlabelled_object_holds_the_next_name() -> None:
    kube = FakeKube()
    chain(kube, 1)
    kube.create(
        {
            "kind": "ConfigMap",
            "metadata": {"name": releases.record_name(RELEASE, 2), "namespace": NS},
            "data": {},
        }
    )

    with pytest.raises(errors.AuditFailed, match=r"deployctl\.llama3-70b\.v2 .* is not a record"):
        record(kube, "v2")


def test_append_refuses_values_that_are_not_json_before_writing() -> None:
    kube = FakeKube()

    with pytest.raises(errors.UsageError, match="plain JSON"):
        record(kube, "v1", gate={"p95_ttft_ms": float("nan")})
    assert kube.creates == 0


def test_load_history_refuses_an_unreadable_record() -> None:
    kube = FakeKube()
    chain(kube, 2)
    tamper(kube, 2, lambda cm: cm["data"].update({"record.json": "not json"}))

    with pytest.raises(errors.AuditFailed, match=r"deployctl\.llama3-70b\.v2"):
        history(kube)


def test_actor_keeps_the_user_and_listed_ci_variables_only() -> None:
    env = {
        "CI": "true",
        "GITHUB_RUN_ID": "42",
        "GITHUB_REPOSITORY": "acme/infra",
        "GITHUB_ACTOR": "bob",
        "GITHUB_TOKEN": "ghs_planted",
        "CI_JOB_TOKEN": "glcbt-planted",
        "HOME": "/home/bob",
    }

    assert writer.actor("system:serviceaccount:ci:deployer", env) == {
        "user": "system:serviceaccount:ci:deployer",
        "ci": {"CI": "true", "GITHUB_RUN_ID": "42", "GITHUB_REPOSITORY": "acme/infra", "GITHUB_ACTOR": "bob"},
    }
    assert writer.actor("alice", {}) == {"user": "alice", "ci": {}}


def test_no_stored_field_holds_a_secret_when_the_profile_only_names_it() -> None:
    planted = "hf_PLANTED_SECRET_VALUE"
    env = {
        "CI": "true",
        "HF_TOKEN": planted,
        "GITHUB_TOKEN": planted,
        "CI_JOB_TOKEN": planted,
        "CI_JOB_ID": "7",
    }
    profile_text = "model:\n  name: llama\n  source: {pvc: models}\nengine:\n  hfTokenSecret: hf-token\n"
    kube = FakeKube()

    stored = record(kube, "v1", actor=writer.actor("alice", env), profile_text=profile_text)

    assert planted not in json.dumps(kube.objects[("ConfigMap", NS, "deployctl.llama3-70b.v1")])
    assert planted not in json.dumps(audit.export(history(kube), release=RELEASE, namespace=NS, now=NOW))
    assert stored.actor == {"user": "alice", "ci": {"CI": "true", "CI_JOB_ID": "7"}}


# -- reading history ------------------------------------------------------------------------------


def upgrade_failed_and_rolled_back(kube: FakeKube) -> list[releases.Record]:
    record(kube, "A", description="install")
    record(kube, "B", description="upgrade")
    record(
        kube,
        "C",
        outcome="failed",
        description="gate failed: p95_ttft_ms 2100 > 1500",
        gate={"verdict": "Fail", "p95_ttft_ms": 2100},
        failure={"class": "GateFailed", "message": "p95_ttft_ms 2100 > 1500"},
    )
    record(kube, "B", description="rollback to 2", rollback_of=2)
    return history(kube)


def test_status_after_install_upgrade_failed_upgrade_and_rollback() -> None:
    records = upgrade_failed_and_rolled_back(FakeKube())

    assert revisions.status_of(records) == {1: "superseded", 2: "superseded", 3: "failed", 4: "deployed"}
    live = revisions.live(records)
    assert live is not None
    assert live.revision == 4
    assert live.rollback_of == 2
    assert records[2].failure == {"class": "GateFailed", "message": "p95_ttft_ms 2100 > 1500"}


def test_rollback_after_an_auto_rolled_back_upgrade_goes_to_the_release_before_the_live_bytes() -> None:
    records = upgrade_failed_and_rolled_back(FakeKube())

    target = revisions.rollback_target(records)

    # 4 runs B; 3 failed and 2 is B again, so "back" means A.
    assert target is not None
    assert target.revision == 1
    assert revisions.last_good_before(records, 4) == target


def test_rollback_after_a_failed_upgrade_that_was_not_rolled_back_restores_the_live_release() -> None:
    kube = FakeKube()
    record(kube, "A", description="install")
    record(kube, "B")
    record(kube, "C", outcome="failed", failure={"class": "RollbackFailed", "message": "timed out"})

    target = revisions.rollback_target(history(kube))

    assert target is not None
    assert target.revision == 2


def test_a_failed_install_has_no_live_release_and_nothing_to_roll_back_to() -> None:
    kube = FakeKube()
    record(kube, "A", outcome="failed", description="install", failure={"class": "RolloutFailed", "message": "x"})
    records = history(kube)

    assert revisions.status_of(records) == {1: "failed"}
    assert revisions.live(records) is None
    assert revisions.rollback_target(records) is None


def test_unknown_revision_is_not_found_and_names_the_range() -> None:
    records = chain(FakeKube(), 2)

    with pytest.raises(errors.NotFound, match="revisions 1 to 2"):
        revisions.get(records, 7)
    with pytest.raises(errors.NotFound, match="revision 7"):
        revisions.last_good_before(records, 7)
    assert revisions.get(records, 2) == records[1]


def test_history_summaries_carry_status_and_who_and_what() -> None:
    records = upgrade_failed_and_rolled_back(FakeKube())

    rows = revisions.summaries(records)

    assert [(r["revision"], r["status"], r["description"], r["gate"]) for r in rows] == [
        (1, "superseded", "install", None),
        (2, "superseded", "upgrade", None),
        (3, "failed", "gate failed: p95_ttft_ms 2100 > 1500", "Fail"),
        (4, "deployed", "rollback to 2", None),
    ]
    assert rows[3] == {
        "revision": 4,
        "format": releases.RECORD_FORMAT,
        "status": "deployed",
        "description": "rollback to 2",
        "timestamp": "2024-05-01T12:00:00Z",
        "actor": {"user": "alice", "ci": {}},
        "profile_hash": "sha256:B",
        "image": "registry.internal/vllm/vllm-openai:B",
        "gate": None,
        "planner": {"kv_tokens_planned": None, "kv_tokens_observed": None, "load_seconds": None},
        "time_to_serving": None,
    }


def test_start_up_observations_are_stored_beside_the_plan_and_old_records_keep_their_hash() -> None:
    kube = FakeKube()
    older = record(kube, "v1")
    assert "observed" not in json.loads(older.record_json())  # a record without them hashes as before
    seen = [
        {"pod": "p-1", "device": "GPU", "kv_cache_tokens": 130000, "max_model_len": 8192, "max_concurrency": 15.87,
         "weights_gib": 32.9, "load_seconds": 41.5},
        {"pod": "p-2", "device": "GPU", "kv_cache_tokens": 125000, "max_model_len": 8192, "max_concurrency": 15.26,
         "weights_gib": 32.9, "load_seconds": 44.0},
    ]  # fmt: skip
    newer = writer.append(
        kube,
        writer.NewRecord(
            writer.Draft(
                RELEASE,
                NS,
                manifests=manifests("v2"),
                profile_text="p",
                plan={"kv_cache_tokens": 120000},
                model=older.model,
                image="i",
                profile_hash="h",
                actor={"user": "alice", "ci": {}},
            ),
            outcome="deployed",
            description="upgrade",
            observed=seen,
        ),
        now=NOW,
    )
    stored = history(kube)
    assert stored[1].observed == seen and stored[1].hash == newer.hash == stored[1].computed_hash()
    assert stored[0].hash == older.hash == stored[0].computed_hash()
    expected = {"kv_tokens_planned": 120000, "kv_tokens_observed": 125000, "load_seconds": 44.0}
    assert stored[1].planner_check() == expected


# -- verifying the chain ---------------------------------------------------------------------------


def test_an_intact_chain_verifies() -> None:
    kube = FakeKube()
    upgrade_failed_and_rolled_back(kube)

    assert verify(history(kube)) == []


def test_an_edited_record_is_reported_with_its_revision() -> None:
    kube = FakeKube()
    chain(kube)
    tamper(kube, 2, lambda cm: edit_record_json(cm, rehash=False, actor={"user": "mallory", "ci": {}}))

    problems = verify(history(kube))

    assert codes(problems) == [(2, "edited")]
    assert "revision 2" in problems[0].message


def test_an_edited_record_with_a_recomputed_hash_breaks_the_link_from_the_next_one() -> None:
    kube = FakeKube()
    chain(kube)
    tamper(kube, 2, lambda cm: edit_record_json(cm, rehash=True, image="evil/vllm:latest"))

    assert codes(verify(history(kube))) == [(2, "chain")]


def test_a_deleted_middle_record_leaves_a_gap() -> None:
    kube = FakeKube()
    chain(kube, 4)
    kube.delete("ConfigMap", releases.record_name(RELEASE, 2), NS)

    problems = verify(history(kube))

    assert codes(problems) == [(2, "missing")]
    assert "deleted" in problems[0].message


def test_replaced_manifests_are_reported() -> None:
    kube = FakeKube()
    chain(kube)
    evil = base64.b64encode(encoding.gzip_bytes(b"kind: Deployment\n# evil\n")).decode()
    tamper(kube, 2, lambda cm: cm["binaryData"].update({"manifests.yaml.gz": evil}))

    assert codes(verify(history(kube))) == [(2, "manifests")]


def test_a_record_copied_from_another_release_is_foreign() -> None:
    kube = FakeKube()
    chain(kube, 2)
    tamper(kube, 2, lambda cm: edit_record_json(cm, rehash=True, release="other"))

    assert (2, "foreign") in codes(verify(history(kube)))


# -- export and comparison -------------------------------------------------------------------------


def exported(kube: FakeKube) -> dict[str, Any]:
    doc = audit.export(history(kube), release=RELEASE, namespace=NS, now=NOW)
    loaded: dict[str, Any] = json.loads(json.dumps(doc))  # what an auditor keeps is the JSON text
    return loaded


def test_export_round_trips_and_verifies_offline() -> None:
    kube = FakeKube()
    records = upgrade_failed_and_rolled_back(kube)

    doc = exported(kube)

    assert doc["exported_at"] == "2024-05-01T12:00:00Z"
    assert doc["head"] == {"revision": 4, "hash": records[-1].hash}
    assert doc["records"][0]["manifests"] == manifests("A").decode()
    assert audit.verify_export(doc) == []
    assert audit.compare_with_export(records, doc) == []


def test_export_carries_manifests_that_are_not_utf8_exactly() -> None:
    kube = FakeKube()
    chain(kube, 1)
    tamper(
        kube,
        1,
        lambda cm: cm["binaryData"].update(
            {"manifests.yaml.gz": base64.b64encode(encoding.gzip_bytes(b"\xff\xfe")).decode()}
        ),
    )

    doc = exported(kube)

    assert "manifests" not in doc["records"][0]
    assert codes(audit.verify_export(doc)) == [(1, "manifests")]
    assert audit.compare_with_export(history(kube), doc) == []


def test_an_edited_or_truncated_export_does_not_verify() -> None:
    kube = FakeKube()
    chain(kube)
    doc = exported(kube)

    edited = copy.deepcopy(doc)
    edited["records"][1]["description"] = "nothing to see"
    assert codes(audit.verify_export(edited)) == [(2, "edited")]

    truncated = copy.deepcopy(doc)
    del truncated["records"][-1]
    assert [p.code for p in audit.verify_export(truncated)] == ["head"]

    broken = copy.deepcopy(doc)
    del broken["records"][0]["profile"]
    assert (1, "unreadable") in codes(audit.verify_export(broken))


def test_something_that_is_not_an_export_is_a_usage_error() -> None:
    with pytest.raises(errors.UsageError, match="not a deployctl audit export"):
        audit.verify_export({"kind": "ConfigMap"})


def test_a_deleted_newest_record_passes_verify_but_not_the_comparison_with_an_export() -> None:
    kube = FakeKube()
    chain(kube)
    doc = exported(kube)
    kube.delete("ConfigMap", releases.record_name(RELEASE, 3), NS)

    assert verify(history(kube)) == []  # the chain alone cannot see it
    assert codes(audit.compare_with_export(history(kube), doc)) == [(3, "deleted")]


def test_a_rewritten_newest_record_differs_from_the_export() -> None:
    kube = FakeKube()
    chain(kube)
    doc = exported(kube)
    tamper(kube, 3, lambda cm: edit_record_json(cm, rehash=True, actor={"user": "mallory", "ci": {}}))

    assert verify(history(kube)) == []
    assert codes(audit.compare_with_export(history(kube), doc)) == [(3, "differs")]


def test_records_appended_after_the_export_are_fine() -> None:
    kube = FakeKube()
    chain(kube, 2)
    doc = exported(kube)
    record(kube, "v3")

    assert audit.compare_with_export(history(kube), doc) == []
    assert verify(history(kube)) == []


def test_the_comparison_refuses_an_export_of_another_release() -> None:
    kube = FakeKube()
    chain(kube, 1)
    doc = exported(kube)
    doc["release"] = "other"

    assert [p.code for p in audit.compare_with_export(history(kube), doc)] == ["foreign"]


@pytest.mark.parametrize(
    "profile_text",
    [
        "gate: {endpoint: http://infer:8000}\nrollout: {groupJoinSeconds: 30}\n",
        "apiVersion: deployctl.dev/v1\nkind: InferenceProfile\nmetadata: {name: llm}\n"
        "spec:\n  gate: {endpoint: http://infer:8000}\n  rollout: {groupJoinSeconds: 30}\n",
    ],
    ids=["profile-file", "inferenceprofile-object"],
)
def test_a_rollback_reads_the_gate_and_rollout_settings_of_a_profile_file_or_object(profile_text: str) -> None:
    stored = record(FakeKube(), "v1", profile_text=profile_text)
    assert stored.stored_settings() == {"endpoint": "http://infer:8000"}
    assert stored.stored_section("rollout") == {"groupJoinSeconds": 30}
