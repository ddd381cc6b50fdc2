"""The controller acts within a policy the cluster admin owns, on the real control plane.

- The ValidatingAdmissionPolicy `render --format admission` ships refuses at admission what an
  InferencePolicy refuses (`kubectl apply` fails with the rule's message) and admits the rest; over
  the table of cases of tests/data/policy_cases.yaml its verdicts are the Python checks' verdicts.
- Without it, the controller refuses the same profile itself: Stalled, reason policy, nothing written.
- The controller's ServiceAccount, as `render --format controller` grants it, writes only in the
  namespaces opted in: run with its own token against a namespace that is not, it writes nothing.

The ValidatingAdmissionPolicy and its binding are renamed per test and bound to the test's
namespace only, and every InferencePolicy names only that namespace: the suite shares the cluster.
"""

from __future__ import annotations

import copy
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faulthelpers
import kubernetes
import pytest
import yaml
from components import BIN_DIR
from controllerhelpers import apply_object, conditions, get_object
from deployhelpers import DEPLOYCTL, ReleaseEnv, deployctl, exists, wait_until

from orchestrator.controller import crd
from orchestrator.policy import model as policy
from orchestrator.policy import rules as policy_rules
from orchestrator.profile import model as profiles

CASES = yaml.safe_load((Path(__file__).resolve().parent.parent / "tests" / "data" / "policy_cases.yaml").read_text())
CONTROLLER = "deployctl-controller"
IMAGE = "registry.internal/deployctl/controller@sha256:" + "1" * 64
# Refused by every policy of the table (none raises a ceiling): its message names the policy in force.
PROBE = {"rollout": {"progressDeadlineSeconds": 2147483647}}
HOST_PATH = {"model": {"name": "sim-model", "architecture": "llama-3-8b", "source": {"hostPath": "/etc"}}}


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN_DIR / "kubectl"), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        text=True,
        capture_output=True,
        check=False,
    )


def case_object(namespace: str, sections: dict[str, Any] | None = None, name: str = "llm") -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": profiles.API_VERSION,
        "kind": profiles.KIND,
        "metadata": {"name": name, "namespace": namespace},
        **copy.deepcopy(CASES["base"]),
    }
    for key, value in (sections or {}).items():
        doc[key] = {**doc.get(key, {}), **value}
    return profiles.to_object(profiles.loads(json.dumps(doc)))


@dataclass(frozen=True)
class Verdict:
    admitted: bool
    message: str


def admit(api: kubernetes.client.ApiClient, obj: dict[str, Any]) -> Verdict:
    """A create of ``obj`` judged by admission and not stored (a server-side dry run)."""
    custom = kubernetes.client.CustomObjectsApi(api)
    namespace = obj["metadata"]["namespace"]
    try:
        custom.create_namespaced_custom_object(crd.GROUP, crd.VERSION, namespace, crd.PLURAL, obj, dry_run="All")
    except kubernetes.client.ApiException as e:
        if e.status not in (400, 403, 422):
            raise
        return Verdict(False, str(e.body))
    return Verdict(True, "")


@pytest.fixture(scope="session")
def policy_crd(cluster: Any, api_client: kubernetes.client.ApiClient) -> None:
    rendered = deployctl(Path(), "render", "--format", "policy-crd")
    assert rendered.code == 0, rendered.stderr
    applied = kubectl(cluster.kubeconfig, "apply", "--server-side", "-f", "-", stdin=rendered.stdout)
    assert applied.returncode == 0, applied.stderr
    ext = kubernetes.client.ApiextensionsV1Api(api_client)

    def established() -> bool:
        status = ext.read_custom_resource_definition(crd.POLICY_NAME).status
        return any(c.type == "Established" and c.status == "True" for c in status.conditions or [])

    wait_until(established, 30, f"CRD {crd.POLICY_NAME} Established")


class Admission:
    """The shipped ValidatingAdmissionPolicy, bound to one namespace, and the InferencePolicy in force there."""

    def __init__(self, env: ReleaseEnv) -> None:
        self.env = env
        self.name = f"deployctl-policy-{env.namespace}"[:63]
        self.policies: list[str] = []
        self.custom = kubernetes.client.CustomObjectsApi(env.api)

    def install(self) -> dict[str, Any]:
        rendered = deployctl(Path(), "render", "--format", "admission", "-o", "json")
        assert rendered.code == 0, rendered.stderr
        kinds = [o["kind"] for o in rendered.json["items"]]
        assert kinds == ["InferencePolicy", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
        _default, vap, binding = rendered.json["items"]  # the cluster-wide default stays out of a shared cluster
        vap["metadata"]["name"] = binding["metadata"]["name"] = binding["spec"]["policyName"] = self.name
        selector = {"matchLabels": {"kubernetes.io/metadata.name": self.env.namespace}}
        binding["spec"]["matchResources"] = {"namespaceSelector": selector}
        applied = kubectl(
            self.env.kubeconfig, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all([vap, binding])
        )
        assert applied.returncode == 0, applied.stderr
        return vap

    def type_checking(self) -> dict[str, Any]:
        """The API server's type check of every CEL expression against both CRDs."""
        api = kubernetes.client.AdmissionregistrationV1Api(self.env.api)
        status = api.read_validating_admission_policy(self.name).status
        return status.to_dict() if status is not None else {}

    def enforce(self, spec: dict[str, Any], tag: str) -> None:
        """Replace the policy in force by ``spec`` (for this namespace only); wait until admission uses it."""
        self.clear()
        name = f"{self.env.namespace}-{tag}"[:253]
        body = {
            "apiVersion": policy.API_VERSION,
            "kind": policy.KIND,
            "metadata": {"name": name},
            "spec": {**spec, "namespaces": [self.env.namespace]},
        }
        self.custom.create_cluster_custom_object(crd.GROUP, crd.VERSION, crd.POLICY_PLURAL, body)
        self.policies.append(name)
        probe = case_object(self.env.namespace, PROBE, name="probe")
        wait_until(lambda: f"InferencePolicy {name})" in admit(self.env.api, probe).message, 30, f"{name} used")

    def clear(self) -> None:
        for name in self.policies:
            self.custom.delete_cluster_custom_object(crd.GROUP, crd.VERSION, crd.POLICY_PLURAL, name)
        if self.policies:  # no policy at all: the binding allows (parameterNotFoundAction Allow)
            probe = case_object(self.env.namespace, PROBE, name="probe")
            wait_until(lambda: admit(self.env.api, probe).admitted, 30, "the old policy gone")
        self.policies = []

    def remove(self) -> None:
        self.clear()
        api = kubernetes.client.AdmissionregistrationV1Api(self.env.api)
        for delete in (api.delete_validating_admission_policy_binding, api.delete_validating_admission_policy):
            try:
                delete(self.name)
            except kubernetes.client.ApiException as e:
                if e.status != 404:
                    raise


@pytest.fixture
def admission(crd_installed: None, policy_crd: None, env: ReleaseEnv) -> Iterator[Admission]:
    installed = Admission(env)
    try:
        yield installed
    finally:
        installed.remove()


def test_kubectl_apply_of_a_forbidden_profile_is_refused_at_admission_and_an_allowed_one_admitted(
    admission: Admission, env: ReleaseEnv
) -> None:
    admission.install()
    admission.enforce({}, "safe-default")
    wait_until(lambda: admission.type_checking().get("observed_generation") is not None, 30, "the CEL type-checked")
    assert not (admission.type_checking().get("type_checking") or {}).get("expression_warnings"), (
        admission.type_checking()
    )

    refused = kubectl(env.kubeconfig, "apply", "-f", "-", stdin=json.dumps(case_object(env.namespace, HOST_PATH)))
    assert refused.returncode != 0
    assert "deployctl policy rule host-path: weights from a hostPath" in refused.stderr, refused.stderr
    assert not exists(lambda: get_object(env)), "nothing stored"

    allowed = kubectl(env.kubeconfig, "apply", "-f", "-", stdin=json.dumps(case_object(env.namespace)))
    assert allowed.returncode == 0, allowed.stderr

    # The policy tightens under the stored object: a metadata update (a finalizer, a label) still goes
    # through, so the controller can always let it be deleted; a change of its spec is judged.
    admission.enforce({"allowedPVCs": ["llama-*"]}, "tightened")
    where = ("inferenceprofile", "llm", "-n", env.namespace)
    labelled = kubectl(env.kubeconfig, "label", *where, "team=a")
    assert labelled.returncode == 0, labelled.stderr
    changed = kubectl(env.kubeconfig, "patch", *where, "--type=merge", "-p", '{"spec":{"engine":{"maxModelLen":2048}}}')
    assert changed.returncode != 0 and "deployctl policy rule pvc:" in changed.stderr, changed.stderr
    kubectl(env.kubeconfig, "delete", *where)


def test_the_api_server_refuses_by_the_same_rules_as_the_python_checks_on_every_case(
    admission: Admission, env: ReleaseEnv
) -> None:
    admission.install()
    disagree = []
    for i, case in enumerate(CASES["cases"]):
        admission.enforce(case["policy"], f"case-{i}")
        obj = case_object(env.namespace, case.get("profile"))
        python = policy.check(
            profiles.from_object(obj, "case"),
            [policy.Policy("p", policy.PolicySpec.model_validate({**case["policy"], "namespaces": [env.namespace]}))],
        )
        verdict = admit(env.api, obj)
        # The API server names the first refused rule; the table's cases are refused by one rule each.
        said = [r.id for r in policy_rules.RULES if f"deployctl policy rule {r.id}:" in verdict.message]
        if verdict.admitted != (not python) or sorted(said) != sorted({v.rule for v in python}):
            disagree.append((case["name"], [v.rule for v in python], verdict.message[-400:]))
    assert disagree == []


def test_without_the_admission_policy_the_controller_refuses_it_and_writes_nothing(
    crd_installed: None, env: ReleaseEnv, controllers: Callable[..., subprocess.Popen[bytes]]
) -> None:
    controllers("a")
    apply_object(env, case_object(env.namespace, {**HOST_PATH, "engine": {"fsGroup": 0}}))
    wait_until(lambda: conditions(env).get("Stalled", {}).get("status") == "True", 60, "Stalled")

    stalled = conditions(env)["Stalled"]
    assert stalled["reason"] == "policy", stalled
    failure = get_object(env)["status"]["failure"]
    assert "model.source.hostPath '/etc'" in failure["message"] and "engine.fsGroup '0'" in failure["message"]
    assert "finalizers" not in get_object(env)["metadata"], "refused before the finalizer"
    core = kubernetes.client.CoreV1Api(env.api)
    assert core.list_namespaced_config_map(env.namespace, label_selector="deployctl.dev/release=llm").items == []
    assert not exists(
        lambda: kubernetes.client.CoordinationV1Api(env.api).read_namespaced_lease("deployctl-llm", env.namespace)
    )
    assert env.deployment() is None and core.list_namespaced_service(env.namespace).items == []
    events = core.list_namespaced_event(env.namespace, field_selector="reason=PolicyRefused").items
    assert events and "refused by policy" in events[0].message


@pytest.fixture
def installed_controller_rbac(crd_installed: None, policy_crd: None, env: ReleaseEnv) -> Iterator[None]:
    """The controller's rendered objects, its namespace the test's and opted in; its ClusterRole and
    binding named after the test; no Namespace (the test's) and no Deployment (it runs here)."""
    rendered = deployctl(
        Path(),
        *("render", "--format", "controller", "--controller-namespace", env.namespace, "--image", IMAGE),
        *("--watch-namespace", env.namespace, "-o", "json"),
    )
    assert rendered.code == 0, rendered.stderr
    cluster_name = f"{CONTROLLER}-{env.namespace}"[:253]
    docs = []
    for doc in rendered.json["items"]:
        if doc["kind"] in ("Namespace", "Deployment"):
            continue
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            doc["metadata"]["name"] = cluster_name
        if doc["kind"] == "ClusterRoleBinding":
            doc["roleRef"]["name"] = cluster_name
        docs.append(doc)
    applied = kubectl(env.kubeconfig, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(docs))
    assert applied.returncode == 0, applied.stderr
    yield
    rbac = kubernetes.client.RbacAuthorizationV1Api(env.api)
    for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
        try:
            delete(cluster_name)
        except kubernetes.client.ApiException as e:
            if e.status != 404:
                raise


@pytest.fixture
def other_namespace(env: ReleaseEnv) -> Iterator[str]:
    core = kubernetes.client.CoreV1Api(env.api)
    name = f"{env.namespace}-x"[:63]
    core.create_namespace({"metadata": {"name": name, "labels": {"deployctl.dev/e2e": "true"}}})
    yield name
    if (get_other(env, name) or {}).get("metadata", {}).get("finalizers"):  # none is expected; never hold the namespace
        unset = ("--type=merge", "-p", '{"metadata":{"finalizers":null}}')
        kubectl(env.kubeconfig, "patch", "inferenceprofile", "llm", "-n", name, *unset)
    core.delete_namespace(name)


def get_other(env: ReleaseEnv, namespace: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = kubernetes.client.CustomObjectsApi(env.api).get_namespaced_custom_object(
            crd.GROUP, crd.VERSION, namespace, crd.PLURAL, "llm"
        )
    except kubernetes.client.ApiException as e:
        if e.status == 404:
            return None
        raise
    return found


def can_i(env: ReleaseEnv, verb: str, resource: str, *where: str) -> bool:
    account = f"system:serviceaccount:{env.namespace}:{CONTROLLER}"
    done = kubectl(env.kubeconfig, "auth", "can-i", verb, resource, *where, "--as", account)
    return done.stdout.strip() == "yes"


def test_the_controller_service_account_writes_only_in_the_namespaces_opted_in(
    installed_controller_rbac: None, env: ReleaseEnv, other_namespace: str
) -> None:
    mine, other = ("-n", env.namespace), ("-n", other_namespace)
    assert can_i(env, "create", "deployments", *mine) and can_i(env, "update", "leases", *mine)
    assert can_i(env, "list", "pods", "--all-namespaces") and can_i(env, "list", "inferencepolicies.deployctl.dev")
    for verb, resource, where in [
        ("create", "deployments", other),
        ("patch", "services", other),
        ("create", "leases", other),
        ("update", "leases", ("-n", "kube-system")),
        ("delete", "leases", ("-n", "kube-node-lease")),
        ("get", "configmaps", ("-n", "kube-system")),
        ("create", "pods/portforward", other),
        ("get", "pods/log", other),
        ("patch", "inferenceprofiles.deployctl.dev", other),
        ("create", "deployments", ("-n", "kube-system")),
        ("get", "secrets", mine),
    ]:
        assert not can_i(env, verb, resource, *where), f"{verb} {resource} {' '.join(where)}"

    # The controller itself, with its ServiceAccount's token, asked to act in the other namespace.
    apply_object_in(env, case_object(other_namespace))
    token = faulthelpers.mint_token(env.api, env.namespace, CONTROLLER)
    kubeconfig = faulthelpers.kubeconfig_with(env.kubeconfig, env.tmp / "sa.kubeconfig", token=token)
    log = env.tmp / "controller-sa.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                *(DEPLOYCTL, "controller", "-n", other_namespace, "--lease-namespace", env.namespace),
                *("--kubeconfig", str(kubeconfig), "--lease-seconds", "6", "--resync", "2"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        wait_until(lambda: "not opted in" in log.read_text(), 60, "the controller says the namespace is not opted in")
        time.sleep(5)  # two more resyncs: still nothing written, and said once
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    obj = get_other(env, other_namespace) or {}
    assert "finalizers" not in obj["metadata"] and "status" not in obj, obj
    apps = kubernetes.client.AppsV1Api(env.api)
    assert apps.list_namespaced_deployment(other_namespace).items == []
    assert log.read_text().count("not opted in") == 1, log.read_text()[-2000:]


def apply_object_in(env: ReleaseEnv, obj: dict[str, Any]) -> None:
    applied = kubectl(env.kubeconfig, "apply", "--server-side", "-f", "-", stdin=json.dumps(obj))
    assert applied.returncode == 0, applied.stderr
