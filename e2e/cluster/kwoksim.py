"""Test-side controls of the simulated kubelet (kwok): where port-forwards go, what logs say.

kwok answers the API server's port-forward and log requests for every simulated pod from
its PortForward/ClusterPortForward and Logs/ClusterLogs objects. These helpers write
cluster-scoped ones selecting a whole namespace, owned by that Namespace so the garbage
collector removes them with it. Calling a helper again for the same namespace replaces
its earlier setting of the same kind.
"""

from __future__ import annotations

import datetime
import importlib.resources
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes
import localcluster

GROUP, VERSION = "kwok.x-k8s.io", "v1alpha1"
FIELD_MANAGER = "deployctl-e2e"
LOCALHOST = "127.0.0.1"


def forward_namespace(cluster: localcluster.Cluster, namespace: str, target_port: int) -> None:
    """Send port-forwards to any port of any pod in `namespace` to 127.0.0.1:target_port.

    Start the local server (e.g. the vLLM simulator) first; `kubectl port-forward` and the
    client's `kubernetes.stream.portforward` then reach it through the API server.
    """
    forwards = [{"target": {"address": LOCALHOST, "port": target_port}}]
    _apply_for_namespace(cluster, namespace, "ClusterPortForward", "clusterportforwards", {"forwards": forwards})


def forward_ports(cluster: localcluster.Cluster, namespace: str, ports: dict[int, int]) -> None:
    """Send port-forwards to pod port P (any pod in `namespace`) to 127.0.0.1:ports[P].

    For tests that give one port a healthy simulator and another a faulty one. Ports not
    in the map are refused; this replaces any earlier forward_namespace/forward_ports.
    """
    forwards = [
        {"ports": [pod_port], "target": {"address": LOCALHOST, "port": local_port}}
        for pod_port, local_port in sorted(ports.items())
    ]
    _apply_for_namespace(cluster, namespace, "ClusterPortForward", "clusterportforwards", {"forwards": forwards})


def forwarded_ports(cluster: localcluster.Cluster, namespace: str) -> dict[int, int]:
    """The pod port -> local port map last set by forward_ports (empty when none)."""
    with _client(cluster) as api_client:
        try:
            obj: dict[str, Any] = kubernetes.client.CustomObjectsApi(api_client).get_cluster_custom_object(  # type: ignore[assignment]
                GROUP, VERSION, "clusterportforwards", _name(namespace)
            )
        except kubernetes.client.ApiException as e:
            if e.status == 404:
                return {}
            raise
    return {
        pod_port: forward["target"]["port"]
        for forward in obj["spec"]["forwards"]
        for pod_port in forward.get("ports", [])
    }


def set_namespace_logs(cluster: localcluster.Cluster, namespace: str, logs_file: Path) -> None:
    """Serve the plain text in `logs_file` as the log of every container in `namespace`.

    kwok, like the kubelet, serves CRI-format log files ("<time> stderr F <line>"), so the
    text is converted, when this is called, into `<logs_file>.cri` next to it: write the file
    first. It is the current and the --previous log alike, so a crash-looping pod shows the
    planted text (a CUDA out-of-memory traceback, say) whichever the caller asks for.
    """
    cri = logs_file.resolve().with_name(logs_file.name + ".cri")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    cri.write_text("".join(f"{stamp} stderr F {line}\n" for line in logs_file.read_text().splitlines()))
    spec = {"logs": [{"logsFile": str(cri), "previousLogsFile": str(cri)}]}
    _apply_for_namespace(cluster, namespace, "ClusterLogs", "clusterlogs", spec)


def serve_warmup_report(
    cluster: localcluster.Cluster, namespace: str, model: Path, log: Path, manifest: str = "", *, digest: bool = True
) -> None:
    """Run the installed deployctl's own warm-up script (orchestrator/data/warmup_read.py, from the wheel)
    on the directory ``model`` and serve its output, through ``log``, as every container's log in
    ``namespace``: the report a warm-up pod on a real node would print, which deployctl reads and judges."""
    script = (importlib.resources.files("orchestrator") / "data" / "warmup_read.py").read_text()
    argv = [sys.executable, "-c", script, str(model), manifest, "1" if digest else "0", ""]
    log.write_text(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    set_namespace_logs(cluster, namespace, log)


def _apply_for_namespace(
    cluster: localcluster.Cluster, namespace: str, kind: str, plural: str, spec: dict[str, Any]
) -> None:
    with _client(cluster) as api_client:
        ns = kubernetes.client.CoreV1Api(api_client).read_namespace(namespace)
        owner = {"apiVersion": "v1", "kind": "Namespace", "name": namespace, "uid": ns.metadata.uid}  # type: ignore[union-attr]
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": kind,
            "metadata": {"name": _name(namespace), "ownerReferences": [owner]},
            "spec": {"selector": {"matchNamespaces": [namespace]}, **spec},
        }
        kubernetes.client.CustomObjectsApi(api_client).patch_cluster_custom_object(
            GROUP,
            VERSION,
            plural,
            _name(namespace),
            body,
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type="application/apply-patch+yaml",
        )


def _name(namespace: str) -> str:
    return f"ns-{namespace}"


def _client(cluster: localcluster.Cluster) -> kubernetes.client.ApiClient:
    client: kubernetes.client.ApiClient = kubernetes.config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(cluster.kubeconfig)
    )
    return client
