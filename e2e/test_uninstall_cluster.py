"""`deployctl uninstall` on the real control plane: what goes, what stays, what is recorded.

Each test applies a release with the vLLM simulator behind it (as e2e/test_apply.py does), then
uninstalls it with the real `deployctl` and reads the cluster with the official client.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import faulthelpers
import kubernetes
import yaml
from deployhelpers import ReleaseEnv, deployctl, exists, profile, start_deployctl, wait_until, write_profile
from test_multinode import two_node

from orchestrator.render import manifests as render

DOCS = Path(__file__).resolve().parent.parent / "docs"
DEPLOYER = "ci-deployer"


def uninstall(env: ReleaseEnv, *args: str, name: str = "llm", timeout: float = 180) -> Any:
    return deployctl(env.kubeconfig, "uninstall", name, "-n", env.namespace, *args, timeout=timeout)


def release_kinds(env: ReleaseEnv) -> dict[str, list[str]]:
    """The release's objects by kind, found by its label as deployctl finds them."""
    selector = "deployctl.dev/release=llm"
    core = kubernetes.client.CoreV1Api(env.api)
    apps = kubernetes.client.AppsV1Api(env.api)
    policy = kubernetes.client.PolicyV1Api(env.api)
    net = kubernetes.client.NetworkingV1Api(env.api)
    lists = {
        "Deployment": apps.list_namespaced_deployment,
        "Service": core.list_namespaced_service,
        "ServiceAccount": core.list_namespaced_service_account,
        "PodDisruptionBudget": policy.list_namespaced_pod_disruption_budget,
        "NetworkPolicy": net.list_namespaced_network_policy,
        "Pod": core.list_namespaced_pod,
    }
    found = {}
    for kind, read in lists.items():
        names = sorted(o.metadata.name for o in read(env.namespace, label_selector=selector).items)
        if names:
            found[kind] = names
    return found


def record_configmaps(env: ReleaseEnv) -> list[str]:
    items = (
        kubernetes.client.CoreV1Api(env.api)
        .list_namespaced_config_map(env.namespace, label_selector="deployctl.dev/release-record=true")
        .items
    )
    return sorted(cm.metadata.name for cm in items)


def test_uninstall_deletes_only_the_releases_objects_and_records_it_in_history_and_audit(env: ReleaseEnv) -> None:
    assert env.apply(profile(env.namespace)).code == 0
    core = kubernetes.client.CoreV1Api(env.api)
    # The user's own objects, one of them even carrying the release's label: never deployctl's to delete.
    core.create_namespaced_secret(env.namespace, {"metadata": {"name": "hf-token"}, "stringData": {"token": "x"}})
    core.create_namespaced_config_map(
        env.namespace, {"metadata": {"name": "notes", "labels": {"deployctl.dev/release": "llm"}}, "data": {"a": "b"}}
    )
    before = release_kinds(env)
    assert set(before) == {"Deployment", "Service", "ServiceAccount", "PodDisruptionBudget", "NetworkPolicy", "Pod"}

    planned = uninstall(env, "--dry-run", "-o", "json")
    assert planned.code == 0, planned.stdout + planned.stderr
    assert planned.json["result"] == "dry_run"
    assert {"object": "Deployment/llm", "action": "delete"} in planned.json["changes"]
    assert {"object": "ConfigMap/deployctl.llm.v2", "action": "create"} in planned.json["changes"]
    assert release_kinds(env) == before, "--dry-run deleted something"

    result = uninstall(env, "-o", "json")
    assert result.code == 0, result.stdout + result.stderr
    out = result.json
    assert out["result"] == "uninstalled" and out["revision"] == 2
    assert set(out["timings"]) >= {"delete", "record", "wait"}
    assert release_kinds(env) == {}, "objects or pods of the release are left"
    assert exists(lambda: core.read_namespaced_persistent_volume_claim("models", env.namespace))
    assert exists(lambda: core.read_namespaced_secret("hf-token", env.namespace))
    assert exists(lambda: core.read_namespaced_config_map("notes", env.namespace))

    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "superseded"), (2, "uninstalled")]
    record = env.record(2)
    assert record["outcome"] == "uninstalled" and record["actor"]["user"]
    assert sorted(record["deleted"]) == sorted(
        f"{kind}/llm" for kind in ("Deployment", "Service", "ServiceAccount", "PodDisruptionBudget", "NetworkPolicy")
    )
    verified = deployctl(env.kubeconfig, "audit", "verify", "llm", "-n", env.namespace, "-o", "json")
    assert verified.code == 0 and verified.json["ok"] and verified.json["records"] == 2, verified.stdout

    status = env.status()
    assert status["uninstalled"]["revision"] == 2 and status["uninstalled"]["restorable"] == 1
    text = deployctl(env.kubeconfig, "status", "llm", "-n", env.namespace)
    assert "uninstalled at revision 2" in text.stdout, text.stdout + text.stderr

    again = uninstall(env)
    assert again.code == 0, again.stdout + again.stderr
    assert "already uninstalled (revision 2" in again.stdout
    assert record_configmaps(env) == ["deployctl.llm.v1", "deployctl.llm.v2"], "the second uninstall wrote a record"

    reinstalled = env.apply(profile(env.namespace))
    assert reinstalled.code == 0 and reinstalled.json["revision"] == 3, reinstalled.stdout + reinstalled.stderr
    statuses = [(r["revision"], r["status"]) for r in env.history()]
    assert statuses == [(1, "superseded"), (2, "uninstalled"), (3, "deployed")]


def test_a_pod_that_outlives_the_timeout_exits_5_naming_it_and_a_rerun_waits_for_it(env: ReleaseEnv) -> None:
    assert env.apply(profile(env.namespace)).code == 0
    core = kubernetes.client.CoreV1Api(env.api)
    (pod,) = release_kinds(env)["Pod"]
    core.patch_namespaced_pod(pod, env.namespace, {"metadata": {"finalizers": ["e2e.deployctl.dev/hold"]}})
    try:
        held = uninstall(env, "--timeout", "4s", "-o", "json")
        assert held.code == 5, held.stdout + held.stderr
        assert held.json["result"] == "uninstall_failed" and pod in held.json["message"]
        assert "waiting for 1 pod to terminate" in held.stderr
        assert set(release_kinds(env)) == {"Pod"}, "the objects should be deleted, only the held pod left"
        assert [r["status"] for r in env.history()] == ["superseded", "uninstalled"]
    finally:  # a held pod would also hold up the namespace's deletion
        core.patch_namespaced_pod(pod, env.namespace, {"metadata": {"finalizers": None}})
    rerun = uninstall(env, "-o", "json")
    assert rerun.code == 0 and rerun.json["result"] == "already_uninstalled", rerun.stdout + rerun.stderr
    assert release_kinds(env) == {}


def test_rollback_after_uninstall_redeploys_the_revision_that_was_live(env: ReleaseEnv) -> None:
    assert env.apply(profile(env.namespace)).code == 0
    assert env.apply(profile(env.namespace, engine={"maxNumSeqs": 16})).code == 0
    assert uninstall(env, "--no-wait").code == 0

    refused = deployctl(env.kubeconfig, "rollback", "llm", "-n", env.namespace, "--to", "3", "-o", "json")
    assert refused.code == 1 and "records an uninstall" in refused.json["error"]

    result = deployctl(env.kubeconfig, "rollback", "llm", "-n", env.namespace, "--to", "1", "-o", "json", timeout=240)
    assert result.code == 0, result.stdout + result.stderr
    assert result.json["result"] == "deployed" and result.json["revision"] == 4
    assert result.json["rolled_back_to"] == 1
    assert env.deployment() is not None
    assert env.record(4)["manifests_sha256"] == env.record(1)["manifests_sha256"], "not revision 1's bytes"
    rows = env.history()
    assert [(r["revision"], r["status"]) for r in rows][-2:] == [(3, "uninstalled"), (4, "deployed")]
    assert env.status()["uninstalled"] is None
    assert deployctl(env.kubeconfig, "audit", "verify", "llm", "-n", env.namespace).code == 0


def test_purge_writes_a_verified_export_leaves_a_tombstone_and_then_removes_the_records(env: ReleaseEnv) -> None:
    assert env.apply(profile(env.namespace)).code == 0
    export = env.tmp / "llm-audit.json"

    result = uninstall(env, "--purge", "--audit-export", str(export), "-o", "json")
    assert result.code == 0, result.stdout + result.stderr
    assert result.json["result"] == "uninstalled"
    assert release_kinds(env) == {} and record_configmaps(env) == []

    doc = json.loads(export.read_text())
    assert [r["outcome"] for r in doc["records"]] == ["deployed", "uninstalled"]
    offline = deployctl(env.kubeconfig, "audit", "verify", "--file", str(export), "-o", "json")
    assert offline.code == 0 and offline.json["ok"], offline.stdout + offline.stderr

    core = kubernetes.client.CoreV1Api(env.api)
    (stone,) = core.list_namespaced_config_map(env.namespace, label_selector="deployctl.dev/purged=true").items
    body = json.loads(stone.data["purge.json"])
    assert body["head"] == {"revision": 2, "hash": doc["records"][-1]["hash"]}
    assert body["export"]["file"] == "llm-audit.json" and stone.immutable

    history = deployctl(env.kubeconfig, "history", "llm", "-n", env.namespace)
    assert history.code == 1
    assert "were purged" in history.stderr and stone.metadata.name in history.stderr
    again = uninstall(env)
    assert again.code == 0 and "already uninstalled and purged" in again.stdout, again.stdout + again.stderr


def test_uninstall_during_a_first_apply_is_refused_with_exit_8_and_deletes_nothing(env: ReleaseEnv) -> None:
    slow = profile(env.namespace, placement={"podAnnotations": {"sim.deployctl.dev/ready-delay": "4s"}})
    path = write_profile(env.tmp, slow)
    first = start_deployctl(env.kubeconfig, "apply", str(path), "--output", "json", log=env.tmp / "apply.log")
    wait_until(lambda: _lease_holder(env) is not None, 30, "the apply to take the lock")

    locked = uninstall(env, "-o", "json")
    assert first.wait(timeout=120) == 0, (env.tmp / "apply.log").read_text()

    assert locked.code == 8, locked.stdout + locked.stderr
    assert "locked by" in locked.json["error"]
    assert "Deployment" in release_kinds(env), "the refused uninstall deleted something"
    assert [r["status"] for r in env.history()] == ["deployed"]


def test_unknown_release_is_a_clear_error_naming_the_namespace(env: ReleaseEnv) -> None:
    result = uninstall(env, name="nope")

    assert result.code == 1
    assert f"no release nope in namespace {env.namespace}" in result.stderr
    assert "Traceback" not in result.stderr
    # Without -n, DEPLOYCTL_NAMESPACE names the namespace, as for every command.
    from_env = deployctl(env.kubeconfig, "uninstall", "nope", env={"DEPLOYCTL_NAMESPACE": env.namespace})
    assert from_env.code == 1 and f"in namespace {env.namespace}" in from_env.stderr, from_env.stderr
    lease = kubernetes.client.CoordinationV1Api(env.api).list_namespaced_lease(env.namespace).items
    assert lease == [], "an uninstall of an unknown release left a lock behind"


def test_a_copy_across_nodes_is_uninstalled_with_its_raycluster_and_pods(env: ReleaseEnv) -> None:
    result = env.apply(two_node(env.namespace))
    assert result.code == 0, result.stdout + result.stderr
    custom = kubernetes.client.CustomObjectsApi(env.api)

    def rayclusters() -> list[str]:
        items = custom.list_namespaced_custom_object("ray.io", "v1", env.namespace, "rayclusters")["items"]
        return [rc["metadata"]["name"] for rc in items]

    (copy,) = rayclusters()

    gone = uninstall(env, "-o", "json")
    assert gone.code == 0, gone.stdout + gone.stderr
    assert f"RayCluster/{copy}" in env.record(2)["deleted"]
    assert rayclusters() == [] and release_kinds(env) == {}


def test_deployctls_role_uninstalls_and_only_the_documented_purge_role_can_purge(env: ReleaseEnv) -> None:
    assert env.apply(profile(env.namespace)).code == 0
    export = env.tmp / "audit.json"
    with faulthelpers.applied(env.api, render.rbac(env.namespace, DEPLOYER)):
        token = faulthelpers.mint_token(env.api, env.namespace, DEPLOYER)
        kubeconfig = faulthelpers.kubeconfig_with(env.kubeconfig, env.tmp / "ci-kubeconfig", token=token, context="ci")

        def run(*args: str) -> Any:
            return deployctl(kubeconfig, "uninstall", "llm", "-n", env.namespace, *args)

        refused = run("--purge", "--audit-export", str(export))
        assert refused.code == 4, refused.stdout + refused.stderr
        assert "delete configmaps" in refused.stderr and "Nothing was deleted" in refused.stderr
        assert "Deployment" in release_kinds(env) and not export.exists()

        done = run("-o", "json")
        assert done.code == 0, done.stdout + done.stderr
        assert env.record(2)["actor"]["user"] == f"system:serviceaccount:{env.namespace}:{DEPLOYER}"

        with faulthelpers.applied(env.api, purge_role(env.namespace, DEPLOYER)):
            purged = run("--purge", "--audit-export", str(export))
        assert purged.code == 0, purged.stdout + purged.stderr
    assert record_configmaps(env) == [] and json.loads(export.read_text())["records"][-1]["outcome"] == "uninstalled"


def purge_role(namespace: str, service_account: str) -> list[dict[str, Any]]:
    """The `deployctl-purge` Role exactly as docs/airgap.md shows it, bound to ``service_account``."""
    blocks = re.findall(r"```yaml\n(.*?)```", (DOCS / "airgap.md").read_text(), re.S)
    role = next(
        doc
        for doc in map(yaml.safe_load, blocks)
        if doc.get("kind") == "Role" and doc["metadata"]["name"] == "deployctl-purge"
    )
    role["metadata"]["namespace"] = namespace
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "deployctl-purge", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "deployctl-purge"},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    }
    return [role, binding]


def _lease_holder(env: ReleaseEnv) -> str | None:
    try:
        lease = kubernetes.client.CoordinationV1Api(env.api).read_namespaced_lease("deployctl-llm", env.namespace)
    except kubernetes.client.ApiException:
        return None
    holder: str | None = lease.spec.holder_identity
    return holder
