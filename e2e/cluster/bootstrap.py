"""What the local cluster holds from its start: kwok's, KubeRay's and Flux's CRDs, the
stages, the simulated nodes.

Applied with server-side apply through a small stdlib client authenticated as the admin,
since this runs before any other client is set up. kwok's own stage files and CRDs, and
KubeRay's and Flux's CRDs, are read from their Go modules in the module cache (the versions
build.sh built kwok, ray-operator and Flux's controllers from), never copied into the
repository.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import components
import pki
import yaml

FIELD_MANAGER = "deployctl-localcluster"
# Stage files taken from kwok's module, with the delays we replace: kwok's general pod stages
# wait 1-5 s at random per step, which would make the ready-delay annotation meaningless and
# every test slow. None keeps kwok's delay. kwok's pod-ready is left out: sim-stages.yaml
# decides when, and whether, a container becomes Ready.
KWOK_STAGES: dict[str, dict[str, int] | None] = {
    "kustomize/stage/node/fast/node-initialize.yaml": None,
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml": None,
    "kustomize/stage/pod/general/pod-create.yaml": {"durationMilliseconds": 100},
    "kustomize/stage/pod/general/pod-init-container-running.yaml": {"durationMilliseconds": 100},
    "kustomize/stage/pod/general/pod-init-container-completed.yaml": {"durationMilliseconds": 100},
    "kustomize/stage/pod/general/pod-complete.yaml": {"durationMilliseconds": 1000},
    # The fast variant deletes at once instead of waiting out a random part of the grace period.
    "kustomize/stage/pod/fast/pod-delete.yaml": None,
}
KWOK_CRD_DIR = "kustomize/crd/bases"
KWOK_MODULE = ("kwok", "sigs.k8s.io/kwok")
# ray.io RayCluster, RayJob and RayService: the operator runs a controller for each.
KUBERAY_CRD_DIR = "config/crd/bases"
KUBERAY_MODULE = ("kuberay", "github.com/ray-project/kuberay/ray-operator")
# Flux's source.toolkit.fluxcd.io kinds (GitRepository, OCIRepository, Bucket, HelmRepository,
# HelmChart, ExternalArtifact) and kustomize.toolkit.fluxcd.io's Kustomization, each from the
# controller module build.sh built the controller from. kustomize-controller watches several
# source kinds, so it needs all of source-controller's CRDs served too.
FLUX_CRD_DIR = "config/crd/bases"
FLUX_MODULES = (
    ("flux-source", "github.com/fluxcd/source-controller", "source.toolkit.fluxcd.io_*.yaml"),
    ("flux-kustomize", "github.com/fluxcd/kustomize-controller", "kustomize.toolkit.fluxcd.io_*.yaml"),
)
# The Prometheus Operator's PodMonitor CRD, the real schema a release's PodMonitor must pass. Not
# applied at start-up: the tests that need it install it, after checking the refusal without it.
PROMETHEUS_MODULE = ("prometheus-operator", "github.com/prometheus-operator/prometheus-operator")
POD_MONITOR_CRD = "example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml"
PROMETHEUS_RULE_CRD = "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml"
GATEWAY_API_MODULE = ("gateway-api", "sigs.k8s.io/gateway-api")
HTTP_ROUTE_CRD = "config/crd/standard/gateway.networking.k8s.io_httproutes.yaml"
OUR_STAGES = components.HERE / "sim-stages.yaml"
NODES = components.HERE / "nodes.yaml"
# The kinds applied here, and where they live in the API (all cluster-scoped).
RESOURCE_PATHS = {
    "CustomResourceDefinition": "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    "Stage": "/apis/kwok.x-k8s.io/v1alpha1/stages",
    "Node": "/api/v1/nodes",
}


class Api:
    """Just enough of the Kubernetes API: GET, readiness probes and server-side apply."""

    def __init__(self, layout: components.Layout, ports: components.Ports) -> None:
        self._base = f"https://127.0.0.1:{ports.apiserver}"
        self._pki = layout.pki
        self._ctx: ssl.SSLContext | None = None

    def ok(self, path: str) -> bool:
        try:
            return self._request("GET", path)[0] == 200
        except OSError:  # connection refused while the API server starts, TLS errors
            return False

    def get(self, path: str) -> dict[str, Any]:
        code, body = self._request("GET", path)
        if code != 200:
            raise components.ClusterError(f"GET {path}: HTTP {code}: {body[:300]!r}")
        result: dict[str, Any] = json.loads(body)
        return result

    def apply(self, obj: dict[str, Any]) -> None:
        """Server-side apply of an object of a kind in RESOURCE_PATHS."""
        name = obj["metadata"]["name"]
        path = f"{RESOURCE_PATHS[obj['kind']]}/{name}?fieldManager={FIELD_MANAGER}&force=true"
        code, body = self._request("PATCH", path, json.dumps(obj).encode(), "application/apply-patch+yaml")
        if code not in (200, 201):
            raise components.ClusterError(f"applying {obj['kind']} {name}: HTTP {code}: {body[:300]!r}")

    def _request(
        self, method: str, path: str, body: bytes | None = None, content_type: str = "application/json"
    ) -> tuple[int, bytes]:
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        req = urllib.request.Request(self._base + path, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, context=self._context(), timeout=10) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def _context(self) -> ssl.SSLContext:
        if self._ctx is None:  # built late: the PKI may not exist yet when the client is made
            ctx = ssl.create_default_context(cafile=str(self._pki.ca_cert))
            ctx.load_cert_chain(self._pki.cert(pki.ADMIN.file_stem), self._pki.key(pki.ADMIN.file_stem))
            self._ctx = ctx
        return self._ctx


def kwok_module_dir() -> Path:
    """kwok's Go module in the module cache: the exact version build.sh built kwok from."""
    return _module_dir(*KWOK_MODULE)


def kuberay_module_dir() -> Path:
    """KubeRay's ray-operator module in the module cache, at the version of tools/kuberay/go.mod."""
    return _module_dir(*KUBERAY_MODULE)


def flux_module_dirs() -> list[tuple[Path, str]]:
    """Flux's controller modules in the module cache, each with the glob of its CRD files."""
    return [(_module_dir(tool, module), pattern) for tool, module, pattern in FLUX_MODULES]


def pod_monitor_crd() -> dict[str, Any]:
    """The PodMonitor CRD of the Prometheus Operator release tools/prometheus-operator pins."""
    (crd,) = _load_yaml(_module_dir(*PROMETHEUS_MODULE) / POD_MONITOR_CRD)
    return crd


def prometheus_rule_crd() -> dict[str, Any]:
    """The PrometheusRule CRD of the same Prometheus Operator release."""
    (crd,) = _load_yaml(_module_dir(*PROMETHEUS_MODULE) / PROMETHEUS_RULE_CRD)
    return crd


def http_route_crd() -> dict[str, Any]:
    """The HTTPRoute CRD of the Gateway API release tools/gateway-api pins (its standard channel)."""
    (crd,) = _load_yaml(_module_dir(*GATEWAY_API_MODULE) / HTTP_ROUTE_CRD)
    return crd


def _module_dir(tool: str, module: str) -> Path:
    """Where the Go module cache holds `module`, at the version the tools module `tool` requires."""
    if not shutil.which("go"):
        raise components.ClusterError(f"'go' is not on PATH; it finds {module}'s files in the module cache")
    out = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", module],
        cwd=components.HERE / "tools" / tool,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0 or not out.stdout.strip():
        raise components.ClusterError(
            f"cannot locate the module {module} (go list: {out.stderr.strip()[:300]}); run e2e/cluster/build.sh"
        )
    return Path(out.stdout.strip())


def apply_crds(api: Api, kwok_module: Path) -> list[str]:
    """Apply kwok's CRDs; returns their names."""
    return _apply_crd_files(api, sorted((kwok_module / KWOK_CRD_DIR).glob("*.yaml")))


def apply_kuberay_crds(api: Api, kuberay_module: Path) -> list[str]:
    """Apply KubeRay's CRDs (RayCluster, RayJob, RayService); returns their names."""
    files = sorted((kuberay_module / KUBERAY_CRD_DIR).glob("ray.io_*.yaml"))
    if not files:
        raise components.ClusterError(f"no ray.io CRDs in {kuberay_module / KUBERAY_CRD_DIR}")
    return _apply_crd_files(api, files)


def apply_flux_crds(api: Api, flux_modules: list[tuple[Path, str]]) -> list[str]:
    """Apply Flux's CRDs (GitRepository and the other sources, Kustomization); returns their names."""
    files: list[Path] = []
    for module, pattern in flux_modules:
        found = sorted((module / FLUX_CRD_DIR).glob(pattern))
        if not found:
            raise components.ClusterError(f"no {pattern} CRDs in {module / FLUX_CRD_DIR}")
        files += found
    return _apply_crd_files(api, files)


def _apply_crd_files(api: Api, files: list[Path]) -> list[str]:
    crds = [doc for f in files for doc in _load_yaml(f)]
    for crd in crds:
        api.apply(crd)
    return [crd["metadata"]["name"] for crd in crds]


def crds_established(api: Api, names: list[str]) -> bool:
    for name in names:
        crd = api.get(f"{RESOURCE_PATHS['CustomResourceDefinition']}/{name}")
        conditions = (crd.get("status") or {}).get("conditions") or []  # null while being set up
        if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return False
    return True


def apply_simulation(api: Api, kwok_module: Path) -> None:
    """Apply the stages (kwok's, with our delays, then ours) and the nodes."""
    for rel, delay in KWOK_STAGES.items():
        for stage in _load_yaml(kwok_module / rel):
            if delay is not None:
                stage["spec"]["delay"] = delay
            api.apply(stage)
    for obj in [*_load_yaml(OUR_STAGES), *_load_yaml(NODES)]:
        api.apply(obj)


def unready_nodes(api: Api) -> list[str]:
    """Nodes of nodes.yaml not yet usable: not Ready, or still tainted by the node lifecycle
    controller (node.kubernetes.io/not-ready and friends), which keeps the scheduler away."""

    def usable(node: dict[str, Any]) -> bool:
        conditions = node.get("status", {}).get("conditions", [])
        taints = node.get("spec", {}).get("taints", [])
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return ready and not any(t["key"].startswith("node.kubernetes.io/") for t in taints)

    wanted = {n["metadata"]["name"] for n in _load_yaml(NODES)}
    ready = {n["metadata"]["name"] for n in api.get("/api/v1/nodes").get("items", []) if usable(n)}
    return sorted(wanted - ready)


# libyaml when PyYAML has it: KubeRay's CRDs are 3 MB of YAML, 3 s to parse in pure Python.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_yaml(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.load_all(path.read_text(), Loader=_LOADER) if doc]
