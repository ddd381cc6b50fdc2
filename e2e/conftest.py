"""Fixtures of deployctl's end-to-end tests: the cluster, a namespace per test, simulators.

The cluster is the local one from e2e/cluster/localcluster.py, started (or reused) once per
session, unless E2E_KUBECONFIG names another cluster (kind, a real one) to run against.
A session stops the local cluster at its end only if it started it, and never with
E2E_KEEP_CLUSTER=1, which keeps the next run's start instant.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import kubernetes
import pytest
import yaml

E2E_DIR = Path(__file__).resolve().parent
# The cluster tooling is plain scripts (runnable as `python e2e/cluster/localcluster.py`),
# not a package; importing them needs their directory on the path.
sys.path.insert(0, str(E2E_DIR / "cluster"))
sys.path.insert(0, str(E2E_DIR / "realvllm"))
import components  # noqa: E402
import deployhelpers  # noqa: E402
import fluxhelpers  # noqa: E402
import kwoksim  # noqa: E402
import localcluster  # noqa: E402
import shipped  # noqa: E402

# vLLM simulator launcher; it (re)builds the binary through build.sh on first use.
SIM = E2E_DIR / "sim"
SIM_START_TIMEOUT_S = 600.0  # a cold build of the simulator included


# --- cluster ------------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    wrong = shipped.problems()
    if wrong and os.environ.get(shipped.FROM_CHECKOUT_ENV) != "1":
        raise pytest.UsageError(
            "the e2e suite runs the deployctl of the wheel built from this checkout, installed in a venv "
            "that holds no checkout; here: " + "; ".join(wrong) + ". Run `make test-e2e` (it builds the wheel "
            "into .cache/wheel-venv and runs its pytest), or .cache/wheel-venv/bin/pytest e2e/... after "
            f"`make wheel-venv`; {shipped.FROM_CHECKOUT_ENV}=1 runs the checkout instead, for local debugging only."
        )
    config.addinivalue_line(
        "markers", "kwok: needs the kwok simulation (GPU nodes, pod behaviours, logs, port-forward)"
    )


@pytest.fixture(scope="session")
def cluster() -> Iterator[localcluster.Cluster]:
    """The cluster under test: E2E_KUBECONFIG's, or the local one (started or reused)."""
    external = os.environ.get("E2E_KUBECONFIG")
    if external:
        yield localcluster.Cluster(Path(external).expanduser().resolve())
        return
    state_dir = os.environ.get("E2E_CLUSTER_STATE_DIR", ".cache/cluster")
    already_running = not localcluster.status(state_dir)
    started = localcluster.up(state_dir)
    yield started
    if not already_running and os.environ.get("E2E_KEEP_CLUSTER") != "1":
        localcluster.down(state_dir)


@pytest.fixture(scope="session")
def _missing_simulation(api_client: kubernetes.client.ApiClient) -> str | None:
    """Why the cluster lacks the kwok simulation, or None when it has it."""
    groups = {g.name for g in kubernetes.client.ApisApi(api_client).get_api_versions().groups}
    if "kwok.x-k8s.io" not in groups:
        return "the cluster does not serve kwok.x-k8s.io"
    nodes = {n.metadata.name for n in kubernetes.client.CoreV1Api(api_client).list_node().items}
    wanted = {d["metadata"]["name"] for d in yaml.safe_load_all((E2E_DIR / "cluster" / "nodes.yaml").read_text())}
    missing = sorted(wanted - nodes)
    return f"the cluster lacks the simulated nodes {', '.join(missing)}" if missing else None


@pytest.fixture(autouse=True)
def _skip_without_simulation(request: pytest.FixtureRequest) -> None:
    """Tests marked `kwok` skip on a cluster (E2E_KUBECONFIG) that does not run the simulation."""
    if request.node.get_closest_marker("kwok"):
        reason = request.getfixturevalue("_missing_simulation")
        if reason:
            pytest.skip(reason)


@pytest.fixture(scope="session")
def api_client(cluster: localcluster.Cluster) -> Iterator[kubernetes.client.ApiClient]:
    """An official-client ApiClient authenticated as the cluster admin."""
    with kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig)) as client:
        yield client


@pytest.fixture
def namespace(api_client: kubernetes.client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test, deleted afterwards.

    Yields once its `default` ServiceAccount exists (pods are refused before that), and
    after the test waits for its pods to be gone: the GPU nodes are shared, and a later
    test must not find them still full.
    """
    core = kubernetes.client.CoreV1Api(api_client)
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].rstrip("-")
    name = f"e2e-{slug}-{secrets.token_hex(3)}"
    core.create_namespace({"metadata": {"name": name, "labels": {"deployctl.dev/e2e": "true"}}})
    _poll(
        lambda: deployhelpers.exists(lambda: core.read_namespaced_service_account("default", name)),
        30,
        f"ServiceAccount default in namespace {name}",
    )
    yield name
    core.delete_namespace(name)
    # The namespace controller waits 5 s before it starts emptying a namespace; deleting the
    # pods ourselves frees their GPUs at once. Once the namespace is terminating, no
    # controller can create new ones.
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    _poll(lambda: not core.list_namespaced_pod(name).items, 60, f"pods of namespace {name} to be deleted")


# --- simulators ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Simulator:
    """A running vLLM simulator on 127.0.0.1."""

    port: int
    model: str
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def simulator(tmp_path: Path) -> Iterator[Callable[..., Simulator]]:
    """Start vLLM simulators on free ports; they are stopped after the test.

    `simulator(model="m", ttft_ms=50, itl_ms=10, max_num_seqs=4)` passes every keyword on as
    `--kebab-case value`; it returns once the simulator's server is listening (with
    --startup-seconds, /health still answers 503 for that long). Logs: tmp_path/sim-PORT.log.
    """
    running: list[subprocess.Popen[bytes]] = []

    def start(
        model: str = "sim-model",
        ttft_ms: float = deployhelpers.GOOD_TTFT_MS,
        itl_ms: float = deployhelpers.GOOD_ITL_MS,
        **flags: object,
    ) -> Simulator:
        port = deployhelpers.free_port()
        log = tmp_path / f"sim-{port}.log"
        argv = [
            str(SIM),
            "--port",
            str(port),
            "--model",
            model,
            "--ttft-ms",
            str(ttft_ms),
            "--itl-ms",
            str(itl_ms),
        ]
        for key, value in flags.items():
            argv += [f"--{key.replace('_', '-')}", str(value)]
        with log.open("wb") as out:
            # A session of its own, so stopping it also stops anything the launcher forked.
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        running.append(proc)

        def listening() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"simulator exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
            # Its one startup line ("listening on", or "not listening on" with --fault refuse).
            return "listening on" in log.read_text(errors="replace")

        _poll(listening, SIM_START_TIMEOUT_S, f"simulator on port {port} (log {log})")
        return Simulator(port=port, model=model, log=log)

    yield start
    for proc in running:
        _stop_group(proc)


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# --- helpers ------------------------------------------------------------------------------


def _poll(done: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.1)


# --- a namespace ready for `deployctl apply` -----------------------------------------------


@pytest.fixture
def env(
    cluster: localcluster.Cluster,
    namespace: str,
    api_client: kubernetes.client.ApiClient,
    simulator: Callable[..., Simulator],
    tmp_path: Path,
) -> Iterator[deployhelpers.ReleaseEnv]:
    """The test's namespace with a bound `models` claim and pod port 8000 forwarded to a healthy
    simulator (deployhelpers.GOOD_TTFT_MS, GOOD_ITL_MS), as deployhelpers.profile() expects."""
    deployhelpers.create_models_volume(api_client, namespace)
    good = simulator(model=deployhelpers.MODEL)
    kwoksim.forward_ports(cluster, namespace, {8000: good.port})
    yield deployhelpers.ReleaseEnv(cluster.kubeconfig, namespace, tmp_path, cluster, api_client, good.port)
    kubernetes.client.CoreV1Api(api_client).delete_persistent_volume(f"models-{namespace}"[:63])


# --- the InferenceProfile CRD ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def crd_installed(cluster: localcluster.Cluster, api_client: kubernetes.client.ApiClient) -> None:
    """deployctl's CRD applied with kubectl (server-side: reruns are idempotent) and Established."""
    from orchestrator.controller import crd

    subprocess.run(
        [
            str(components.BIN_DIR / "kubectl"),
            "--kubeconfig",
            str(cluster.kubeconfig),
            "apply",
            "--server-side",
            "-f",
            "-",
        ],
        input=yaml.safe_dump(crd.definition()),
        text=True,
        check=True,
        capture_output=True,
    )
    ext = kubernetes.client.ApiextensionsV1Api(api_client)

    def established() -> bool:
        status = ext.read_custom_resource_definition(crd.NAME).status
        return any(c.type == "Established" and c.status == "True" for c in status.conditions or [])

    _poll(established, 30, f"CRD {crd.NAME} Established")


# --- Flux (GitOps) ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def flux(cluster: localcluster.Cluster, api_client: kubernetes.client.ApiClient) -> None:
    """Skips the test unless the cluster runs Flux's source- and kustomize-controller where a git
    server on this machine's loopback reaches them: only the local cluster does (on kind or a
    real cluster they run in pods, for which 127.0.0.1 is the pod itself)."""
    if cluster.state_dir is None:
        pytest.skip("Flux tests need the local cluster: its controllers reach a git server on 127.0.0.1")
    groups = {g.name for g in kubernetes.client.ApisApi(api_client).get_api_versions().groups}
    missing = sorted({fluxhelpers.SOURCE_GROUP, fluxhelpers.KUSTOMIZE_GROUP} - groups)
    if missing:
        pytest.skip(f"the cluster does not serve {', '.join(missing)}")


@pytest.fixture
def git_server(tmp_path: Path) -> Iterator[fluxhelpers.GitServer]:
    """A git server (smart HTTP, read-only) on a free 127.0.0.1 port, its bare repositories under
    tmp_path/git; stopped after the test. `git_server.create_repo("app")` returns the URL for
    a GitRepository, `git_server.commit("app", {path: text}, "message")` the commit's sha."""
    with fluxhelpers.GitServer(tmp_path / "git") as server:
        yield server


# --- deployctl controller processes ---------------------------------------------------------------


@pytest.fixture
def controllers(env: deployhelpers.ReleaseEnv) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start `deployctl controller -n NS` processes (or `-A`, leading on a Lease in NS), with a short
    lease and resync; all stopped afterwards."""
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str = "a", *extra: str, all_namespaces: bool = False) -> subprocess.Popen[bytes]:
        log = (env.tmp / f"controller-{name}.log").open("wb")
        scope = ["-A", "--lease-namespace", env.namespace] if all_namespaces else ["-n", env.namespace]
        argv = [deployhelpers.DEPLOYCTL, "controller", *scope, "--kubeconfig", str(env.kubeconfig)]
        argv += ["--lease-seconds", "6", "--resync", "2", "--lock-ttl", "10", *extra]
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=os.environ)
        started.append(proc)
        return proc

    deployhelpers.wait_for_settled_namespaces(env.api)  # the controller's gate judges latency
    yield start
    if any(proc.poll() is None for proc in started):
        # Deleted while a controller still runs, the objects lose their finalizer and the namespace
        # can go; left behind, they would hold it in Terminating.
        subprocess.run(
            [
                *(str(components.BIN_DIR / "kubectl"), "--kubeconfig", str(env.kubeconfig)),
                *("delete", "inferenceprofiles", "--all", "-n", env.namespace, "--wait", "--timeout=60s"),
            ],
            capture_output=True,
            check=False,
        )
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
