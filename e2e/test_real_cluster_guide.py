"""docs/real-cluster.md followed to the letter on the local control plane.

The guide's blocks run in order, as written: each bash block with bash (`set -euo pipefail`), each
block the page says to save (`<!-- guide: file=NAME -->`) saved under that name in one working
directory. Only the namespace's name is changed (a fresh one per run), and the profile's image is
the e2e tests' image, which kwok "runs" and the vLLM simulator serves. Blocks marked
`<!-- guide: illustrative -->` need real GPUs, a registry or the reader's node names and are not
run; profile fragments are checked against the guide's whole profile by
tests/test_real_cluster_docs.py.

What the test plays itself, because a local cluster has no such thing: the storage class's
provisioner (a PersistentVolume for the guide's claim), the reader's `auth.json`, and the
simulator behind the pods' serving port.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import components
import deployhelpers
import kubernetes
import kwoksim
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import docblocks  # noqa: E402

GUIDE = ROOT / "docs" / "real-cluster.md"
PAGE_NAMESPACE = "inference"
RELEASE = "llama3-70b"

pytestmark = pytest.mark.kwok


def _in_namespace(text: str, namespace: str) -> str:
    return re.sub(rf"\b{PAGE_NAMESPACE}\b", namespace, text)


def _saved(block: docblocks.Block, namespace: str) -> str:
    text = _in_namespace(block.text, namespace)
    if block.file and block.file.endswith(".yaml") and "kind: InferenceProfile" in text:
        text = re.sub(r"(?m)^(\s*image:\s*)\S+@sha256:[0-9a-f]{64}", rf"\g<1>{deployhelpers.IMAGE}", text)
    return text


def _claim_volume(blocks: list[docblocks.Block], namespace: str) -> dict[str, Any]:
    """A PersistentVolume for the guide's claim: what its storage class's provisioner would make."""
    claim = next(yaml.safe_load(b.text) for b in blocks if b.file and "kind: PersistentVolumeClaim" in b.text)
    spec = claim["spec"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"guide-{namespace}"[:63], "labels": {"deployctl.dev/e2e": "true"}},
        "spec": {
            "capacity": {"storage": spec["resources"]["requests"]["storage"]},
            "accessModes": spec["accessModes"],
            "storageClassName": spec["storageClassName"],
            "persistentVolumeReclaimPolicy": "Delete",
            "hostPath": {"path": "/models"},
            "claimRef": {"namespace": namespace, "name": claim["metadata"]["name"]},
        },
    }


def _argocd_gate_job() -> dict[str, Any]:
    page = GUIDE.parent / "gitops.md"
    blocks = re.findall(r"```yaml\n(.*?)```", page.read_text(), re.S)
    job: dict[str, Any] = next(yaml.safe_load(b) for b in blocks if "argocd.argoproj.io/hook: PostSync" in b)
    return job


def _record(core: Any, namespace: str, revision: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(record.json, the manifests) of a release record, read as an auditor would."""
    cm = core.read_namespaced_config_map(f"deployctl.{RELEASE}.v{revision}", namespace)
    manifests = gzip.decompress(base64.b64decode(cm.binary_data["manifests.yaml.gz"])).decode()
    return json.loads(cm.data["record.json"]), [d for d in yaml.safe_load_all(manifests) if d]


def _run_block(text: str, work: Path, kubeconfig: Path, where: str) -> str:
    path = f"{Path(deployhelpers.DEPLOYCTL).parent}{os.pathsep}{components.BIN_DIR}{os.pathsep}{os.environ['PATH']}"
    try:
        result = subprocess.run(
            ["bash", "-c", "set -euo pipefail\n" + text],
            cwd=work,
            env={**os.environ, "KUBECONFIG": str(kubeconfig), "PATH": path, "NO_COLOR": "1"},
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as e:
        # A loader pod refused by Pod Security leaves its Job waiting for ever: see its events.
        raise AssertionError(f"{where} still ran after 600 s (a refused pod? FailedCreate events):\n{text}") from e
    assert result.returncode == 0, f"{where} exited {result.returncode}:\n{text}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_the_real_cluster_guide_runs_in_order_under_pod_security_restricted(
    cluster: Any, api_client: kubernetes.client.ApiClient, simulator: Any, tmp_path: Path
) -> None:
    blocks = docblocks.blocks(GUIDE)
    namespace = f"e2e-guide-{secrets.token_hex(3)}"
    core = kubernetes.client.CoreV1Api(api_client)
    rbac = kubernetes.client.RbacAuthorizationV1Api(api_client)
    work = tmp_path / "work"
    work.mkdir()
    # What the reader brings: the registry login that `podman login --authfile auth.json` wrote.
    login = base64.b64encode(b"robot:secret").decode()
    (work / "auth.json").write_text(json.dumps({"auths": {"registry.internal": {"auth": login}}}))
    profile_block = next(b for b in blocks if b.file == f"{RELEASE}.yaml")
    model = yaml.safe_load(profile_block.text)["model"]["name"]
    good = simulator(model=model)
    volume = _claim_volume(blocks, namespace)
    core.create_persistent_volume(volume)

    ran: list[str] = []
    forwarded = False
    try:
        for block in blocks:
            where = f"docs/real-cluster.md:{block.line}"
            if block.illustrative:
                continue
            if block.file:
                (work / block.file).write_text(_saved(block, namespace))
            elif block.lang == "bash":
                ran.append(_run_block(_in_namespace(block.text, namespace), work, cluster.kubeconfig, where))
            if not forwarded and deployhelpers.exists(lambda: core.read_namespace(namespace)):
                # Once the guide has made the namespace: the simulator behind the pods' port, and
                # the e2e label the other tests' settling waits look for.
                core.patch_namespace(namespace, {"metadata": {"labels": {"deployctl.dev/e2e": "true"}}})
                kwoksim.forward_ports(cluster, namespace, {8000: good.port})
                forwarded = True
        assert len(ran) >= 8, f"only {len(ran)} bash blocks ran: has the page lost its blocks or its markers?"

        # Step 3: the API server enforces `restricted` there; a root pod is refused.
        labels = core.read_namespace(namespace).metadata.labels
        assert labels.get("pod-security.kubernetes.io/enforce") == "restricted"
        root_pod = {
            "metadata": {"name": "root"},
            "spec": {"containers": [{"name": "c", "image": deployhelpers.IMAGE}]},
        }
        with pytest.raises(kubernetes.client.ApiException) as refused:
            core.create_namespaced_pod(namespace, root_pod, dry_run="All")
        assert refused.value.status == 403 and "PodSecurity" in str(refused.value.body)
        # The Argo CD gate Job of docs/gitops.md would run there too: its pod is admitted.
        gate_pod = {"metadata": {"name": "gate"}, "spec": _argocd_gate_job()["spec"]["template"]["spec"]}
        core.create_namespaced_pod(namespace, gate_pod, dry_run="All")

        # Step 5: the loader was admitted under `restricted`, through the writable claim, and finished.
        loaders = core.list_namespaced_pod(namespace, label_selector="job-name=weights-loader").items
        assert loaders, "the loader Job made no pod: was it refused by Pod Security?"
        mounts = loaders[0].spec.containers[0].volume_mounts
        assert not any(m.read_only for m in mounts if m.name == "weights"), "the loader must write"
        claim = core.read_namespaced_persistent_volume_claim("llama3-70b-weights", namespace)
        assert claim.status.phase == "Bound" and set(claim.spec.access_modes) & {"ReadWriteMany", "ReadWriteOnce"}

        # Steps 9-13: four records (install, change, rollback, uninstall), all gated but the last;
        # the serving pods mounted step 5's claim read-only.
        records = [_record(core, namespace, revision) for revision in (1, 2, 3, 4)]
        outcomes = [data["outcome"] for data, _ in records]
        assert outcomes[:2] == ["deployed", "deployed"] and outcomes[3] == "uninstalled", outcomes
        deployment = next(d for d in records[0][1] if d["kind"] == "Deployment")
        volumes = deployment["spec"]["template"]["spec"]["volumes"]
        claim_volume = next(v for v in volumes if "persistentVolumeClaim" in v)["persistentVolumeClaim"]
        assert claim_volume == {"claimName": "llama3-70b-weights", "readOnly": True}
        pull = deployment["spec"]["template"]["spec"]["imagePullSecrets"]
        assert pull == [{"name": "regcred"}]
        apps = kubernetes.client.AppsV1Api(api_client)
        assert not deployhelpers.exists(lambda: apps.read_namespaced_deployment(RELEASE, namespace))
        secrets_left = {s.metadata.name for s in core.list_namespaced_secret(namespace).items}
        assert {"regcred", "llama3-70b-api-key"} <= secrets_left, "uninstall deleted the reader's Secrets"
    finally:
        core.delete_namespace(namespace)
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        core.delete_persistent_volume(volume["metadata"]["name"])
        for binding in rbac.list_cluster_role_binding().items:
            if f":{namespace}:" in binding.metadata.name or binding.metadata.name.endswith(f"-{namespace}"):
                rbac.delete_cluster_role_binding(binding.metadata.name)
