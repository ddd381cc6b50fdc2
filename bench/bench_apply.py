"""How long does `deployctl apply` take next to kubectl and helm, on a good rollout and on a failing one?

On the local control plane (e2e/cluster/localcluster.py: real API server, controller manager and
scheduler, kwok GPU nodes, the vLLM simulator behind port-forward), in one run, each attempt in
a fresh namespace, with the profile's rendered manifests (for kubectl) or chart values (for helm):

* ``deployctl apply --skip-bench`` (plan, preflight, lock, server-side apply, watch, /health and
  /v1/models through a port-forward, release record);
* ``kubectl apply -f <rendered dir> && kubectl rollout status deployment/<name> --timeout=CAP``;
* ``helm upgrade --install --wait --timeout CAP`` of charts/vllm-inference with the values of
  ``deployctl render --format helm-values`` (``helm``), and the same with
  ``--set strategy.maxSurge=1,strategy.maxUnavailable=0`` (``helm-surge``): helm 3's ``--wait``
  counts a Deployment ready at ``replicas - maxUnavailable`` ready pods, which is 0 for the
  one-replica, no-spare-GPU strategy the profile renders to.

(a) a good rollout, ``--reps`` times per tool, the order rotated per repetition. Goal: deployctl
    within 1.2× kubectl (median). ``--ready-delay`` sets the simulated model load time.
(b) time to a failing exit of two rollouts that can never succeed:
    * unschedulable: another workload holds the GPUs of both NVLink A100 nodes, and the profile
      asks for 4 NVLink GPUs;
    * crash-loop: pods crash-loop (``sim.deployctl.dev/behavior: crash-loop``) and log a CUDA
      out-of-memory traceback (kwoksim.set_namespace_logs).
    deployctl alone first, then the three others side by side (they only wait, so running them
    together changes nothing but the benchmark's wall time). Goal: deployctl exits in under
    10 s. The others are capped at ``--cap`` seconds (default 120); unbounded they would wait
    for helm's 5-minute default timeout or the Deployment's 30-minute progress deadline.

The cluster is started (or reused) under $E2E_CLUSTER_STATE_DIR (default .cache/cluster) on the
ports of the DEPLOYCTL_CLUSTER_*_PORT variables, and stopped at the end if this run started it
(unless E2E_KEEP_CLUSTER=1). Every subprocess has a timeout; the defaults take about 5 minutes,
most of it the capped waits of (b).

``--variant LABEL=DIR`` adds to (a) ``deployctl`` importing the ``orchestrator`` package from DIR
(another revision's copy, e.g. ``git worktree add /tmp/prev HEAD~1``; charts and manifests still
come from this checkout), timed in the same rotation: a before/after in one run, under the same
load. ``--skip-helm`` leaves the two helm tools out of (a).

Usage: ``python bench/bench_apply.py [--reps N] [--cap S] [--ready-delay 1s] [--skip-good] [--skip-failing]
[--skip-helm] [--variant LABEL=DIR]...``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import pathlib
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "e2e"), str(ROOT / "e2e" / "cluster")]
import deployhelpers  # noqa: E402
import kwoksim  # noqa: E402
import localcluster  # noqa: E402

BIN = pathlib.Path(os.environ.get("DEPLOYCTL_BIN", ROOT / ".cache" / "bin"))
KUBECTL, HELM, SIM = BIN / "kubectl", BIN / "helm", BIN / "vllm-sim"
CHART = ROOT / "charts" / "vllm-inference"
RELEASE = "llm"
GOOD_RATIO_GOAL = 1.2
FAIL_FAST_GOAL_S = 10.0
CUDA_OOM_LOG = """\
INFO 11-29 10:00:01 [gpu_model_runner.py:2000] Model loading took 15.0 GiB
ERROR 11-29 10:00:09 [core.py:700] EngineCore failed to start.
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. \
GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free.
"""


@dataclasses.dataclass(frozen=True)
class Run:
    """One tool's attempt: wall seconds to its exit, exit code, and what it said last."""

    tool: str
    seconds: float
    code: int
    said: str
    phases: dict[str, float] = dataclasses.field(default_factory=dict)
    ready: str = ""  # ready/desired pods of the Deployment when the tool exited


# --- the cluster, a namespace per run, the simulator ----------------------------------------


@contextlib.contextmanager
def simulator() -> Iterator[int]:
    """A healthy vLLM simulator on a free loopback port (what pod port 8000 reaches)."""
    port = deployhelpers.free_port()
    argv = [str(SIM), "--port", str(port), "--model", deployhelpers.MODEL, "--ttft-ms", "20", "--itl-ms", "5"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the simulator did not start on port {port}")
            time.sleep(0.05)
        yield port
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextlib.contextmanager
def local_cluster() -> Iterator[localcluster.Cluster]:
    """The local cluster, started or reused; stopped afterwards only if started here."""
    state_dir = os.environ.get("E2E_CLUSTER_STATE_DIR", ".cache/cluster")
    already_running = not localcluster.status(state_dir)
    cluster = localcluster.up(state_dir)
    try:
        yield cluster
    finally:
        if not already_running and os.environ.get("E2E_KEEP_CLUSTER") != "1":
            localcluster.down(state_dir)


class Namespaces:
    """Fresh namespaces, each with a bound ``models`` claim and port 8000 forwarded to the simulator."""

    def __init__(self, cluster: localcluster.Cluster, api: kubernetes.client.ApiClient, sim_port: int) -> None:
        self.cluster, self.api, self.sim_port = cluster, api, sim_port
        self.core = kubernetes.client.CoreV1Api(api)

    @contextlib.contextmanager
    def fresh(self, purpose: str, logs: pathlib.Path | None = None) -> Iterator[str]:
        name = f"bench-{purpose}-{secrets.token_hex(3)}"
        self.core.create_namespace({"metadata": {"name": name, "labels": {"deployctl.dev/bench": "true"}}})
        try:
            _poll(lambda: deployhelpers.exists(lambda: self.core.read_namespaced_service_account("default", name)), 30)
            kubernetes.utils.create_from_yaml(self.api, yaml_objects=deployhelpers.models_volume(name))
            kwoksim.forward_ports(self.cluster, name, {8000: self.sim_port})
            if logs is not None:
                kwoksim.set_namespace_logs(self.cluster, name, logs)
            yield name
        finally:
            self._delete(name)

    def _delete(self, name: str) -> None:
        # As the e2e namespace fixture does: the GPUs must be free before the next run starts.
        self.core.delete_namespace(name)
        self.core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        with contextlib.suppress(kubernetes.client.ApiException):
            self.core.delete_persistent_volume(f"models-{name}"[:63])
        _poll(lambda: not self.core.list_namespaced_pod(name).items, 60)


def _poll(done: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout_s:.0f} s")
        time.sleep(0.1)


# --- the tools -------------------------------------------------------------------------------

TOOLS = ("deployctl", "kubectl", "helm", "helm-surge")
SURGE = "strategy.maxSurge=1,strategy.maxUnavailable=0"


def _profile(
    namespace: str, *, ready_delay: str, tp: int = 2, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """The e2e profile, with the default progress deadline (30 min): what a user would have."""
    doc = deployhelpers.profile(namespace, tp=tp)
    doc["rollout"] = {**doc["rollout"], "progressDeadlineSeconds": 1800}
    doc["placement"] = {"podAnnotations": {"sim.deployctl.dev/ready-delay": ready_delay, **(annotations or {})}}
    return doc


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:110] if lines else ""


def _timed(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> tuple[float, int, str, str]:
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL, cwd=ROOT
        )
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as e:
        code, out, err = -9, str(e.stdout or ""), f"killed by the benchmark after {timeout:.0f} s"
    return time.perf_counter() - start, code, out, err


_DEPLOYCTL_APPLY = (deployhelpers.DEPLOYCTL, "apply", "--skip-bench", "--output", "json")


def run_deployctl(
    kubeconfig: pathlib.Path, profile_path: pathlib.Path, limit: float, tool: str = "deployctl", code_dir: str = ""
) -> Run:
    """``deployctl apply``; with ``code_dir``, importing the orchestrator package found there (PYTHONPATH
    comes before the editable install) instead of this checkout's."""
    env = {**os.environ, "NO_COLOR": "1"}
    if code_dir:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (code_dir, env.get("PYTHONPATH", "")) if p)
    seconds, code, out, err = _timed(
        [*_DEPLOYCTL_APPLY, str(profile_path), "--kubeconfig", str(kubeconfig)], limit, env=env
    )
    try:
        data = json.loads(out)
    except ValueError:
        return Run(tool, seconds, code, _last_line(err))
    failure = data.get("failure") or {}
    said = f"{data.get('result')}: {failure.get('class')}" if failure else str(data.get("result"))
    return Run(tool, seconds, code, said, phases=dict(data.get("timings") or {}))


def run_kubectl(kubeconfig: pathlib.Path, namespace: str, manifests: pathlib.Path, cap: float) -> Run:
    base = [str(KUBECTL), "--kubeconfig", str(kubeconfig)]
    applied = _timed([*base, "apply", "-f", str(manifests)], 60)
    if applied[1] != 0:
        return Run("kubectl", applied[0], applied[1], _last_line(applied[3]))
    watched = _timed(
        [*base, "-n", namespace, "rollout", "status", f"deployment/{RELEASE}", f"--timeout={cap:.0f}s"], cap + 30
    )
    return Run("kubectl", applied[0] + watched[0], watched[1], _last_line(watched[3] or watched[2]))


def run_helm(kubeconfig: pathlib.Path, namespace: str, values: pathlib.Path, cap: float, *, surge: bool) -> Run:
    argv = [str(HELM), "--kubeconfig", str(kubeconfig), "-n", namespace, "upgrade", "--install", RELEASE]
    argv += [str(CHART), "-f", str(values), "--wait", "--timeout", f"{cap:.0f}s"]
    argv += ["--set", SURGE] if surge else []
    seconds, code, _, err = _timed(argv, cap + 30)
    said = _last_line(err) if code else "STATUS: deployed"  # its success text is the chart's NOTES
    return Run("helm-surge" if surge else "helm", seconds, code, said)


def render(profile_path: pathlib.Path, out: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """The manifests directory (for kubectl) and the chart values (for helm) of one profile."""
    manifests = out / "manifests"
    for argv in (["--output-dir", str(manifests)], ["--format", "helm-values", "--output-dir", str(out)]):
        done = subprocess.run(
            [deployhelpers.DEPLOYCTL, "render", str(profile_path), *argv], capture_output=True, text=True, timeout=60
        )
        if done.returncode != 0:
            raise SystemExit(f"deployctl render failed: {done.stderr}")
    return manifests, out / "values.yaml"


class Bench:
    """One benchmark run against one cluster and simulator."""

    def __init__(
        self,
        cluster: localcluster.Cluster,
        namespaces: Namespaces,
        tmp: pathlib.Path,
        cap: float,
        ready_delay: str,
        variants: dict[str, str] | None = None,
    ) -> None:
        self.kubeconfig = cluster.kubeconfig
        self.namespaces, self.tmp, self.cap, self.ready_delay = namespaces, tmp, cap, ready_delay
        self.variants = variants or {}  # label -> directory holding another revision's orchestrator/
        self.apps = kubernetes.client.AppsV1Api(namespaces.api)

    def attempt(self, tool: str, scenario: str, logs: pathlib.Path | None = None) -> Run:
        """``tool`` rolls the scenario's profile out into a fresh namespace; how long, how it ended."""
        with self.namespaces.fresh(scenario, logs) as ns:
            directory = self.tmp / ns
            directory.mkdir()
            path = deployhelpers.write_profile(directory, self._doc(scenario, ns))
            if tool == "deployctl" or tool in self.variants:
                run = run_deployctl(self.kubeconfig, path, self.cap + 60, tool, self.variants.get(tool, ""))
            else:
                manifests, values = render(path, directory)
                if tool == "kubectl":
                    run = run_kubectl(self.kubeconfig, ns, manifests, self.cap)
                else:
                    run = run_helm(self.kubeconfig, ns, values, self.cap, surge=tool == "helm-surge")
            return dataclasses.replace(run, ready=self._ready(ns))

    def _doc(self, scenario: str, ns: str) -> dict[str, Any]:
        if scenario == "unschedulable":
            return _profile(ns, ready_delay=self.ready_delay, tp=4)
        if scenario == "crash-loop":
            return _profile(ns, ready_delay=self.ready_delay, annotations={"sim.deployctl.dev/behavior": "crash-loop"})
        return _profile(ns, ready_delay=self.ready_delay)

    def _ready(self, ns: str) -> str:
        """Ready/desired pods of the Deployment when the tool exited ("removed" when it is gone)."""
        try:
            dep = self.apps.read_namespaced_deployment(RELEASE, ns)
        except kubernetes.client.ApiException as e:
            if e.status == 404:
                return "removed"
            raise
        return f"{dep.status.ready_replicas or 0}/{dep.spec.replicas}"

    def good(self, reps: int, tools: tuple[str, ...] = TOOLS) -> list[Run]:
        runs: list[Run] = []
        tools = (tools[0], *self.variants, *tools[1:])
        for rep in range(reps):
            shift = rep % len(tools)
            for tool in tools[shift:] + tools[:shift]:  # rotated, so no tool always goes first
                run = self.attempt(tool, "good")
                runs.append(run)
                print(f"  good, rep {rep + 1}: {_row(run)}", flush=True)
        return runs

    def failing(self, scenario: str) -> list[Run]:
        logs = None
        if scenario == "crash-loop":
            logs = self.tmp / "cuda-oom.log"
            logs.write_text(CUDA_OOM_LOG)
        first = self.attempt("deployctl", scenario, logs)
        print(f"  {scenario}: {_row(first)}", flush=True)
        peers: dict[str, Run] = {}

        def peer(tool: str) -> None:
            peers[tool] = self.attempt(tool, scenario, logs)

        threads = [threading.Thread(target=peer, args=(tool,)) for tool in TOOLS[1:]]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for tool in TOOLS[1:]:
            print(f"  {scenario}: {_row(peers[tool])}", flush=True)
        return [first, *(peers[tool] for tool in TOOLS[1:])]


@contextlib.contextmanager
def gpu_blocker(api: kubernetes.client.ApiClient, namespaces: Namespaces) -> Iterator[None]:
    """Another team's job holding every GPU of both NVLink A100 nodes (4 each)."""
    with namespaces.fresh("blocker") as ns:
        apps = kubernetes.client.AppsV1Api(api)
        apps.create_namespaced_deployment(
            ns,
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "batch-job"},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": {"app": "batch"}},
                    "template": {
                        "metadata": {"labels": {"app": "batch"}},
                        "spec": {
                            "nodeSelector": {
                                "deployctl.dev/nvlink": "true",
                                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                            },
                            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                            "containers": [
                                {
                                    "name": "train",
                                    "image": "registry.internal/train@sha256:" + "0" * 64,
                                    "resources": {"limits": {"nvidia.com/gpu": "4"}},
                                }
                            ],
                        },
                    },
                },
            },
        )
        _poll(lambda: (apps.read_namespaced_deployment("batch-job", ns).status.ready_replicas or 0) == 2, 60)
        yield


# --- report ----------------------------------------------------------------------------------


def _row(run: Run) -> str:
    return f"{run.tool:<10} {run.seconds:7.2f} s  exit {run.code:>3}  ready {run.ready:<7}  {run.said}"


def report_good(runs: list[Run], ready_delay: str) -> None:
    by_tool: dict[str, list[Run]] = {}
    for run in runs:
        by_tool.setdefault(run.tool, []).append(run)
    kubectl = statistics.median(r.seconds for r in by_tool["kubectl"])
    reps = len(by_tool["kubectl"])
    print(f"\n(a) good rollout (pods Ready {ready_delay} after start), {reps} runs per tool, a fresh namespace each\n")
    print(f"{'tool':<11} {'median s':>8} {'min':>6} {'max':>6} {'× kubectl':>10}  {'ready at exit':<14} exits")
    for tool, rs in by_tool.items():
        seconds = [r.seconds for r in rs]
        median = statistics.median(seconds)
        ready = ", ".join(sorted({r.ready for r in rs}))
        print(
            f"{tool:<11} {median:>8.2f} {min(seconds):>6.2f} {max(seconds):>6.2f} {median / kubectl:>10.2f}  "
            f"{ready:<14} {sorted({r.code for r in rs})}"
        )
    deployctl = by_tool["deployctl"]
    median = statistics.median(r.seconds for r in deployctl)
    verdict = "met" if median / kubectl <= GOOD_RATIO_GOAL else "MISSED"
    print(
        f"goal deployctl ≤ {GOOD_RATIO_GOAL}× kubectl: {verdict} ({median / kubectl:.2f}×, {median - kubectl:+.2f} s)"
    )
    for tool, rs in by_tool.items():
        phases = sorted({p for r in rs for p in r.phases})
        if not phases:
            continue
        medians = {p: statistics.median(r.phases.get(p, 0.0) for r in rs) for p in phases}
        outside = statistics.median(r.seconds for r in rs) - sum(medians.values())
        print(
            f"{tool} phases (median s): "
            + ", ".join(f"{p} {v:.2f}" for p, v in medians.items())
            + f"; outside the phases (start-up, imports, lock, exit) {outside:.2f}"
        )


def report_failing(results: dict[str, list[Run]], cap: float) -> None:
    print(f"\n(b) time to a failing exit (helm and kubectl capped at {cap:.0f} s; pods never become Ready)\n")
    print(f"{'scenario':<14} {'tool':<11} {'seconds':>8} {'exit':>5}  {'ready at exit':<14} said")
    for scenario, runs in results.items():
        for run in runs:
            print(f"{scenario:<14} {run.tool:<11} {run.seconds:>8.2f} {run.code:>5}  {run.ready:<14} {run.said}")
    for scenario, runs in results.items():
        first = runs[0]
        met = first.code != 0 and first.seconds < FAIL_FAST_GOAL_S
        print(f"goal deployctl fails {scenario} in < {FAIL_FAST_GOAL_S:.0f} s: {'met' if met else 'MISSED'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3, help="good rollouts per tool (default 3)")
    parser.add_argument("--cap", type=float, default=120.0, help="helm/kubectl timeout in (b), seconds")
    parser.add_argument("--ready-delay", default="1s", help="simulated model load time of (a), e.g. 10s")
    parser.add_argument("--skip-good", action="store_true", help="skip (a)")
    parser.add_argument("--skip-failing", action="store_true", help="skip (b)")
    parser.add_argument("--skip-helm", action="store_true", help="leave helm and helm-surge out of (a)")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="also time deployctl with the orchestrator package of DIR in (a), as LABEL (repeatable)",
    )
    args = parser.parse_args()
    variants: dict[str, str] = {}
    for spec in args.variant:
        label, sep, directory = spec.partition("=")
        if not sep or not label or label in (*TOOLS, *variants):
            raise SystemExit(f"--variant {spec}: give LABEL=DIR with a label of its own")
        package = pathlib.Path(directory) / "orchestrator"
        if not ((package / "cli.py").is_file() or (package / "cli" / "__init__.py").is_file()):
            raise SystemExit(f"--variant {spec}: {directory}/orchestrator holds no cli module")
        variants[label] = directory
    build = subprocess.run(["bash", str(ROOT / "e2e" / "cluster" / "build.sh"), "sim", "kubectl", "helm"])
    if build.returncode != 0:
        raise SystemExit("building vllm-sim, kubectl and helm failed (needs Go >= 1.26); see above")
    started = time.monotonic()
    with (
        local_cluster() as cluster,
        kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig)) as api,
        simulator() as sim_port,
        tempfile.TemporaryDirectory(prefix="bench-apply-") as tmp,
    ):
        namespaces = Namespaces(cluster, api, sim_port)
        bench = Bench(cluster, namespaces, pathlib.Path(tmp), args.cap, args.ready_delay, variants)
        tools = TOOLS[:2] if args.skip_helm else TOOLS
        good = [] if args.skip_good else bench.good(args.reps, tools)
        failing: dict[str, list[Run]] = {}
        if not args.skip_failing:
            with gpu_blocker(api, namespaces):
                failing["unschedulable"] = bench.failing("unschedulable")
            failing["crash-loop"] = bench.failing("crash-loop")
    print(f"\nbench_apply: {time.monotonic() - started:.0f} s in all; kubectl and helm from {KUBECTL.parent}")
    if good:
        report_good(good, args.ready_delay)
    if failing:
        report_failing(failing, args.cap)
    return 0


if __name__ == "__main__":
    sys.exit(main())
