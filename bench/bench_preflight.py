"""How long does preflight take on a 500-node GPU cluster, on its own and with the listing before it?

(a) ``preflight.check`` for profiles/prod-tp4.yaml (an upgrade: the release already runs) on
    ``--nodes`` simulated nodes and their pods, built in memory in the shape the API returns
    them: a mixed fleet (8×A100-SXM4 NVLink, 4×A100-PCIe, 8×H100 NVLink, 4×L40S, CPU-only, a few
    cordoned), every node with its DaemonSet pods (kube-proxy, node-exporter, and on GPU nodes
    the NVIDIA device plugin and DCGM exporter, with init containers), GPU nodes 40-100 % taken
    by other teams' pods of 1-8 GPUs in several namespaces (some with init containers,
    some of them asking for a GPU, some finished Jobs that hold none), and this release's own
    pod. Also a profile no node can host (H100 with NVLink and a node selector no node has), so
    the refusal text is built over every node. Median of ``--runs``. Goal: at most 2 s.
(b) End to end on the local control plane (e2e/cluster/localcluster.py), holding the same
    nodes (kwok plays their kubelet) and pods (bound by ``spec.nodeName``, so the scheduler has
    no part in it): list Nodes, list Pods and ``preflight.check`` as `deployctl apply` does
    (in this process, a fresh connection each time), and ``deployctl inventory`` (a fresh
    process listing Nodes and Pods), next to ``kubectl get nodes -o json`` and ``kubectl get
    pods -A -o json``, interleaved in the same run after one untimed round.

The nodes are labelled ``deployctl.dev/bench=preflight`` and the pods live in namespaces named
``bench-pf-*``; both are deleted at the end. While they exist the scheduler may place other
pods on them, so (b) uses a cluster of its own unless E2E_CLUSTER_STATE_DIR names one: state in
.cache/cluster-preflight, ports 50 above the defaults (DEPLOYCTL_CLUSTER_*_PORT override them),
stopped at the end if this run started it (unless E2E_KEEP_CLUSTER=1).

Usage: ``python bench/bench_preflight.py [--nodes 500] [--runs 7] [--skip-cluster]``.
Bounded: (a) takes seconds; (b) about 2-3 minutes, most of it creating the pods.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import copy
import dataclasses
import functools
import os
import pathlib
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "e2e" / "cluster")]

from orchestrator import conventions  # noqa: E402
from orchestrator.kube import client  # noqa: E402
from orchestrator.plan import preflight  # noqa: E402
from orchestrator.profile import model as profile  # noqa: E402

PROFILE = ROOT / "profiles" / "prod-tp4.yaml"
DEPLOYCTL = pathlib.Path(sys.executable).parent / "deployctl"
KUBECTL = pathlib.Path(os.environ.get("DEPLOYCTL_BIN", ROOT / ".cache" / "bin")) / "kubectl"
GOAL_S = 2.0
BENCH_LABEL = "deployctl.dev/bench"
NAMESPACE_PREFIX = "bench-pf-"
# Ports of the benchmark's own cluster: the defaults (e2e/cluster/components.py) plus 50.
OWN_CLUSTER_PORTS = {"ETCD": 23840, "ETCD_PEER": 23841, "APISERVER": 64480, "KWOK": 64481}
OWN_CLUSTER_PORTS |= {"CONTROLLER_MANAGER": 64482, "SCHEDULER": 64483}
IMAGE = "registry.internal/{}@sha256:" + "3c" * 32


# --- the simulated cluster -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Pool:
    """Nodes of one kind: ``share`` of the fleet."""

    prefix: str
    share: float
    product: str | None
    gpus: int
    nvlink: bool
    family: str = ""


# What an on-prem GPU fleet of mixed generations looks like; prod-tp4 fits only the first.
POOLS = (
    Pool("a100-sxm", 0.40, "NVIDIA-A100-SXM4-80GB", 8, nvlink=True, family="ampere"),
    Pool("a100-pcie", 0.20, "NVIDIA-A100-PCIE-80GB", 4, nvlink=False, family="ampere"),
    Pool("h100", 0.30, "NVIDIA-H100-80GB-HBM3", 8, nvlink=True, family="hopper"),
    Pool("l40s", 0.04, "NVIDIA-L40S", 4, nvlink=False, family="ada-lovelace"),
    Pool("cpu", 0.06, None, 0, nvlink=False),
)
CORDONED_SHARE = 0.01  # nodes in maintenance
TEAMS = ("search", "ads", "research", "chat", "vision", "speech", "inference")
WORKLOAD_SIZES = {8: (1, 2, 4, 8), 4: (1, 2, 4)}


def build_cluster(
    node_count: int, release: profile.Profile, seed: int = 7
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Nodes and pods as the API lists them (the fields deployctl and the scheduler read, and the
    metadata around them), deterministic for a seed. Pods carry ``status.phase`` only."""
    rng = random.Random(seed)
    nodes: list[dict[str, Any]] = []
    for pool in POOLS:
        count = round(node_count * pool.share) if pool is not POOLS[-1] else node_count - len(nodes)
        nodes += [_node(pool, i, cordoned=rng.random() < CORDONED_SHARE) for i in range(count)]
    pods: list[dict[str, Any]] = []
    own_node = next(n for n in nodes if n["metadata"]["name"].startswith("pf-a100-sxm") and not _cordoned(n))
    for node in nodes:
        name = node["metadata"]["name"]
        gpus = conventions.gpu_count(node["status"]["allocatable"].get(conventions.GPU_RESOURCE))
        pods += _daemon_pods(name, gpus)
        used = 0
        if node is own_node:
            pods.append(_own_pod(release, name))
            used = release.gpus_per_pod
        target = rng.uniform(0.4, 1.0) * gpus  # how busy this node is
        while gpus and not _cordoned(node) and used < target:
            size = rng.choice([s for s in WORKLOAD_SIZES[gpus] if s <= gpus - used] or [1])
            pods.append(_workload_pod(rng, name, size, finished=False))
            used += size
        if gpus and rng.random() < 0.3:  # a finished Job, still listed, holding no GPU
            pods.append(_workload_pod(rng, name, rng.choice(WORKLOAD_SIZES[gpus]), finished=True))
        if not gpus:
            pods += [_app_pod(rng, name) for _ in range(3)]
    return nodes, pods


def _node(pool: Pool, index: int, *, cordoned: bool) -> dict[str, Any]:
    name = f"pf-{pool.prefix}-{index:03d}"
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": f"{pool.prefix}-node",
        "topology.kubernetes.io/zone": f"rack-{index % 16:02d}",
        "type": "kwok",
        BENCH_LABEL: "preflight",
    }
    allocatable = {"cpu": "96", "memory": "1024Gi", "pods": "110", "ephemeral-storage": "7Ti"}
    spec: dict[str, Any] = {"taints": []}
    if pool.gpus:
        labels |= {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": str(pool.product),
            "nvidia.com/gpu.family": pool.family,
            "nvidia.com/gpu.count": str(pool.gpus),
            "nvidia.com/gpu.memory": "81920" if "80GB" in str(pool.product) else "46068",
            "nvidia.com/cuda.driver.major": "550",
            "deployctl.dev/nvlink": "true" if pool.nvlink else "false",
        }
        allocatable[conventions.GPU_RESOURCE] = str(pool.gpus)
        spec["taints"].append({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"})
    if cordoned:
        spec["unschedulable"] = True
        spec["taints"].append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": spec,
        "status": {"capacity": dict(allocatable), "allocatable": allocatable},
    }


def _cordoned(node: dict[str, Any]) -> bool:
    return bool(node["spec"].get("unschedulable"))


def _pod(
    name: str,
    namespace: str,
    node: str,
    containers: list[dict[str, Any]],
    *,
    init: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    phase: str = "Running",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeName": node,
        "containers": containers,
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
        "restartPolicy": "Never" if phase == "Succeeded" else "Always",
    }
    if init:
        spec["initContainers"] = init
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {"app": name.rsplit("-", 1)[0]}},
        "spec": spec,
        "status": {"phase": phase},
    }


def _container(name: str, *, gpus: int = 0, cpu: str = "100m", memory: str = "128Mi") -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": memory}
    limits: dict[str, str] = {"memory": memory}
    if gpus:
        limits[conventions.GPU_RESOURCE] = str(gpus)  # as most charts write it: a limit only
    return {
        "name": name,
        "image": IMAGE.format(name),
        "args": ["--port=8000", "--log-level=info"],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "ports": [{"containerPort": 8000, "name": "http", "protocol": "TCP"}],
        "resources": {"requests": requests, "limits": limits},
    }


def _daemon_pods(node: str, gpus: int) -> list[dict[str, Any]]:
    suffix = node.removeprefix("pf-")
    pods = [
        _pod(f"kube-proxy-{suffix}", f"{NAMESPACE_PREFIX}kube-system", node, [_container("kube-proxy")]),
        _pod(f"node-exporter-{suffix}", f"{NAMESPACE_PREFIX}monitoring", node, [_container("node-exporter")]),
    ]
    if gpus:
        validation = [_container("toolkit-validation")]
        pods += [
            _pod(
                f"nvidia-device-plugin-{suffix}",
                f"{NAMESPACE_PREFIX}gpu-operator",
                node,
                [_container("device-plugin")],
                init=validation,
            ),
            _pod(
                f"dcgm-exporter-{suffix}",
                f"{NAMESPACE_PREFIX}gpu-operator",
                node,
                [_container("dcgm-exporter")],
                init=validation,
            ),
        ]
    return pods


def _workload_pod(rng: random.Random, node: str, gpus: int, *, finished: bool) -> dict[str, Any]:
    team = rng.choice(TEAMS)
    name = f"{team}-{'job' if finished else 'server'}-{rng.getrandbits(40):010x}"
    init = [_container("fetch-weights", cpu="2", memory="4Gi")] if rng.random() < 0.5 else []
    if rng.random() < 0.1:  # a warm-up step that holds the GPUs before the server starts
        init.append(_container("warmup", gpus=gpus))
    containers = [_container("server", gpus=gpus, cpu=str(8 * gpus), memory=f"{64 * gpus}Gi"), _container("metrics")]
    phase = "Succeeded" if finished else "Running"
    return _pod(name, f"{NAMESPACE_PREFIX}{team}", node, containers, init=init or None, phase=phase)


def _app_pod(rng: random.Random, node: str) -> dict[str, Any]:
    team = rng.choice(TEAMS)
    name = f"{team}-api-{rng.getrandbits(40):010x}"
    return _pod(name, f"{NAMESPACE_PREFIX}{team}", node, [_container("api", cpu="4", memory="8Gi")])


def _own_pod(release: profile.Profile, node: str) -> dict[str, Any]:
    name = release.metadata.name
    labels = {conventions.RELEASE_LABEL: name, "app.kubernetes.io/name": name}
    return _pod(
        f"{name}-7d9f8c6b5-x2x4q",
        release.metadata.namespace,
        node,
        [_container("vllm", gpus=release.gpus_per_pod, cpu="32", memory="300Gi")],
        init=[_container("model-check")],
        labels=labels,
    )


def load_profile() -> profile.Profile:
    """profiles/prod-tp4.yaml, moved to a ``bench-pf-`` namespace, where its own pod is put."""
    prof = profile.load(PROFILE)
    metadata = prof.metadata.model_copy(update={"namespace": NAMESPACE_PREFIX + prof.metadata.namespace})
    return prof.model_copy(update={"metadata": metadata})


def _nowhere(prof: profile.Profile) -> profile.Profile:
    """A variant no node can host: H100 with NVLink on nodes with a label none has."""
    placement = prof.placement.model_copy(update={"nodeSelector": {"pool": "reserved-h100"}})
    hardware = prof.hardware.model_copy(update={"gpu": "H100-80GB"})
    return prof.model_copy(update={"placement": placement, "hardware": hardware})


# --- timing --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Timing:
    label: str
    samples: tuple[float, ...]  # seconds

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_check(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], runs: int) -> list[tuple[Timing, str]]:
    """(a): the pure check for the example profile (fits) and for one that fits nowhere."""
    prof = load_profile()
    rows = []
    for label, variant in (("fits (prod-tp4, upgrade)", prof), ("fits nowhere (refusal text)", _nowhere(prof))):
        verdict = preflight.check(variant, nodes, pods, True)
        run = functools.partial(preflight.check, variant, nodes, pods, True)
        samples = tuple(_timed(run) for _ in range(runs))
        rows.append((Timing(label, samples), _summary(verdict)))
    return rows


def _summary(verdict: preflight.Preflight) -> str:
    if verdict.refusal:
        return f"refused ({len(verdict.refusal)} characters)"
    return (
        f"{len(verdict.eligible_nodes)} eligible, {verdict.spare_slots} spare / {verdict.capacity_slots} "
        f"capacity slots, strategy {verdict.strategy_name}"
    )


# --- the cluster ---------------------------------------------------------------------------------


@contextlib.contextmanager
def local_cluster() -> Iterator[pathlib.Path]:
    """The kubeconfig of the cluster for (b): started or reused; stopped at the end if started here."""
    state_dir = os.environ.get("E2E_CLUSTER_STATE_DIR")
    if state_dir is None:
        state_dir = ".cache/cluster-preflight"
        for name, port in OWN_CLUSTER_PORTS.items():
            os.environ.setdefault(f"DEPLOYCTL_CLUSTER_{name}_PORT", str(port))
    import localcluster

    already_running = not localcluster.status(state_dir)
    cluster = localcluster.up(state_dir)
    try:
        yield cluster.kubeconfig
    finally:
        if not already_running and os.environ.get("E2E_KEEP_CLUSTER") != "1":
            localcluster.down(state_dir)


class Population:
    """Puts the simulated nodes and pods into the cluster, and takes them out again."""

    def __init__(self, kubeconfig: pathlib.Path) -> None:
        import kubernetes

        self.api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        self.api.configuration.connection_pool_maxsize = 16
        self.api.rest_client.pool_manager.connection_pool_kw["maxsize"] = 16
        self.core = kubernetes.client.CoreV1Api(self.api)

    def create(self, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        namespaces = sorted({p["metadata"]["namespace"] for p in pods})
        for ns in namespaces:
            self.core.create_namespace({"metadata": {"name": ns, "labels": {BENCH_LABEL: "preflight"}}})
        with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(self.core.create_node, nodes))
            for ns in namespaces:  # the ServiceAccount admission refuses pods until "default" exists
                _poll(functools.partial(self._has_service_account, ns), 60)
            bodies = [{k: v for k, v in p.items() if k != "status"} for p in pods]
            list(pool.map(lambda p: self.core.create_namespaced_pod(p["metadata"]["namespace"], p), bodies))
            _poll(lambda: self._pending() == 0, 600)  # kwok has played every pod's start
            list(pool.map(self._finish, [p for p in pods if p["status"]["phase"] == "Succeeded"]))

    def _has_service_account(self, namespace: str) -> bool:
        return bool(self.core.list_namespaced_service_account(namespace).items)

    def _pending(self) -> int:
        return sum(
            len(self.core.list_namespaced_pod(ns, field_selector="status.phase=Pending").items)
            for ns in self._namespaces()
        )

    def _finish(self, pod: dict[str, Any]) -> None:
        """A finished Job's pod, as the kubelet reports it (kwok has no stage for pods without a Job)."""
        meta = pod["metadata"]
        self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], {"status": {"phase": "Succeeded"}})

    def _namespaces(self) -> list[str]:
        return [n.metadata.name for n in self.core.list_namespace(label_selector=f"{BENCH_LABEL}=preflight").items]

    def remove(self) -> None:
        for ns in self._namespaces():
            self.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
            self.core.delete_namespace(ns)
        self.core.delete_collection_node(label_selector=f"{BENCH_LABEL}=preflight")
        _poll(lambda: not self.core.list_node(label_selector=f"{BENCH_LABEL}=preflight").items, 120)
        self.api.close()


def _poll(done: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench_preflight: gave up waiting after {timeout_s:.0f} s")
        time.sleep(1.0)


def bench_cluster(kubeconfig: pathlib.Path, runs: int) -> tuple[list[Timing], dict[str, float], str]:
    """(b): the tools interleaved, one untimed round first; and the parts of the in-process run."""
    prof = load_profile()
    parts: dict[str, list[float]] = {"connect": [], "list Nodes": [], "list Pods": [], "check": []}
    seen = ""

    def in_process() -> None:
        nonlocal seen
        stamps = [time.perf_counter()]
        kube = client.connect(str(kubeconfig))
        stamps.append(time.perf_counter())
        nodes, _ = kube.list("Node")
        stamps.append(time.perf_counter())
        pods, _ = kube.list("Pod")
        stamps.append(time.perf_counter())
        verdict = preflight.check(prof, nodes, pods, True)
        stamps.append(time.perf_counter())
        for name, begin, end in zip(parts, stamps, stamps[1:], strict=False):
            parts[name].append(end - begin)
        seen = f"{len(nodes)} nodes, {len(pods)} pods listed; {_summary(verdict)}"

    def process(argv: list[str]) -> Callable[[], None]:
        def run() -> None:
            done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120, cwd=ROOT)
            if done.returncode != 0:
                raise SystemExit(f"{argv[0]} failed: {done.stderr.decode(errors='replace')[-800:]}")

        return run

    kube_argv = [str(KUBECTL), "--kubeconfig", str(kubeconfig)]
    tools: dict[str, Callable[[], None]] = {
        "list Nodes + Pods + check (in process, as apply)": in_process,
        "deployctl inventory (fresh process)": process(
            [str(DEPLOYCTL), "inventory", "--output", "json", "--kubeconfig", str(kubeconfig)]
        ),
        "kubectl get nodes -o json": process([*kube_argv, "get", "nodes", "-o", "json"]),
        "kubectl get pods -A -o json": process([*kube_argv, "get", "pods", "-A", "-o", "json"]),
    }
    samples: dict[str, list[float]] = {label: [] for label in tools}
    for rep in range(runs + 1):
        for label, fn in tools.items():
            seconds = _timed(fn)
            if rep:  # the first round warms caches (kubectl's discovery, the OS file cache)
                samples[label].append(seconds)
        if rep == 0:
            for values in parts.values():
                values.clear()
    timings = [Timing(label, tuple(values)) for label, values in samples.items()]
    return timings, {name: statistics.median(values) for name, values in parts.items()}, seen


# --- report --------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=500, help="simulated nodes (default 500)")
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each measurement (default 7)")
    parser.add_argument("--skip-cluster", action="store_true", help="only (a), no cluster")
    args = parser.parse_args()

    release = load_profile()
    nodes, pods = build_cluster(args.nodes, release)
    gpu_nodes = sum(1 for n in nodes if conventions.GPU_RESOURCE in n["status"]["allocatable"])
    print(
        f"simulated cluster: {len(nodes)} nodes ({gpu_nodes} with GPUs), {len(pods)} pods "
        f"({sum(1 for p in pods if p['status']['phase'] == 'Succeeded')} finished), "
        f"{len({p['metadata']['namespace'] for p in pods})} namespaces\n"
    )
    print(f"(a) preflight.check on {len(nodes)} nodes, {args.runs} runs, profile {PROFILE.relative_to(ROOT)}\n")
    print(f"{'case':<30} {'median s':>9} {'min s':>7} {'max s':>7}  verdict")
    worst = 0.0
    for timing, verdict in bench_check(nodes, pods, args.runs):
        worst = max(worst, timing.median)
        spread = f"{min(timing.samples):>7.4f} {max(timing.samples):>7.4f}"
        print(f"{timing.label:<30} {timing.median:>9.4f} {spread}  {verdict}")
    print(f"goal preflight.check ≤ {GOAL_S:.0f} s on {len(nodes)} nodes: {'met' if worst <= GOAL_S else 'MISSED'}")
    if args.skip_cluster:
        return 0

    started = time.monotonic()
    with local_cluster() as kubeconfig:
        population = Population(kubeconfig)
        try:
            begin = time.monotonic()
            population.create(copy.deepcopy(nodes), copy.deepcopy(pods))
            created = time.monotonic() - begin
            timings, parts, seen = bench_cluster(kubeconfig, args.runs)
        finally:
            population.remove()
    peer = next(t for t in timings if t.label == "kubectl get nodes -o json").median
    print(
        f"\n(b) end to end on the local control plane ({created:.0f} s to create the nodes and pods; "
        f"{time.monotonic() - started:.0f} s in all), {args.runs} runs each, interleaved\n"
    )
    print(f"{'what':<52} {'median s':>9} {'min s':>7} {'× kubectl get nodes':>20}")
    for timing in timings:
        print(f"{timing.label:<52} {timing.median:>9.3f} {min(timing.samples):>7.3f} {timing.median / peer:>20.2f}")
    print("in process, median s: " + ", ".join(f"{name} {value:.3f}" for name, value in parts.items()))
    print(f"the cluster as deployctl saw it: {seen}")
    total = sum(parts.values())
    print(f"goal list + preflight ≤ {GOAL_S:.0f} s on {len(nodes)} nodes: {'met' if total <= GOAL_S else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
