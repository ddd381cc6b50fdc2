"""No takeover and confined writes, on the real control plane (docs/security.md).

A release named like another team's Service must not take it over; `--adopt` does, and says so in
the record. A record whose stored manifests reach outside the release (a Deployment in
`kube-system`, a ClusterRoleBinding) is refused by `rollback` and by the automatic rollback of a
failed apply, and nothing outside the release's namespace is written. A junk ConfigMap with the
record labels blocks neither apply nor rollback. Deleting an invalid InferenceProfile leaves a CLI
release of the same name alone.

The record is forged here with the cluster admin's kubeconfig and deployctl's own library (valid
hashes): what the chain alone cannot tell from a real one. Only its confinement is under test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import pytest
import yaml
from controllerhelpers import apply_object, conditions, get_object, object_doc
from deployhelpers import ReleaseEnv, deployctl, exists, profile, wait_until

from orchestrator import conventions
from orchestrator.controller import crd
from orchestrator.kube import connect
from orchestrator.records import releases, revisions, writer

pytestmark = pytest.mark.kwok


def _core(env: ReleaseEnv) -> Any:
    return kubernetes.client.CoreV1Api(env.api)


def _foreign_service(env: ReleaseEnv) -> Any:
    """Another team's Service named like the release ("llm"), with its own selector and labels."""
    body = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "llm", "labels": {"team": "billing", "app": "billing-api"}},
        "spec": {"selector": {"app": "billing-api"}, "ports": [{"name": "web", "port": 80, "targetPort": 8080}]},
    }
    return _core(env).create_namespaced_service(env.namespace, body)


def test_a_release_named_like_a_foreign_service_is_refused_and_the_service_is_unchanged(env: ReleaseEnv) -> None:
    before = _foreign_service(env)

    result = env.apply(profile(env.namespace))

    assert result.code == 5, result.stdout + result.stderr
    message = result.json["error"]
    assert "would take over Service/llm" in message and "--adopt" in message and "Nothing was changed" in message
    after = _core(env).read_namespaced_service("llm", env.namespace)
    assert after.metadata.resource_version == before.metadata.resource_version
    assert after.spec.selector == {"app": "billing-api"}
    assert conventions.RELEASE_LABEL not in (after.metadata.labels or {})
    assert env.deployment() is None
    # Refused before the first write: not even the release lock's Lease, nor a record.
    leases = kubernetes.client.CoordinationV1Api(env.api).list_namespaced_lease(env.namespace).items
    assert "deployctl-llm" not in [lease.metadata.name for lease in leases]
    records = _core(env).list_namespaced_config_map(env.namespace, label_selector=f"{releases.LABEL_RECORD}=true")
    assert records.items == []


def test_adopt_takes_the_service_over_and_the_record_says_so(env: ReleaseEnv) -> None:
    _foreign_service(env)

    result = env.apply(profile(env.namespace), "--adopt")

    assert result.code == 0, result.stdout + result.stderr
    service = _core(env).read_namespaced_service("llm", env.namespace)
    assert (service.metadata.labels or {}).get(conventions.RELEASE_LABEL) == "llm"
    assert service.spec.selector.get("app.kubernetes.io/instance") == "llm"  # its traffic now goes to the release
    rows = env.history()
    assert rows[0]["description"] == "install, adopting Service/llm (--adopt)"


# --- a record that reaches outside the release ------------------------------------------------------


def _outside(env: ReleaseEnv) -> list[dict[str, Any]]:
    """A Deployment in kube-system and a ClusterRoleBinding to cluster-admin, labelled for the release."""
    name = f"forged-{env.namespace}"[:63]
    labels = {conventions.RELEASE_LABEL: "llm"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "kube-system", "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "registry.internal/evil@sha256:" + "0" * 64}]},
            },
        },
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": labels},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": env.namespace}],
    }
    return [deployment, binding]


def _forge(env: ReleaseEnv) -> int:
    """Append a deployed revision whose manifests are revision 1's plus the objects of ``_outside``."""
    kube = connect(str(env.kubeconfig))
    live = revisions.live(releases.load_history(kube, "llm", env.namespace))
    assert live is not None
    objects = [o for o in yaml.safe_load_all(live.manifests.decode()) if o] + _outside(env)
    forged = dataclasses.replace(
        writer.Draft.of(live, {"user": "mallory", "ci": {}}),
        manifests=yaml.safe_dump_all(objects, sort_keys=False).encode(),
    )
    return forged.record(kube, outcome="deployed", description="upgrade from revision 1").revision


def _nothing_outside_was_written(env: ReleaseEnv) -> None:
    name = f"forged-{env.namespace}"[:63]
    with pytest.raises(kubernetes.client.ApiException) as gone:
        kubernetes.client.AppsV1Api(env.api).read_namespaced_deployment(name, "kube-system")
    assert gone.value.status == 404
    with pytest.raises(kubernetes.client.ApiException) as gone:
        kubernetes.client.RbacAuthorizationV1Api(env.api).read_cluster_role_binding(name)
    assert gone.value.status == 404


@contextlib.contextmanager
def _cleaned(env: ReleaseEnv) -> Iterator[None]:
    """Whatever happens, nothing of the test stays outside its namespace."""
    try:
        yield
    finally:
        name = f"forged-{env.namespace}"[:63]
        with contextlib.suppress(kubernetes.client.ApiException):
            kubernetes.client.AppsV1Api(env.api).delete_namespaced_deployment(name, "kube-system")
        with contextlib.suppress(kubernetes.client.ApiException):
            kubernetes.client.RbacAuthorizationV1Api(env.api).delete_cluster_role_binding(name)


def test_rollback_to_a_record_reaching_outside_the_release_is_refused_as_tampering(env: ReleaseEnv) -> None:
    assert env.apply(profile(env.namespace)).code == 0
    with _cleaned(env):
        revision = _forge(env)

        result = deployctl(env.kubeconfig, "rollback", "llm", "-n", env.namespace, "--to", str(revision), "-o", "json")

        assert result.code == 9, result.stdout + result.stderr
        message = result.json["error"]
        assert "in namespace kube-system is outside the release's namespace" in message
        assert "ClusterRoleBinding/" in message and "is not a kind deployctl renders" in message
        _nothing_outside_was_written(env)
        assert len(env.history()) == revision, "no record copies the forged bytes"


def test_a_failed_apply_does_not_restore_a_forged_record(env: ReleaseEnv, simulator: Callable[..., Any]) -> None:
    assert env.apply(profile(env.namespace)).code == 0
    with _cleaned(env):
        _forge(env)  # now the live revision: the automatic rollback's target
        bad = simulator(model="sim-model", fault="health-fail")
        env.forward_8001(bad.port)

        result = env.apply(profile(env.namespace, port=8001))

        assert result.code == 7, result.stdout + result.stderr
        out = result.json
        assert out["result"] == "rollback_failed"
        assert "the rollback to 2 was refused" in out["message"] and "tampering" in out["message"]
        _nothing_outside_was_written(env)


# --- junk record ConfigMaps --------------------------------------------------------------------------


def test_a_junk_record_configmap_blocks_neither_apply_nor_rollback(env: ReleaseEnv) -> None:
    assert env.apply(profile(env.namespace)).code == 0
    labels = {releases.LABEL_RECORD: "true", releases.LABEL_RELEASE: "llm"}
    junk = {"metadata": {"name": "junk", "labels": labels}, "data": {"hello": "world"}}
    _core(env).create_namespaced_config_map(env.namespace, junk)

    upgrade = env.apply(profile(env.namespace, engine={"maxNumSeqs": 16}))
    assert upgrade.code == 0, upgrade.stdout + upgrade.stderr
    assert "ConfigMap junk in namespace" in upgrade.stderr and "skipped" in upgrade.stderr
    rollback = deployctl(env.kubeconfig, "rollback", "llm", "-n", env.namespace, "-o", "json")
    assert rollback.code == 0, rollback.stdout + rollback.stderr
    assert [r["status"] for r in env.history()] == ["superseded", "superseded", "deployed"]
    verify = deployctl(env.kubeconfig, "audit", "verify", "llm", "-n", env.namespace, "-o", "json")
    assert verify.code == 9, verify.stdout + verify.stderr
    assert [(p["code"], p["revision"]) for p in verify.json["problems"]] == [("foreign", None)]


# --- the controller -----------------------------------------------------------------------------------


def test_deleting_an_invalid_inference_profile_leaves_a_cli_release_of_the_same_name(
    crd_installed: None, env: ReleaseEnv, controllers: Callable[..., Any]
) -> None:
    assert env.apply(profile(env.namespace)).code == 0
    controllers()
    invalid = object_doc(env)
    invalid["spec"]["gate"]["smoke"]["slo"]["p95_ttft_ms"] = "fast"  # admitted (a string), refused by the profile
    apply_object(env, invalid)
    wait_until(lambda: conditions(env).get("Planned", {}).get("reason") == "invalid", 60, "the object refused")
    assert "deployctl.dev/release" not in (get_object(env)["metadata"].get("finalizers") or [])

    kubernetes.client.CustomObjectsApi(env.api).delete_namespaced_custom_object(
        crd.GROUP, crd.VERSION, env.namespace, crd.PLURAL, "llm"
    )
    wait_until(lambda: not exists(lambda: get_object(env)), 30, "the object deleted")
    time.sleep(5)  # past two resyncs of the controller (--resync 2)

    assert env.deployment() is not None, (env.tmp / "controller-a.log").read_text()[-3000:]
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "deployed")]
