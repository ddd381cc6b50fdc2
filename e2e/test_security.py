"""Least privilege, secrets, Pod Security and the air gap, proven on the real control plane.

deployctl runs as a ServiceAccount bound to exactly the Role it renders (manifests/rbac/) and
must be able to do everything; one verb less and it must say which. A Secret the profile names
must never reach a record, an export or the CLI's output. A namespace enforcing Pod Security
`restricted` admits what deployctl renders and refuses a hostPath profile without leaving it
half-applied. Finally, the whole CLI runs behind a dead proxy and a socket guard that refuses
any connection but the API server's and the simulator's.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import os
import secrets
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import faulthelpers
import kubernetes
import kwoksim
import localcluster
import pytest
import yaml
from deployhelpers import DEPLOYCTL, Result, deployctl, profile
from faulthelpers import Env

from orchestrator.render import manifests as render

pytestmark = pytest.mark.kwok

NETGUARD = Path(__file__).resolve().parent / "netguard"
DEPLOYER = "ci-deployer"


@pytest.fixture
def env(
    cluster: localcluster.Cluster,
    namespace: str,
    api_client: kubernetes.client.ApiClient,
    simulator: Callable[..., Any],
    tmp_path: Path,
) -> Iterator[Env]:
    with faulthelpers.deploy_env(cluster, namespace, api_client, simulator, tmp_path) as deploy:
        yield deploy


# --- least privilege ---------------------------------------------------------------------------


def _without(objects: list[dict[str, Any]], resource: str, verb: str) -> list[dict[str, Any]]:
    """The RBAC objects with ``verb`` on ``resource`` (e.g. "pods/portforward") taken out of the Role."""
    out = json.loads(json.dumps(objects))
    role = next(o for o in out if o["kind"] == "Role")
    rules = []
    for rule in role["rules"]:
        if resource in rule["resources"] and verb in rule["verbs"]:
            others = [r for r in rule["resources"] if r != resource]
            if others:
                rules.append({**rule, "resources": others})
            rules.append({**rule, "resources": [resource], "verbs": [v for v in rule["verbs"] if v != verb]})
        else:
            rules.append(rule)
    role["rules"] = rules
    return out


@contextlib.contextmanager
def _deployer_kubeconfig(env: Env, objects: list[dict[str, Any]]) -> Iterator[Path]:
    """Apply ``objects``; yield a kubeconfig with a TokenRequest token of the ServiceAccount."""
    with faulthelpers.applied(env.api, objects):
        token = faulthelpers.mint_token(env.api, env.namespace, DEPLOYER)
        yield faulthelpers.kubeconfig_with(env.kubeconfig, env.tmp / "deployer-kubeconfig", token=token, context="ci")


def test_deployctl_bound_to_its_rendered_role_can_run_every_command(env: Env) -> None:
    with _deployer_kubeconfig(env, render.rbac(env.namespace, DEPLOYER)) as kubeconfig:
        good = env.write(profile(env.namespace), "good.yaml")
        upgrade = env.write(profile(env.namespace, engine={"maxNumSeqs": 16}), "upgrade.yaml")
        export = env.tmp / "export.json"

        def run(*args: str) -> Result:
            return deployctl(kubeconfig, *args, "--kubeconfig", str(kubeconfig))

        ns = ("-n", env.namespace)
        steps: list[tuple[tuple[str, ...], set[int]]] = [
            (("inventory",), {0}),
            (("apply", str(good), "--output", "json"), {0}),
            (("apply", str(upgrade), "--output", "json"), {0}),
            (("diff", str(good)), {11}),  # the live upgrade differs from the first profile
            (("rollback", "llm", *ns, "--to", "1", "--output", "json"), {0}),
            (("gate", str(good), "--output", "json", "--timeout", "60"), {0}),
            (("status", "llm", *ns, "--output", "json"), {0}),
            (("history", "llm", *ns, "--output", "json"), {0}),
            (("audit", "export", "llm", *ns, "--output-file", str(export)), {0}),
            (("audit", "verify", "llm", *ns, "--against", str(export)), {0}),
        ]
        for args, codes in steps:
            result = run(*args)
            assert result.code in codes, f"{args}: {result.code}\n{result.stdout}{result.stderr}"
            assert "forbidden" not in result.stderr.lower(), result.stderr
        offline = deployctl(kubeconfig, "audit", "verify", "--file", str(export))
        assert offline.code == 0, offline.stdout + offline.stderr
        rows = run("history", "llm", *ns, "--output", "json").json
    assert [r["status"] for r in rows] == ["superseded", "superseded", "superseded", "deployed"]
    assert {r["actor"]["user"] for r in rows} == {f"system:serviceaccount:{env.namespace}:{DEPLOYER}"}


def test_a_warmup_runs_with_the_role_rendered_for_it_and_is_refused_by_one_without_it(env: Env) -> None:
    model = env.tmp / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights")
    kwoksim.serve_warmup_report(env.cluster, env.namespace, model, env.tmp / "warmup.log", digest=False)
    path = env.write(profile(env.namespace, rollout={"replicas": 1, "warmup": {"enabled": True}}), "warm.yaml")
    with _deployer_kubeconfig(env, render.rbac(env.namespace, DEPLOYER, warmup=False)) as kubeconfig:
        refused = deployctl(kubeconfig, "apply", str(path), "--kubeconfig", str(kubeconfig))
    assert refused.code == 4, refused.stdout + refused.stderr
    assert "create pods" in refused.stderr and env.deployment() is None  # asked before any write
    with _deployer_kubeconfig(env, render.rbac(env.namespace, DEPLOYER, warmup=True)) as kubeconfig:
        warmed = deployctl(kubeconfig, "apply", str(path), "--output", "json", "--kubeconfig", str(kubeconfig))
    assert warmed.code == 0, warmed.stdout + warmed.stderr
    nodes = warmed.json["time_to_serving"]["warmup"]["nodes"]
    assert nodes and all(n["state"] == "done" for n in nodes), nodes


@pytest.mark.parametrize(
    ("resource", "verb"), [("configmaps", "create"), ("pods/portforward", "create"), ("leases", "update")]
)
def test_role_missing_one_verb_fails_with_exit_4_naming_it_before_any_write(env: Env, resource: str, verb: str) -> None:
    objects = _without(render.rbac(env.namespace, DEPLOYER), resource, verb)
    with _deployer_kubeconfig(env, objects) as kubeconfig:
        result = deployctl(kubeconfig, "apply", str(env.write(profile(env.namespace))), "--kubeconfig", str(kubeconfig))
    assert result.code == 4, result.stdout + result.stderr
    assert f"{verb} {resource}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert env.deployment() is None  # refused before the first write


def test_portforward_permission_revoked_mid_apply_fails_the_gate_with_exit_4_naming_it(env: Env) -> None:
    """The access check passed; RBAC changes before the gate: the gate says so, not "unhealthy"."""
    objects = render.rbac(env.namespace, DEPLOYER)
    with _deployer_kubeconfig(env, objects) as kubeconfig:
        slow = {"podAnnotations": {"sim.deployctl.dev/ready-delay": "4s"}}
        path = env.write(profile(env.namespace, placement=slow))
        log = env.tmp / "apply.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [DEPLOYCTL, "apply", str(path), "--kubeconfig", str(kubeconfig)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "NO_COLOR": "1"},
            )
        faulthelpers.wait_for(lambda: faulthelpers.log_has(log, "[rollout]"), 30, "the rollout watch")
        revoked = [o for o in _without(objects, "pods/portforward", "create") if o["kind"] == "Role"]
        with faulthelpers.applied(env.api, revoked):
            started = time.monotonic()
            code = proc.wait(timeout=60)
            elapsed = time.monotonic() - started
    text = log.read_text()
    assert code == 4, text
    assert "is forbidden" in text and "create and get on pods/portforward" in text, text
    assert elapsed < 15, f"{elapsed:.1f} s: the gate waited out its deadline instead"


# --- secrets never leave the Secret ----------------------------------------------------------


def test_secret_values_the_profile_references_never_reach_records_exports_or_output(env: Env) -> None:
    planted = "planted-" + secrets.token_urlsafe(24)
    core = kubernetes.client.CoreV1Api(env.api)
    core.create_namespaced_secret(env.namespace, {"metadata": {"name": "hf-token"}, "stringData": {"token": planted}})
    # The server's API key (gate.apiKeySecret): the gate reads it and sends it on every /v1 request
    # of apply's and rollback's health gates and of the smoke runs, to a server that insists on it.
    core.create_namespaced_secret(
        env.namespace, {"metadata": {"name": "vllm-api-key"}, "stringData": {"api-key": planted}}
    )
    # A served name with `$(HF_TOKEN)` in it: rendered escaped (`$$(`), so the container is given it as
    # written, and the simulator serves it so (e2e/test_secrets_cluster.py runs the kubelet's expansion).
    served = "sim-model-$(HF_TOKEN)"
    keyed = env.simulator(model=served, api_key=planted)
    env.forward({8000: keyed.port})
    api_key_secret = {"apiKeySecret": {"name": "vllm-api-key"}}
    docker = {"auths": {"registry.internal": {"auth": base64.b64encode(f"ci:{planted}".encode()).decode()}}}
    core.create_namespaced_secret(
        env.namespace,
        {
            "metadata": {"name": "regcred"},
            "type": "kubernetes.io/dockerconfigjson",
            "stringData": {".dockerconfigjson": json.dumps(docker)},
        },
    )
    with_secrets: dict[str, Any] = {"name": served, "credentialsSecret": "hf-token"}
    good_doc = profile(env.namespace, model=with_secrets, engine={"imagePullSecrets": ["regcred"]}, gate=api_key_secret)
    good = env.write(good_doc, "good.yaml")
    upgrade_doc = profile(
        env.namespace,
        model=with_secrets,
        engine={"imagePullSecrets": ["regcred"], "maxNumSeqs": 16},
        gate=api_key_secret,
    )
    upgrade = env.write(upgrade_doc, "upgrade.yaml")
    export = env.tmp / "export.json"
    ns = ("-n", env.namespace)
    runs = [
        env.run("apply", str(good)),
        env.run("apply", str(upgrade), "--output", "json"),
        env.run("diff", str(good)),
        env.run("rollback", "llm", *ns),
        env.run("status", "llm", *ns),
        env.run("status", "llm", *ns, "--output", "yaml"),
        env.run("history", "llm", *ns),
        env.run("history", "llm", *ns, "--output", "json"),
        env.run("audit", "export", "llm", *ns, "--output-file", str(export)),
        env.run("audit", "verify", "llm", *ns),
    ]
    assert [r.code for r in runs] == [0, 0, 11, 0, 0, 0, 0, 0, 0, 0], [r.stderr for r in runs]
    records = _record_texts(env)
    assert len(records) == 3
    assert all("hf-token" in text and "regcred" in text and "vllm-api-key" in text for text in records)  # names kept
    assert json.loads(runs[1].stdout)["gate"]["verdict"] == "pass"  # the key was sent and taken
    haystacks = {
        "output": "".join(r.stdout + r.stderr for r in runs),
        "records": "".join(records),
        "export": export.read_text(),
        "events": "\n".join(f"{e.reason} {e.message}" for e in core.list_namespaced_event(env.namespace).items),
    }
    for needle in (planted, base64.b64encode(planted.encode()).decode()):
        for where, text in haystacks.items():
            assert needle not in text, f"the Secret's value is in the {where}"


def _record_texts(env: Env) -> list[str]:
    """Every byte of every release record, decoded: record.json and the gunzipped manifests."""
    items = (
        kubernetes.client.CoreV1Api(env.api)
        .list_namespaced_config_map(env.namespace, label_selector=faulthelpers.RECORD_SELECTOR)
        .items
    )
    texts = []
    for cm in items:
        parts = [json.dumps(cm.metadata.annotations or {}), *(cm.data or {}).values()]
        parts += [gzip.decompress(base64.b64decode(v)).decode() for v in (cm.binary_data or {}).values()]
        texts.append("\n".join(parts))
    return texts


# --- Pod Security: restricted ------------------------------------------------------------------


def test_restricted_pod_security_admits_the_rendered_pods_and_refuses_hostpath_cleanly(env: Env) -> None:
    kubernetes.client.CoreV1Api(env.api).patch_namespace(
        env.namespace,
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
    )
    admitted = env.apply(env.write(profile(env.namespace)))
    assert admitted.code == 0, admitted.stdout + admitted.stderr
    host_path = profile(env.namespace, "hp", model={"source": {"hostPath": "/data/llama3-8b"}})
    started = time.monotonic()
    refused = env.apply(env.write(host_path, "hostpath.yaml"))
    elapsed = time.monotonic() - started
    assert refused.code == 5, refused.stdout + refused.stderr
    failure = refused.json["failure"]
    assert failure["class"] == "replica_failure" and "hostPath" in failure["message"], failure
    assert "Pod Security" in failure["message"]  # the fix is named
    assert elapsed < 30
    for kind in ("Deployment", "Service", "ServiceAccount", "PodDisruptionBudget", "NetworkPolicy"):
        assert not _release_objects(env, kind, "hp"), f"{kind} of the refused install are left"
    assert env.history("hp") == [(1, "failed")]
    assert env.history() == [(1, "deployed")]  # the release next to it is untouched
    assert env.deployment().status.ready_replicas == 1


def _release_objects(env: Env, kind: str, release: str) -> list[Any]:
    """The release's objects of ``kind`` (found by its label, as deployctl finds them)."""
    api_version = {"Deployment": "apps/v1", "PodDisruptionBudget": "policy/v1", "NetworkPolicy": "networking.k8s.io/v1"}
    client = kubernetes.dynamic.DynamicClient(env.api)
    resource = client.resources.get(api_version=api_version.get(kind, "v1"), kind=kind)
    found = client.get(resource, namespace=env.namespace, label_selector=f"deployctl.dev/release={release}")
    return list(found.items)


# --- the air gap: no call but to the API server and the gate endpoint -----------------------------


def _guarded(env: Env, sim_port: int, no_proxy: str | None) -> Callable[..., Result]:
    """Run deployctl behind a dead proxy, with the socket guard recording any other connection."""
    dead = f"http://127.0.0.1:{faulthelpers.closed_port()}"
    server = yaml.safe_load(env.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    api_port = urllib.parse.urlsplit(server).port
    environ = {k: v for k, v in os.environ.items() if k.lower() not in ("no_proxy", "pythonpath")}
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"):
        environ[name] = environ[name.lower()] = dead
    if no_proxy is not None:
        environ["NO_PROXY"] = environ["no_proxy"] = no_proxy
    environ |= {
        "NO_COLOR": "1",
        "PYTHONPATH": str(NETGUARD),
        "DEPLOYCTL_E2E_NET_LOG": str(env.tmp / "network-violations.log"),
        "DEPLOYCTL_E2E_NET_ALLOW": f"127.0.0.1:{api_port},127.0.0.1:{sim_port}",
    }

    def run(*args: str, kubeconfig: bool = True) -> Result:
        argv = [DEPLOYCTL, *args, *(["--kubeconfig", str(env.kubeconfig)] if kubeconfig else [])]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=environ, stdin=subprocess.DEVNULL)
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return run


def test_whole_cli_flow_behind_a_dead_proxy_connects_only_to_the_api_server_and_the_endpoint(
    env: Env, simulator: Callable[..., Any]
) -> None:
    sim = simulator(model="sim-model")
    run = _guarded(env, sim.port, no_proxy=None)
    good = env.write(profile(env.namespace), "good.yaml")
    upgrade = env.write(profile(env.namespace, engine={"maxNumSeqs": 16}), "upgrade.yaml")
    export = env.tmp / "export.json"
    ns = ("-n", env.namespace)
    bench = ("--url", sim.url, "--model", "sim-model", "--requests", "8", "--concurrency", "2", "--warmup", "0")
    steps: list[tuple[tuple[str, ...], bool, set[int]]] = [
        (("validate", str(good)), False, {0}),
        (("plan", str(good)), False, {0}),
        (("render", str(good)), False, {0}),
        (("inventory",), True, {0}),
        (("apply", str(good)), True, {0}),
        (("apply", str(upgrade)), True, {0}),
        (("diff", str(upgrade)), True, {0, 11}),  # exit 11 (changes) is views.diff's strategy quirk, not the network
        (("rollback", "llm", *ns), True, {0}),
        (("gate", str(good), "--timeout", "60"), True, {0}),
        (("status", "llm", *ns), True, {0}),
        (("history", "llm", *ns), True, {0}),
        (("audit", "export", "llm", *ns, "--output-file", str(export)), True, {0}),
        (("audit", "verify", "llm", *ns), True, {0}),
        (("audit", "verify", "--file", str(export)), False, {0}),
        (("bench", *bench), False, {0}),
    ]
    for args, cluster, codes in steps:
        result = run(*args, kubeconfig=cluster)
        assert result.code in codes, f"{args}: {result.code}\n{result.stdout}{result.stderr}"
    violations = env.tmp / "network-violations.log"
    assert not violations.exists(), violations.read_text()


def test_port_forward_ignores_the_proxy_even_when_no_proxy_does_not_list_the_api_server(env: Env) -> None:
    """A NO_PROXY that does not list the API server changes nothing: every call still goes direct."""
    run = _guarded(env, 0, no_proxy="registry.internal,.svc")
    result = run("apply", str(env.write(profile(env.namespace))), "--output", "json")
    assert result.code == 0, result.stdout + result.stderr
    violations = env.tmp / "network-violations.log"
    assert not violations.exists(), violations.read_text()
