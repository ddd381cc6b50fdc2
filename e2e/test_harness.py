"""The e2e harness keeps its promises: a real control plane and a faithful kwok simulation.

These run first when something is off with e2e/cluster: every other e2e test takes for
granted that controllers, scheduler, pod behaviours, logs and port-forward work as checked here.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import kubernetes
import kwoksim
import localcluster
import pytest
from kubernetes.stream import portforward

pytestmark = pytest.mark.kwok

IMAGE = "vllm/vllm-openai:v0.11.0"  # never pulled: kwok only pretends to run it
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
CUDA_OOM = (
    "Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/worker/worker.py", line 231,'
    " in determine_num_available_blocks\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    " GPU 0 has a total capacity of 79.15 GiB\n"
)


def pod_manifest(
    name: str,
    *,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    gpus: int = 0,
    node_labels: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """A one-container pod; `node_labels` becomes required node affinity (key In values)."""
    container: dict[str, Any] = {"name": "vllm", "image": IMAGE, "ports": [{"containerPort": 8000}]}
    spec: dict[str, Any] = {"containers": [container]}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
        spec["tolerations"] = [GPU_TOLERATION]
    if node_labels:
        terms = [{"key": k, "operator": "In", "values": v} for k, v in node_labels.items()]
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": terms}]}
            }
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": spec,
    }


def wait_for(what: str, probe: Callable[[], Any], timeout_s: float = 30) -> Any:
    """Poll until `probe` returns something truthy, and return it."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)


def condition(pod: Any, kind: str) -> str | None:
    for c in pod.status.conditions or []:
        if c.type == kind:
            return str(c.status)
    return None


@pytest.fixture
def core(api_client: kubernetes.client.ApiClient) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(api_client)


@pytest.fixture
def running_pod(core: kubernetes.client.CoreV1Api, namespace: str) -> str:
    """A Running, Ready pod on the CPU node, for the port-forward tests."""
    core.create_namespaced_pod(namespace, pod_manifest("server", annotations={"sim.deployctl.dev/ready-delay": "0s"}))
    wait_for(
        "pod server Ready",
        lambda: condition(core.read_namespaced_pod("server", namespace), "Ready") == "True",
    )
    return "server"


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[int, str]]:
    """A plain local HTTP server standing in for the model server: (port, served text)."""
    text = "hello through the API server\n"
    (tmp_path / "hello.txt").write_text(text)
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    # "Serving HTTP on 127.0.0.1 port 41234 (http://127.0.0.1:41234/) ..."
    port = int(re.search(r"port (\d+)", proc.stdout.readline()).group(1))  # type: ignore[union-attr]
    yield port, text
    proc.terminate()
    proc.wait()


@contextlib.contextmanager
def kubectl_port_forward(cluster: localcluster.Cluster, namespace: str, pod: str, port: int) -> Iterator[int]:
    """`kubectl port-forward` to the pod's `port` on a free local port, which it yields."""
    kubectl = localcluster.BIN_DIR / "kubectl"
    proc = subprocess.Popen(
        [
            str(kubectl),
            f"--kubeconfig={cluster.kubeconfig}",
            "-n",
            namespace,
            "port-forward",
            f"pod/{pod}",
            f":{port}",
            "--address=127.0.0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "Forwarding from 127.0.0.1:38211 -> 8000"
    match = re.search(r"127\.0\.0\.1:(\d+) ->", line)
    try:
        assert match, f"kubectl port-forward did not start: {line}{proc.stdout.read() if proc.poll() else ''}"
        yield int(match.group(1))
    finally:
        proc.terminate()
        proc.wait()


# --- control plane ------------------------------------------------------------------------


def test_api_server_serves_discovery_including_kwok_groups(api_client: kubernetes.client.ApiClient) -> None:
    version = kubernetes.client.VersionApi(api_client).get_code()
    groups = {g.name for g in kubernetes.client.ApisApi(api_client).get_api_versions().groups}
    assert version.git_version.startswith("v1.")
    assert {"apps", "rbac.authorization.k8s.io", "apiextensions.k8s.io", "kwok.x-k8s.io"} <= groups


def test_service_account_token_is_limited_to_what_rbac_grants(
    cluster: localcluster.Cluster, core: kubernetes.client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    token = core.create_namespaced_service_account_token(
        "reader", namespace, {"spec": {"expirationSeconds": 600}}
    ).status.token
    config = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(str(cluster.kubeconfig), client_configuration=config)
    config.cert_file = config.key_file = None
    config.api_key = {"authorization": f"Bearer {token}"}
    as_reader = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(config))

    with pytest.raises(kubernetes.client.ApiException) as denied:
        as_reader.list_namespaced_pod(namespace)
    assert denied.value.status == 403

    rbac = kubernetes.client.RbacAuthorizationV1Api(core.api_client)
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "reader-reads-pods"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    wait_for("the RoleBinding to take effect", lambda: _allowed(lambda: as_reader.list_namespaced_pod(namespace)))


def _allowed(call: Callable[[], object]) -> bool:
    try:
        call()
    except kubernetes.client.ApiException as e:
        if e.status == 403:
            return False
        raise
    return True


def test_server_side_applied_deployment_rolls_out_ready_pods(
    api_client: kubernetes.client.ApiClient, core: kubernetes.client.CoreV1Api, namespace: str
) -> None:
    apps = kubernetes.client.AppsV1Api(api_client)
    template = pod_manifest("unused", annotations={"sim.deployctl.dev/ready-delay": "1s"})
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}, "annotations": template["metadata"]["annotations"]},
                "spec": template["spec"],
            },
        },
    }
    apps.patch_namespaced_deployment(
        "web",
        namespace,
        deployment,
        field_manager="e2e",
        force=True,
        _content_type="application/apply-patch+yaml",
    )

    def rolled_out() -> bool:
        s = apps.read_namespaced_deployment("web", namespace).status
        return s.ready_replicas == 2 and s.available_replicas == 2 and s.updated_replicas == 2

    wait_for("Deployment web to roll out", rolled_out)
    replica_sets = apps.list_namespaced_replica_set(namespace).items
    assert [rs.metadata.owner_references[0].name for rs in replica_sets] == ["web"]
    pods = core.list_namespaced_pod(namespace, label_selector="app=web").items
    assert len(pods) == 2
    assert all(
        p.status.phase == "Running" and condition(p, "Ready") == "True" and p.spec.node_name == "cpu-0" for p in pods
    )


# --- scheduling on the simulated GPU nodes ------------------------------------------------


def test_four_gpu_pods_needing_nvlink_a100_land_only_on_nvlink_a100_nodes(
    core: kubernetes.client.CoreV1Api, namespace: str
) -> None:
    wanted = {"deployctl.dev/nvlink": ["true"], "nvidia.com/gpu.product": ["NVIDIA-A100-SXM4-80GB"]}
    for name in ("tp4-a", "tp4-b"):
        core.create_namespaced_pod(namespace, pod_manifest(name, gpus=4, node_labels=wanted))

    def nodes() -> set[str] | None:
        placed = {core.read_namespaced_pod(n, namespace).spec.node_name for n in ("tp4-a", "tp4-b")}
        return None if None in placed else placed

    # Each node has exactly 4 GPUs, so the two pods take one NVLink A100 node each.
    assert wait_for("both pods scheduled", nodes) == {"gpu-a100-nvl-0", "gpu-a100-nvl-1"}


def test_pod_asking_for_eight_a100s_stays_pending_with_failed_scheduling(
    core: kubernetes.client.CoreV1Api, namespace: str
) -> None:
    a100s = {"nvidia.com/gpu.product": ["NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-PCIE-80GB"]}
    core.create_namespaced_pod(namespace, pod_manifest("tp8", gpus=8, node_labels=a100s))

    def failed_scheduling() -> list[Any]:
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=tp8").items
        return [e for e in events if e.reason == "FailedScheduling"]

    events = wait_for("a FailedScheduling event", failed_scheduling)
    assert "Insufficient nvidia.com/gpu" in events[0].message
    # The scheduler records the event before it patches the pod's condition.
    wait_for(
        "PodScheduled=False",
        lambda: condition(core.read_namespaced_pod("tp8", namespace), "PodScheduled") == "False",
    )
    pod = core.read_namespaced_pod("tp8", namespace)
    assert pod.status.phase == "Pending" and pod.spec.node_name is None


# --- pod behaviours -----------------------------------------------------------------------


def test_crash_loop_pod_backs_off_with_growing_restarts_and_serves_planted_log(
    cluster: localcluster.Cluster, core: kubernetes.client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    log_file = tmp_path / "oom.log"
    log_file.write_text(CUDA_OOM)
    kwoksim.set_namespace_logs(cluster, namespace, log_file)
    core.create_namespaced_pod(
        namespace,
        pod_manifest(
            "oom",
            gpus=1,
            annotations={"sim.deployctl.dev/behavior": "crash-loop", "sim.deployctl.dev/backoff": "1s"},
        ),
    )

    def restarted_twice() -> Any:
        status = core.read_namespaced_pod("oom", namespace).status
        cs = (status.container_statuses or [None])[0]
        return cs if cs and cs.restart_count >= 2 else None

    cs = wait_for("two restarts", restarted_twice)
    assert cs.state.waiting.reason == "CrashLoopBackOff"
    assert cs.last_state.terminated.exit_code == 1
    assert not cs.ready
    assert "CUDA out of memory" in core.read_namespaced_pod_log("oom", namespace)
    assert "CUDA out of memory" in core.read_namespaced_pod_log("oom", namespace, previous=True)


def test_image_pull_pod_reports_err_image_pull_then_image_pull_back_off(
    core: kubernetes.client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_pod(
        namespace, pod_manifest("bad-image", annotations={"sim.deployctl.dev/behavior": "image-pull"})
    )
    seen: list[str] = []

    def back_off() -> bool:
        statuses = core.read_namespaced_pod("bad-image", namespace).status.container_statuses or []
        reason = statuses[0].state.waiting.reason if statuses and statuses[0].state.waiting else None
        if reason and reason not in seen:
            seen.append(reason)
        return reason == "ImagePullBackOff"

    wait_for("ImagePullBackOff", back_off)
    assert seen[-2:] == ["ErrImagePull", "ImagePullBackOff"]
    assert core.read_namespaced_pod("bad-image", namespace).status.phase == "Pending"


def test_never_ready_pod_runs_but_stays_unready(core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(
        namespace, pod_manifest("stuck", annotations={"sim.deployctl.dev/behavior": "never-ready"})
    )
    wait_for("pod stuck Running", lambda: core.read_namespaced_pod("stuck", namespace).status.phase == "Running")
    time.sleep(2)  # twice the default ready delay
    pod = core.read_namespaced_pod("stuck", namespace)
    assert condition(pod, "Ready") == "False"
    assert pod.status.container_statuses[0].state.running is not None


def test_worker_behavior_overrides_behavior_on_worker_pods_only(
    core: kubernetes.client.CoreV1Api, namespace: str
) -> None:
    crash_workers = {
        "sim.deployctl.dev/worker-behavior": "crash-loop",
        "sim.deployctl.dev/backoff": "1s",
        "sim.deployctl.dev/ready-delay": "0s",
    }
    pods = {
        # (labels, annotations): a copy whose workers crash while its leader serves ...
        "leader": ({"deployctl.dev/group-role": "leader"}, crash_workers),
        "worker": ({"deployctl.dev/group-role": "worker"}, crash_workers),
        # ... and a worker whose own behaviour wins over the pod-wide one.
        "healthy-worker": (
            {"deployctl.dev/group-role": "worker"},
            {
                "sim.deployctl.dev/behavior": "crash-loop",
                "sim.deployctl.dev/worker-behavior": "default",
                "sim.deployctl.dev/ready-delay": "0s",
            },
        ),
    }
    for name, (labels, notes) in pods.items():
        core.create_namespaced_pod(namespace, pod_manifest(name, labels=labels, annotations=notes))

    def crashed() -> Any:
        cs = (core.read_namespaced_pod("worker", namespace).status.container_statuses or [None])[0]
        return cs if cs and cs.restart_count >= 1 else None

    assert wait_for("the worker to crash", crashed).state.waiting.reason == "CrashLoopBackOff"
    for name in ("leader", "healthy-worker"):
        wait_for(
            f"pod {name} Ready", lambda n=name: condition(core.read_namespaced_pod(n, namespace), "Ready") == "True"
        )
        assert core.read_namespaced_pod(name, namespace).status.container_statuses[0].restart_count == 0


# --- KubeRay ------------------------------------------------------------------------------


def test_ray_operator_reconciles_ray_cluster_into_ready_head_and_worker_on_one_fabric(
    api_client: kubernetes.client.ApiClient, core: kubernetes.client.CoreV1Api, namespace: str
) -> None:
    groups = {g.name for g in kubernetes.client.ApisApi(api_client).get_api_versions().groups}
    if "ray.io" not in groups:
        pytest.skip("the cluster does not serve ray.io (KubeRay)")

    def template(role: str, container: str) -> dict[str, Any]:
        # A whole 8-GPU H100 node per Ray node, on the InfiniBand fabric the four share.
        return {
            "metadata": {"labels": {"deployctl.dev/group-role": role}},
            "spec": {
                "tolerations": [GPU_TOLERATION],
                "nodeSelector": {"network.deployctl.dev/fabric": "ib-a"},
                "containers": [{"name": container, "image": IMAGE, "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
            },
        }

    ray_cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "copy-0"},
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": template("leader", "ray-head")},
            "workerGroupSpecs": [
                {
                    "groupName": "workers",
                    "replicas": 1,
                    "minReplicas": 1,
                    "maxReplicas": 1,
                    "rayStartParams": {},
                    "template": template("worker", "ray-worker"),
                }
            ],
        },
    }
    custom = kubernetes.client.CustomObjectsApi(api_client)
    custom.create_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", ray_cluster)

    def ready() -> dict[str, Any] | None:
        obj = custom.get_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", "copy-0")
        status: dict[str, Any] = obj.get("status") or {}
        return status if status.get("state") == "ready" else None

    # Generous: the operator, the scheduler and kwok share a loaded 2-core machine.
    final = wait_for("RayCluster copy-0 state ready", ready, 60)
    assert final["readyWorkerReplicas"] == 1
    conditions = {c["type"]: c["status"] for c in final["conditions"]}
    assert conditions["HeadPodReady"] == "True" and conditions["RayClusterProvisioned"] == "True"

    pods = core.list_namespaced_pod(namespace, label_selector="ray.io/cluster=copy-0").items
    by_type = {p.metadata.labels["ray.io/node-type"]: p for p in pods}
    assert sorted(by_type) == ["head", "worker"] and len(pods) == 2
    nodes = {p.spec.node_name for p in pods}
    assert len(nodes) == 2 and all(n.startswith("gpu-h100-8x-") for n in nodes)
    assert all(p.status.phase == "Running" and condition(p, "Ready") == "True" for p in pods)
    assert final["head"]["podName"] == by_type["head"].metadata.name
    head_service = core.read_namespaced_service(final["head"]["serviceName"], namespace)
    assert head_service.spec.selector["ray.io/node-type"] == "head"


# --- port-forward and the simulator -------------------------------------------------------


def test_kubectl_port_forward_reaches_local_server(
    cluster: localcluster.Cluster, namespace: str, running_pod: str, http_server: tuple[int, str]
) -> None:
    port, text = http_server
    kwoksim.forward_namespace(cluster, namespace, port)
    with kubectl_port_forward(cluster, namespace, running_pod, 8000) as local:
        body = urllib.request.urlopen(f"http://127.0.0.1:{local}/hello.txt", timeout=10).read().decode()
    assert body == text


def test_python_client_port_forward_reaches_local_server(
    cluster: localcluster.Cluster,
    core: kubernetes.client.CoreV1Api,
    namespace: str,
    running_pod: str,
    http_server: tuple[int, str],
) -> None:
    port, text = http_server
    kwoksim.forward_namespace(cluster, namespace, port)
    forward = portforward(core.connect_get_namespaced_pod_portforward, running_pod, namespace, ports="8000")
    sock = forward.socket(8000)
    sock.settimeout(10)
    sock.sendall(b"GET /hello.txt HTTP/1.0\r\nHost: pod\r\n\r\n")
    # The tunnel does not pass the server's close on, so read by Content-Length, not to EOF.
    response = b""
    while b"\r\n\r\n" not in response:
        response += sock.recv(65536)
    head, body = response.split(b"\r\n\r\n", 1)
    length = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
    while len(body) < length:
        body += sock.recv(65536)
    sock.close()
    assert head.startswith(b"HTTP/1.0 200")
    assert body.decode() == text


def test_forward_ports_sends_each_pod_port_to_its_own_simulator(
    cluster: localcluster.Cluster, namespace: str, running_pod: str, simulator: Callable[..., Any]
) -> None:
    good, bad = simulator(model="good"), simulator(model="bad")
    kwoksim.forward_ports(cluster, namespace, {8000: good.port, 8001: bad.port})
    assert kwoksim.forwarded_ports(cluster, namespace) == {8000: good.port, 8001: bad.port}
    served = {}
    for pod_port in (8000, 8001):
        with kubectl_port_forward(cluster, namespace, running_pod, pod_port) as local:
            models = httpx.get(f"http://127.0.0.1:{local}/v1/models", timeout=10).json()
            served[pod_port] = models["data"][0]["id"]
    assert served == {8000: "good", 8001: "bad"}


def test_simulator_streams_tokens_at_configured_latencies_through_port_forward(
    cluster: localcluster.Cluster, namespace: str, running_pod: str, simulator: Callable[..., Any]
) -> None:
    sim = simulator(model="llama-sim", ttft_ms=300, itl_ms=50)
    kwoksim.forward_namespace(cluster, namespace, sim.port)
    request = {
        "model": "llama-sim",
        "stream": True,
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "hello"}],
    }
    with kubectl_port_forward(cluster, namespace, running_pod, 8000) as local:
        arrivals: list[float] = []
        t0 = time.monotonic()
        with httpx.stream("POST", f"http://127.0.0.1:{local}/v1/chat/completions", json=request, timeout=30) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                choices = json.loads(line[len("data: ") :])["choices"]
                if choices and choices[0]["delta"].get("content"):
                    arrivals.append(time.monotonic() - t0)
    assert len(arrivals) == 10
    gaps = sorted(b - a for a, b in itertools.pairwise(arrivals))
    assert 0.3 <= arrivals[0] < 0.3 + 0.5  # TTFT, plus the tunnel's overhead
    assert 0.035 <= gaps[len(gaps) // 2] <= 0.08  # median inter-token latency


@pytest.mark.skipif(shutil.which("go") is None, reason="Go builds the simulator; without it there is none to test")
def test_the_simulators_own_go_tests_pass() -> None:
    """The simulator's engine modes (routes, health while loading, SSE framing, usage chunk, error
    bodies, metric names per engine) and its fault modes are unit-tested in Go; the e2e tests rely
    on them, so they run here, where Go is at hand anyway."""
    simulator_dir = Path(__file__).resolve().parent / "simulator"
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    done = subprocess.run(
        ["go", "test", "./..."], cwd=simulator_dir, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
