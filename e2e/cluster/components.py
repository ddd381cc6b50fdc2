"""The local cluster's components: where they listen, where their files live, how each starts.

Command lines and config files for etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok, KubeRay's ray-operator and Flux's source-controller and
kustomize-controller, and the kubeconfig each client component authenticates with.
"""

from __future__ import annotations

import base64
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import pki
import yaml

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
# Where build.sh puts the binaries (kubectl and helm too).
BIN_DIR = Path(os.environ.get("DEPLOYCTL_BIN", ROOT / ".cache" / "bin"))
COMPONENTS = (
    *("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "ray-operator"),
    *("source-controller", "kustomize-controller"),
)
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
# kwok takes charge of the nodes carrying this annotation (nodes.yaml sets it).
KWOK_NODE_SELECTOR = "kwok.x-k8s.io/node=fake"
# CRDs kwok watches: stages and the kubelet-side simulations tests create per namespace.
KWOK_CRDS = (
    *("Stage", "Metric", "Logs", "ClusterLogs", "PortForward", "ClusterPortForward"),
    *("Exec", "ClusterExec", "Attach", "ClusterAttach", "ResourceUsage", "ClusterResourceUsage"),
)


class ClusterError(RuntimeError):
    """The local cluster could not be started, checked or stopped; the message says why."""


@dataclass(frozen=True)
class Ports:
    """TCP ports on 127.0.0.1, one per listener."""

    etcd: int = 23790
    etcd_peer: int = 23791
    apiserver: int = 64430
    kwok: int = 64431
    controller_manager: int = 64432
    scheduler: int = 64433
    # ray-operator's two plain-HTTP listeners (controller-runtime's defaults are :8080 and :8082).
    ray_operator_metrics: int = 64434
    ray_operator_probe: int = 64435
    # Flux's controllers: plain-HTTP metrics and health listeners (controller-runtime's :8080
    # and :9440 by default), and source-controller's artifact server (:9090 by default), from
    # which kustomize-controller downloads what source-controller fetched.
    source_controller_metrics: int = 64436
    source_controller_health: int = 64437
    source_controller_storage: int = 64438
    kustomize_controller_metrics: int = 64439
    kustomize_controller_health: int = 64440

    @classmethod
    def from_env(cls) -> Ports:
        defaults = cls()
        return cls(
            **{
                name: int(os.environ.get(f"DEPLOYCTL_CLUSTER_{name.upper()}_PORT", value))
                for name, value in asdict(defaults).items()
            }
        )


@dataclass(frozen=True)
class Layout:
    """Where everything of one cluster lives."""

    state: Path

    @property
    def pki(self) -> pki.Pki:
        return pki.Pki(self.state / "pki")

    @property
    def kubeconfig(self) -> Path:
        return self.state / "kubeconfig"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def etcd_data(self) -> Path:
        return self.state / "etcd"

    @property
    def state_file(self) -> Path:
        return self.state / "state.json"

    @property
    def kubeconfigs(self) -> Path:
        return self.state / "kubeconfigs"

    @property
    def kwok_config(self) -> Path:
        return self.state / "kwok.yaml"

    @property
    def kwok_workdir(self) -> Path:
        return self.state / "kwok"

    @property
    def flux_storage(self) -> Path:
        """source-controller's artifacts (tarballs of the fetched revisions)."""
        return self.state / "flux-artifacts"

    def component_kubeconfig(self, component: str) -> Path:
        return self.kubeconfigs / f"{component}.kubeconfig"


def etcd_args(layout: Layout, ports: Ports) -> list[str]:
    client, peer = f"http://127.0.0.1:{ports.etcd}", f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(BIN_DIR / "etcd"),
        "--name=deployctl-e2e",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=deployctl-e2e={peer}",
        "--initial-cluster-state=new",
        # The data is thrown away on every start; fsync would only make a shared disk slower.
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def apiserver_args(layout: Layout, certs: pki.Pki, ports: Ports) -> list[str]:
    return [
        str(BIN_DIR / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={certs.cert('apiserver')}",
        f"--tls-private-key-file={certs.key('apiserver')}",
        f"--client-ca-file={certs.ca_cert}",
        "--authorization-mode=Node,RBAC",
        # TokenRequest: tests mint ServiceAccount tokens to check deployctl's least-privilege RBAC.
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={certs.sa_pub}",
        f"--service-account-signing-key-file={certs.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        # Logs and port-forward go through the API server to kwok, which every node names as
        # its kubelet at 127.0.0.1:<kwok port>; its certificate is checked like a real kubelet's.
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        f"--kubelet-certificate-authority={certs.ca_cert}",
        f"--kubelet-client-certificate={certs.cert(pki.KUBELET_CLIENT.file_stem)}",
        f"--kubelet-client-key={certs.key(pki.KUBELET_CLIENT.file_stem)}",
        # The `kubernetes` Service cannot point at a loopback address; nothing in-cluster needs it.
        "--endpoint-reconciler-type=none",
    ]


def controller_manager_args(layout: Layout, certs: pki.Pki, ports: Ports) -> list[str]:
    kubeconfig = layout.component_kubeconfig("kube-controller-manager")
    return [
        str(BIN_DIR / "kube-controller-manager"),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.controller_manager}",
        # One instance only: leader election would make a restart wait out the old lease.
        "--leader-elect=false",
        # Each controller acts as its own ServiceAccount, with the RBAC a real cluster gives it.
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={certs.sa_key}",
        f"--root-ca-file={certs.ca_cert}",
        f"--cluster-signing-cert-file={certs.ca_cert}",
        f"--cluster-signing-key-file={certs.ca_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
    ]


def scheduler_args(layout: Layout, ports: Ports) -> list[str]:
    kubeconfig = layout.component_kubeconfig("kube-scheduler")
    return [
        str(BIN_DIR / "kube-scheduler"),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.scheduler}",
        "--leader-elect=false",
    ]


def kwok_args(layout: Layout) -> list[str]:
    return [
        str(BIN_DIR / "kwok"),
        f"--config={layout.kwok_config}",
        f"--kubeconfig={layout.component_kubeconfig('kwok')}",
    ]


def ray_operator_args(layout: Layout, ports: Ports) -> list[str]:
    """KubeRay's operator: reconciles RayCluster (and RayJob, RayService) into pods and Services."""
    return [
        str(BIN_DIR / "ray-operator"),
        f"--kubeconfig={layout.component_kubeconfig('ray-operator')}",
        f"--metrics-addr=127.0.0.1:{ports.ray_operator_metrics}",
        f"--health-probe-bind-address=127.0.0.1:{ports.ray_operator_probe}",
        # One instance only, as for the controller manager: a restart need not wait out a lease.
        "--enable-leader-election=false",
        "--log-stdout-encoder=console",
    ]


def source_controller_args(layout: Layout, ports: Ports) -> list[str]:
    """Flux's source-controller: fetches GitRepositories (and OCI, Helm, bucket sources) into
    artifacts it serves over HTTP. It runs on this machine, not in a pod, so a git server on
    127.0.0.1 is reachable from it as it is from the tests."""
    return [
        str(BIN_DIR / "source-controller"),
        f"--metrics-addr=127.0.0.1:{ports.source_controller_metrics}",
        f"--health-addr=127.0.0.1:{ports.source_controller_health}",
        f"--storage-path={layout.flux_storage}",
        f"--storage-addr=127.0.0.1:{ports.source_controller_storage}",
        # The host part of every artifact URL it writes into a source's status.
        f"--storage-adv-addr=127.0.0.1:{ports.source_controller_storage}",
        "--watch-all-namespaces",
        # One instance only: a restart need not wait out a lease.
        "--enable-leader-election=false",
        "--log-encoding=console",
    ]


def kustomize_controller_args(layout: Layout, ports: Ports) -> list[str]:
    """Flux's kustomize-controller: builds a Kustomization from its source's artifact and
    server-side applies it, as a cluster admin (no --default-service-account)."""
    return [
        str(BIN_DIR / "kustomize-controller"),
        f"--metrics-addr=127.0.0.1:{ports.kustomize_controller_metrics}",
        f"--health-addr=127.0.0.1:{ports.kustomize_controller_health}",
        "--watch-all-namespaces",
        "--enable-leader-election=false",
        "--log-encoding=console",
    ]


def flux_env(layout: Layout, component: str) -> dict[str, str]:
    # Flux's controllers take no --kubeconfig flag (controller-runtime's is not on their flag
    # set); they read KUBECONFIG, as ctrl.GetConfig does.
    return {"KUBECONFIG": str(layout.component_kubeconfig(component))}


def kwok_env(layout: Layout) -> dict[str, str]:
    # Its own work directory keeps kwok from also loading a user's ~/.kwok/kwok.yaml.
    return {"KWOK_WORKDIR": str(layout.kwok_workdir)}


def write_kwok_config(layout: Layout, certs: pki.Pki, ports: Ports) -> None:
    config = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {
            "manageNodesWithAnnotationSelector": KWOK_NODE_SELECTOR,
            "cidr": POD_CIDR,
            # Every node reports 127.0.0.1:<kwok port> as its kubelet; kwok serves them all.
            "nodeIP": "127.0.0.1",
            "nodePort": ports.kwok,
            "serverAddress": f"127.0.0.1:{ports.kwok}",
            "tlsCertFile": str(certs.cert("kwok-serving")),
            "tlsPrivateKeyFile": str(certs.key("kwok-serving")),
            "nodeLeaseDurationSeconds": 40,
            "enableCRDs": list(KWOK_CRDS),
            # kwok applies its built-in defaults only when no config file is given, and a zero
            # parallelism stops its controllers; these are its documented defaults.
            "enableDebuggingHandlers": True,
            "podPlayStageParallelism": 4,
            "nodePlayStageParallelism": 4,
            "nodeLeaseParallelism": 4,
            "podsOnNodeSyncParallelism": 1,
        },
    }
    layout.kwok_config.write_text(yaml.safe_dump(config, sort_keys=False))


def write_kubeconfigs(layout: Layout, certs: pki.Pki, ports: Ports) -> None:
    users = {
        "kube-controller-manager": pki.CONTROLLER_MANAGER,
        "kube-scheduler": pki.SCHEDULER,
        "kwok": pki.KWOK,
        # A file of its own, as the admin: KubeRay's Helm chart would bind it a ClusterRole, but
        # the operator is a dependency of deployctl here, not under test, like kwok.
        "ray-operator": pki.ADMIN,
        # Likewise Flux's controllers: a real install binds them cluster-admin too.
        "source-controller": pki.ADMIN,
        "kustomize-controller": pki.ADMIN,
    }
    layout.kubeconfigs.mkdir(exist_ok=True)
    for component, identity in users.items():
        _write_kubeconfig(layout.component_kubeconfig(component), certs, identity, ports)
    _write_kubeconfig(layout.kubeconfig, certs, pki.ADMIN, ports)


def _write_kubeconfig(path: Path, certs: pki.Pki, identity: pki.ClientIdentity, ports: Ports) -> None:
    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    # Certificates are embedded so the file works when copied elsewhere.
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "deployctl-e2e",
                "cluster": {
                    "server": f"https://127.0.0.1:{ports.apiserver}",
                    "certificate-authority-data": b64(certs.ca_cert),
                },
            }
        ],
        "users": [
            {
                "name": identity.user,
                "user": {
                    "client-certificate-data": b64(certs.cert(identity.file_stem)),
                    "client-key-data": b64(certs.key(identity.file_stem)),
                },
            }
        ],
        "contexts": [{"name": "deployctl-e2e", "context": {"cluster": "deployctl-e2e", "user": identity.user}}],
        "current-context": "deployctl-e2e",
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
