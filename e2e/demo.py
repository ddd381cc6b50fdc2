"""`make demo`: deployctl's main job, end to end, on a local cluster with simulated GPU nodes.

    .venv/bin/python e2e/demo.py          # what `make demo` runs after `make venv build`

The story: plan the production profile, deploy it (progress, health, smoke benchmark,
revision 1), ship a good change (revision 2), ship a change that misses its SLO (automatic
rollback), try a profile the cluster cannot host (refused before anything is applied), read the
history, roll back to revision 1 by hand, and verify the audit chain. Every step runs the real
`deployctl` command line as a subprocess and shows its output; the demo checks each exit code
and the key lines, and exits 1 at the first step that does not behave as narrated.

What is real: deployctl, etcd, kube-apiserver, kube-controller-manager and kube-scheduler (the
upstream binaries e2e/cluster/build.sh builds). What is simulated: the GPU nodes (kwok plays
their kubelet; no container runs) and the model server (e2e/sim, a vLLM-compatible simulator
with fixed latencies, no model, no GPU), reached through the API server's port-forward as a
real pod would be.

Environment:
  DEMO_DIR               transcript, profiles, simulator logs, audit export (default .cache/demo)
  DEMO_KEEP_CLUSTER=1    leave the cluster and simulators running at the end, to explore
  E2E_CLUSTER_STATE_DIR  the cluster's state directory; unset: .cache/cluster-demo on ports of
                         its own, so the demo never touches a test run's cluster (.cache/cluster).
                         Set: that cluster, on DEPLOYCTL_CLUSTER_*_PORT or the harness's default
                         ports, exactly as the e2e suite would use it (a running one is reused and
                         left running, only the demo's namespace is removed)
"""

from __future__ import annotations

import contextlib
import difflib
import json
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

ROOT = Path(__file__).resolve().parent.parent
E2E = ROOT / "e2e"
sys.path.insert(0, str(E2E / "cluster"))
sys.path.insert(0, str(E2E / "realvllm"))
sys.path.insert(0, str(E2E))
import kubernetes  # noqa: E402
import kwoksim  # noqa: E402
import localcluster  # noqa: E402
import server as realvllm  # noqa: E402 (e2e/realvllm: the real vLLM tier, when `make vllm` installed it)
import shipped  # noqa: E402
from deployhelpers import create_models_volume, exists, free_port, models_volume  # noqa: E402

DEPLOYCTL = Path(sys.executable).parent / "deployctl"
SIM = E2E / "sim"
PROFILE = ROOT / "profiles" / "prod-tp4.yaml"
RELEASE = "llama3-70b"
NAMESPACE = "inference"  # prod-tp4.yaml's own
DEMO_LABEL = "deployctl.dev/demo"
MODEL = "meta-llama/Meta-Llama-3-70B-Instruct"
SLOW_IMAGE_DIGEST = "9e8d7c6b" * 8  # the "new vLLM build" of revision 3

# The demo's own cluster: a state directory and ports apart from the test suite's defaults
# (.cache/cluster on 23790/23791/64430-64433), so `make demo` and `make test` can run at once.
DEMO_STATE_DIR = ".cache/cluster-demo"
DEMO_PORTS = {
    "ETCD": 24790,
    "ETCD_PEER": 24791,
    "APISERVER": 63440,
    "KWOK": 63441,
    "CONTROLLER_MANAGER": 63442,
    "SCHEDULER": 63443,
}
# The simulators: latencies of a healthy 70B server on 4 A100s, and one whose first token is slower
# than prod-tp4's SLO (p95 TTFT <= 1500 ms). 20 ms per token also keeps the token rate the
# benchmark client must keep up with modest, on a machine the control plane shares with it.
GOOD_SIM = {"ttft_ms": 100, "itl_ms": 20}
SLOW_SIM = {"ttft_ms": 2000, "itl_ms": 20}
STEP_TIMEOUT_S = 240.0  # one deployctl command; a hung step fails the demo instead of hanging it
WIDTH = 96


class DemoFailed(Exception):
    """A step did not behave as narrated."""


@dataclass
class Step:
    title: str
    ok: bool
    seconds: float


@dataclass
class Demo:
    out: TextIO
    transcript: TextIO
    kubeconfig: Path
    directory: Path
    steps: list[Step] = field(default_factory=list)

    # --- printing ---------------------------------------------------------------------------

    def say(self, text: str = "") -> None:
        """Narration: wrapped paragraphs (blank lines separate them)."""
        for para in textwrap.dedent(text).strip("\n").split("\n\n"):
            if para.startswith("  "):  # pre-formatted (a list, a command)
                self._write(para + "\n\n")
            else:
                self._write(textwrap.fill(" ".join(para.split()), WIDTH, break_on_hyphens=False) + "\n\n")

    def chapter(self, number: int, title: str) -> None:
        self._write("\n" + f"── {number}. {title} ".ljust(WIDTH, "─") + "\n\n")

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()
        self.transcript.write(text)
        self.transcript.flush()

    # --- running deployctl ------------------------------------------------------------------

    def deployctl(
        self,
        title: str,
        args: Sequence[str],
        *,
        code: int,
        expect: Sequence[str] = (),
        check: Callable[[str], str | None] | None = None,
    ) -> str:
        """Run `deployctl ARGS`, show its output, and check its exit code and key lines.

        ``check`` gets the output and returns a problem (or None) for checks beyond substrings.
        """
        shown = "deployctl " + " ".join(shlex.quote(self._rel(a)) for a in args)
        self._write(f"$ {shown}\n")
        started = time.monotonic()
        proc = subprocess.Popen(
            [str(DEPLOYCTL), *args],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig), "NO_COLOR": "1"},
        )
        assert proc.stdout is not None
        lines: list[str] = []
        deadline = started + STEP_TIMEOUT_S
        with _kill_after(proc, deadline):
            for line in proc.stdout:
                lines.append(line)
                self._write("  " + line)
            proc.wait()
        elapsed = time.monotonic() - started
        text = "".join(lines)
        problems = []
        if proc.returncode != code:
            problems.append(f"exit code {proc.returncode}, expected {code}")
        problems += [f"no line says {want!r}" for want in expect if want not in text]
        if check is not None and (extra := check(text)):
            problems.append(extra)
        if problems and "smoke gate: inconclusive" in text:
            problems.append(
                "the smoke gate was inconclusive: the benchmark client could not keep up on this machine "
                "(it shares the CPUs with the control plane and the simulators); rerun when it is less busy"
            )
        self.steps.append(Step(title, not problems, elapsed))
        mark = "ok" if not problems else "NOT AS NARRATED: " + "; ".join(problems)
        self._write(f"  [exit {proc.returncode}, {elapsed:.1f} s — {mark}]\n\n")
        if problems:
            raise DemoFailed(f"step '{title}' ({shown}): {'; '.join(problems)}")
        return text

    def diff(self, before: Path, after: Path) -> None:
        """Show what a profile changes, as `diff -u` would."""
        lines = difflib.unified_diff(
            before.read_text().splitlines(),
            after.read_text().splitlines(),
            fromfile=self._rel(str(before)),
            tofile=self._rel(str(after)),
            lineterm="",
            n=0,
        )
        self._write("".join(f"  {line}\n" for line in lines) + "\n")

    def _rel(self, arg: str) -> str:
        try:
            return str(Path(arg).relative_to(ROOT)) if Path(arg).is_absolute() else arg
        except ValueError:
            return arg


@contextlib.contextmanager
def _kill_after(proc: subprocess.Popen[str], deadline: float) -> Iterator[None]:
    """Kill ``proc`` if it runs past ``deadline`` (its output loop then ends)."""

    def on_alarm(_signum: int, _frame: object) -> None:
        proc.kill()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(0.1, deadline - time.monotonic()))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --- profiles -------------------------------------------------------------------------------


def _edit(text: str, pattern: str, replacement: str) -> str:
    new, count = re.subn(pattern, replacement, text, count=1, flags=re.M)
    if count != 1:
        raise DemoFailed(f"profiles/prod-tp4.yaml has no line matching {pattern!r}; update e2e/demo.py")
    return new


def write_profiles(directory: Path) -> dict[str, Path]:
    """The demo's later profiles: copies of profiles/prod-tp4.yaml a line or two apart, comments kept."""
    directory.mkdir(parents=True, exist_ok=True)
    base = PROFILE.read_text()
    if f"namespace: {NAMESPACE}\n" not in base:
        raise DemoFailed(f"profiles/prod-tp4.yaml no longer deploys to namespace {NAMESPACE}; update e2e/demo.py")
    more_seqs = _edit(base, r"^(\s+maxNumSeqs:) 64$", r"\1 96")
    slow = _edit(more_seqs, r"(vllm-openai@sha256:)[0-9a-f]{64}$", rf"\g<1>{SLOW_IMAGE_DIGEST}")
    slow = _edit(slow, r"^(\s+)(tensorParallelSize: 4)$", r"\1\2\n\1port: 8001")
    tp8 = _edit(more_seqs, r"^(\s+tensorParallelSize:) 4$", r"\1 8")
    tp8 = _edit(tp8, r"^(\s+gpusPerNode:) 4$", r"\1 8")
    files = {"rev2": more_seqs, "slow": slow, "tp8": tp8}
    names = {
        "rev2": "prod-tp4-96seqs.yaml",
        "slow": "prod-tp4-new-image.yaml",
        "tp8": "prod-tp8.yaml",
    }
    paths = {"rev1": PROFILE}
    for key, text in files.items():
        path = directory / names[key]
        path.write_text(text)
        paths[key] = path
    return paths


# --- cluster, namespace, simulators ---------------------------------------------------------


def cluster_state_dir() -> str:
    """The cluster's state directory; the demo's own ports unless the caller chose a cluster."""
    chosen = os.environ.get("E2E_CLUSTER_STATE_DIR")
    if chosen:
        return chosen
    for name, port in DEMO_PORTS.items():
        os.environ.setdefault(f"DEPLOYCTL_CLUSTER_{name}_PORT", str(port))
    return DEMO_STATE_DIR


@dataclass
class Simulators:
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    real: tuple[int, Path, subprocess.Popen[bytes]] | None = None  # the real vLLM's port, log and process

    def start(self, log: Path, **flags: object) -> int:
        port = free_port()
        argv = [str(SIM), "--port", str(port), "--model", MODEL]
        for key, value in flags.items():
            argv += [f"--{key.replace('_', '-')}", str(value)]
        with log.open("wb") as out:
            # A session of its own so that stopping it stops whatever the launcher started.
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.procs.append(proc)
        deadline = time.monotonic() + 600  # a cold build of the simulator included
        while "listening on" not in log.read_text(errors="replace"):
            if proc.poll() is not None:
                raise DemoFailed(f"the simulator exited with {proc.returncode}; see {log}")
            if time.monotonic() > deadline:
                raise DemoFailed(f"the simulator did not start within 600 s; see {log}")
            time.sleep(0.1)
        return port

    def start_real(self, log: Path) -> int:
        """A real vLLM (the CPU build, a tiny local Llama) under the 70B model's served name; it
        loads while the cluster starts, and wait_real() waits for /health."""
        port = realvllm.free_port()
        proc = realvllm.start(port, "--max-model-len", "2048", log=log, served_model_name=MODEL)
        self.procs.append(proc)
        self.real = (port, log, proc)
        return port

    def wait_real(self) -> None:
        assert self.real is not None
        port, log, proc = self.real
        url = f"http://{realvllm.HOST}:{port}"
        try:
            realvllm.wait_healthy(url, 300, proc, log)
        except (RuntimeError, TimeoutError) as e:
            raise DemoFailed(f"the real vLLM server did not start: {e}") from e
        # A production server has served before its first smoke run; a fresh CPU build is slower on
        # its first prompts of a new length (its kernels are built on first use), which would put a
        # cold start into the gate's p95 TTFT. Two prompts of the smoke run's length warm it first.
        body = json.dumps({"model": MODEL, "prompt": "hello " * 500, "max_tokens": 4}).encode()
        for _ in range(2):
            request = urllib.request.Request(
                url + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=120) as answer:
                    answer.read()
            except OSError as e:
                raise DemoFailed(f"the real vLLM server did not answer a warm-up prompt: {e}") from e

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        self.procs.clear()


def _poll(done: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise DemoFailed(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)


def remove_namespace(api: kubernetes.client.ApiClient) -> None:
    """Delete the demo's namespace and volume (left by an interrupted run, or at the end).

    A namespace of that name the demo did not create (no DEMO_LABEL) is someone's work: the
    demo stops instead of deleting it.
    """
    core = kubernetes.client.CoreV1Api(api)
    pv = models_volume(NAMESPACE)[0]["metadata"]["name"]
    try:
        existing = core.read_namespace(NAMESPACE)
    except kubernetes.client.ApiException as e:
        if e.status != 404:
            raise
        existing = None
    if existing is not None:
        if (existing.metadata.labels or {}).get(DEMO_LABEL) != "true":
            raise DemoFailed(
                f"namespace {NAMESPACE} exists on this cluster and was not created by the demo; "
                "run the demo on its own cluster (unset E2E_CLUSTER_STATE_DIR)"
            )
        core.delete_namespace(NAMESPACE)
        # Free the GPUs at once; the namespace controller takes its time.
        core.delete_collection_namespaced_pod(NAMESPACE, grace_period_seconds=0)
        _poll(lambda: not exists(lambda: core.read_namespace(NAMESPACE)), 120, f"namespace {NAMESPACE} to go")
    if exists(lambda: core.read_persistent_volume(pv)):
        core.delete_persistent_volume(pv)


def prepare_namespace(api: kubernetes.client.ApiClient, cluster: localcluster.Cluster, ports: dict[int, int]) -> None:
    """What a platform team provides before the first deploy: the namespace and the weights volume."""
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": NAMESPACE, "labels": {DEMO_LABEL: "true"}}})
    _poll(
        lambda: exists(lambda: core.read_namespaced_service_account("default", NAMESPACE)),
        60,
        f"the default ServiceAccount of {NAMESPACE}",
    )
    create_models_volume(api, NAMESPACE)
    kwoksim.forward_ports(cluster, NAMESPACE, ports)


# --- the story ------------------------------------------------------------------------------


def story(demo: Demo, paths: dict[str, Path], slow_port: int, good_port: int, real: Callable[[], None] | None) -> None:
    """The chapters; ``real`` (when the real vLLM tier is installed) moves revision 1's traffic,
    which a real vLLM served, back to the simulator once revision 1 has been looked at."""
    ns = ["-n", NAMESPACE]

    demo.chapter(2, "Plan: does Llama 3 70B fit four A100-80GB?")
    demo.say(
        """
        profiles/prod-tp4.yaml is the production profile: Llama 3 70B Instruct, tensor parallel over
        the 4 NVLink-connected A100-80GB of one node, 8K context, 64 concurrent sequences, fp8 KV
        cache. `plan` needs no cluster: it does vLLM's own start-up memory accounting per GPU
        (weights, activations, CUDA graphs, what is left for the KV cache) and says how many
        full-length sequences fit.
        """
    )
    text = demo.deployctl(
        "plan",
        ["plan", "profiles/prod-tp4.yaml"],
        code=0,
        expect=["verdict: FITS"],
        check=lambda out: None if _CONCURRENCY.search(out) else "no 'max concurrency at 8,192 tokens' line",
    )
    found = _CONCURRENCY.search(text)
    fits = int(float(found.group(1))) if found else 0
    demo.say(
        f"""
        Exit 0: it fits, with room for {fits} sequences of 8,192 tokens at once, so maxNumSeqs 64
        is safe. (The warning is real advice: A100 has no native fp8, so an fp8 KV cache halves
        memory but does not speed attention up.)
        """
    )

    demo.chapter(3, "The cluster deployctl sees")
    demo.deployctl("inventory", ["inventory"], code=0, expect=["NVIDIA-A100-SXM4-80GB"])
    demo.say(
        f"""
        The GPU pools, with what is free. The demo has also created what a platform team
        provides before a first deploy: namespace {NAMESPACE} and the PersistentVolumeClaim
        `models` that holds the weights (kwok runs no containers, so nothing is ever read from
        it).
        """
    )

    demo.chapter(4, "Deploy revision 1")
    demo.say(
        """
        profiles/prod-tp4.yaml itself, unchanged: production's gate, SLOs and smoke load.
        `apply` runs plan → preflight (which nodes can host a TP=4 replica, and which rollout
        strategy the free GPUs allow) → lock → server-side apply → watch the rollout → /health and
        /v1/models on every new pod → a smoke benchmark through the serving path (16 streams,
        64 requests, checked against the SLOs p95 TTFT ≤ 1500 ms, median TPOT ≤ 40 ms, error rate
        ≤ 1 %) → record revision 1. Without a terminal, progress is plain timestamped lines.
        """
    )
    if real is not None:
        demo.say(
            """
            This revision is served by a real vLLM: the CPU build of vLLM 0.32 on this machine,
            loading a tiny Llama built locally under the 70B model's served name. /health,
            /v1/models and the smoke benchmark go through the API server's port-forward to it, and
            the pod's log is vLLM's own start-up log, which deployctl reads back: the planner sized
            80 GB GPUs, vLLM reports the 1 GiB CPU KV cache, and the warning says so.
            """
        )
    demo.deployctl(
        "apply revision 1",
        ["apply", str(paths["rev1"])],
        code=0,
        expect=[
            "DEPLOYED: revision 1 of llama3-70b is deployed (install)",
            "smoke gate: pass",
            "time to serving: ",
        ],
    )
    demo.say(
        """
        The first install had no old pod to keep serving, hence "one-at-a-time". The "time to
        serving" line says how long the revision took from the write to its first token and where
        the time went: the pod's scheduling, image pull, container start and engine start on the
        API server's clock, and inside the engine start the phases the engine itself logged. It is
        stored in the release record. What runs now, as the on-call engineer would look at it:
        """
    )
    demo.deployctl(
        "status",
        ["status", RELEASE, *ns],
        code=0,
        expect=["live revision 1 (install)", "replicas: 1/1 ready", "gate: pass", "time to serving: "],
    )
    if real is not None:
        real()
        demo.say("From revision 2 on, the pods' port reaches the simulator again: its latencies are exact.")

    demo.chapter(5, "A good change: revision 2")
    demo.say(
        f"""
        The plan said {fits} full-length sequences fit, so the team raises maxNumSeqs to 96. A
        second NVLink A100 node has 4 free GPUs, so preflight picks a surge rollout: the new pod
        starts beside the old one and nothing stops serving.
        """
    )
    demo.diff(paths["rev1"], paths["rev2"])
    demo.deployctl(
        "apply revision 2",
        ["apply", str(paths["rev2"])],
        code=0,
        expect=[
            "revision 2 of llama3-70b is deployed (upgrade from revision 1)",
            "strategy: surge",
            "time to serving: ",
        ],
    )

    demo.chapter(6, "A change that misses its SLO: automatic rollback")
    demo.say(
        f"""
        Revision 3 is a new vLLM image. It starts and answers /health, but its first token is
        slow. In this simulation the slowness is wired up: revision 3's pods serve on port 8001,
        and kwok forwards pod port 8001 to a second simulator whose time to first token is
        {SLOW_SIM["ttft_ms"]:,} ms (port 8000, which revisions 1 and 2 use, reaches a simulator with
        {GOOD_SIM["ttft_ms"]} ms TTFT). Local ports: good {good_port}, slow {slow_port}.
        """
    )
    demo.diff(paths["rev2"], paths["slow"])
    demo.deployctl(
        "apply a slow revision",
        ["apply", str(paths["slow"])],
        code=6,
        expect=["FAILED (slo_failed)", "p95_ttft_ms", "rolled back to revision 2"],
    )
    demo.say(
        """
        The rollout itself succeeded; the smoke gate measured p95 TTFT above 1,500 ms and
        failed. deployctl recorded revision 3 as failed, re-applied revision 2's stored bytes,
        watched that rollout, health-checked it and recorded it as revision 4. Exit code 6 means
        "the gate failed and the release was rolled back": a pipeline can branch on it.
        """
    )

    demo.chapter(7, "A profile the cluster cannot host: refused by preflight")
    demo.say(
        """
        Someone wants TP=8 for more KV cache. On paper it fits (8 × A100-80GB), and `validate`,
        which needs no cluster, says so. But this cluster's A100 nodes have 4 GPUs each; its 8-GPU nodes have H100s.
        Preflight reads the nodes and refuses before anything is written: the live revision keeps
        serving, and no release record is added.
        """
    )
    demo.diff(paths["rev2"], paths["tp8"])
    demo.deployctl(
        "validate TP=8",
        ["validate", str(paths["tp8"])],
        code=0,
        expect=["valid; fits (llama3-70b, TP=8, A100-80GB)"],
    )
    demo.deployctl(
        "apply TP=8 (refused)",
        ["apply", str(paths["tp8"])],
        code=5,
        expect=["REFUSED", "8 GPUs"],
    )

    demo.chapter(8, "History: what happened, by whom")
    demo.deployctl(
        "history",
        ["history", RELEASE, *ns],
        code=0,
        check=_history_is(["superseded", "superseded", "failed", "deployed"]),
    )
    demo.say(
        """
        Every apply is a numbered release stored in the cluster next to the workload: the exact
        rendered manifests, the profile, the plan, the gate report, the time to serving (SERVING),
        who and when. Revision 4 is revision 2's bytes, re-applied by the automatic rollback.
        """
    )

    demo.chapter(9, "On call: roll back to revision 1")
    demo.say(
        """
        Say the 96-sequence change turns out to hurt at peak, and the on-call engineer wants the
        original back. `rollback` needs only a kubeconfig, not the profile or the repository: it
        checks revision 1's record against the hash chain, re-applies its stored manifests,
        watches the rollout, health-checks the pods and records revision 5.
        """
    )
    demo.deployctl(
        "rollback --to 1",
        ["rollback", RELEASE, *ns, "--to", "1"],
        code=0,
        expect=["revision 5 of llama3-70b is live: rollback to 1"],
    )
    demo.deployctl(
        "status",
        ["status", RELEASE, *ns],
        code=0,
        expect=["live revision 5 (rollback to 1)", "replicas: 1/1 ready", "last failure: revision 3"],
    )

    demo.chapter(10, "Audit: is the record intact?")
    demo.say(
        """
        Records are immutable ConfigMaps chained by hash. `audit verify` walks the chain; an edited
        or deleted record is reported with its revision (exit 9). An export kept outside the
        cluster anchors the chain against someone who can rewrite the newest records.
        """
    )
    demo.deployctl("audit verify", ["audit", "verify", RELEASE, *ns], code=0, expect=["OK: 5 records"])
    export = demo.directory / "audit-export.json"
    demo.deployctl("audit export", ["audit", "export", RELEASE, *ns, "--output-file", str(export)], code=0)
    demo.deployctl(
        "audit verify --against",
        ["audit", "verify", RELEASE, *ns, "--against", str(export)],
        code=0,
        expect=["OK: 5 records"],
    )


_CONCURRENCY = re.compile(r"max concurrency at 8,192 tokens\s+([0-9.]+)×")


def _history_is(statuses: list[str]) -> Callable[[str], str | None]:
    def check(text: str) -> str | None:
        rows = [line.split() for line in text.splitlines() if re.match(r"\s*\d+\s", line)]
        found = [row[1] for row in rows]
        return None if found == statuses else f"statuses {found}, expected {statuses}"

    return check


# --- main -----------------------------------------------------------------------------------


def main() -> int:
    wrong = shipped.problems()
    if wrong and os.environ.get(shipped.FROM_CHECKOUT_ENV) != "1":
        print(
            "demo: it shows the deployctl users install, the wheel in .cache/wheel-venv; here: "
            + "; ".join(wrong)
            + ". Run `make demo`.",
            file=sys.stderr,
        )
        return 2
    started = time.monotonic()
    directory = Path(os.environ.get("DEMO_DIR", ROOT / ".cache" / "demo")).resolve()
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    keep = os.environ.get("DEMO_KEEP_CLUSTER") == "1"
    state_dir = cluster_state_dir()
    transcript = (directory / "demo.log").open("w")
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(name)s: %(message)s",
        handlers=[logging.FileHandler(directory / "cluster.log")],
    )
    signal.signal(signal.SIGTERM, _interrupt)  # a CI timeout tears down as Ctrl-C does
    sims = Simulators()
    demo: Demo | None = None
    cluster_started = False
    api: kubernetes.client.ApiClient | None = None
    failure: str | None = None
    try:
        intro = Demo(sys.stdout, transcript, Path(), directory)
        intro.chapter(1, "A local cluster with simulated GPU nodes")
        intro.say(
            f"""
            Real: deployctl, and a Kubernetes control plane on this machine — etcd,
            kube-apiserver, kube-controller-manager, kube-scheduler, and KubeRay's ray-operator for
            copies that span nodes, built from upstream sources (cached in .cache/bin). Simulated:
            the nodes (kwok plays their kubelet, so pods go Running and Ready but no container
            runs; two 4-GPU A100 NVLink nodes, one 4-GPU A100
            PCIe node, five 8-GPU H100 nodes, one CPU node) and the inference server (e2e/sim, a
            vLLM-compatible simulator with fixed latencies: no model, no GPU), reached through
            the API server's port-forward exactly as a real pod would be.

            Cluster state: {state_dir} (component logs in its logs/).
            """
        )
        if realvllm.available():  # it loads while the cluster starts
            sims.start_real(directory / "vllm.log")
            intro.say("The real vLLM tier is installed (`make vllm`): a real vLLM server will serve revision 1.")
        t0 = time.monotonic()
        cluster_started = bool(localcluster.status(state_dir))
        cluster = localcluster.up(state_dir)
        intro.say(
            f"""
            The cluster is up ({"started" if cluster_started else "reused"} in
            {time.monotonic() - t0:.1f} s). Starting two simulators: a good one ({GOOD_SIM["ttft_ms"]} ms to
            the first token, {GOOD_SIM["itl_ms"]} ms per token) and a slow one ({SLOW_SIM["ttft_ms"]:,} ms to
            the first token).
            """
        )
        good = sims.start(directory / "sim-good.log", **GOOD_SIM)
        slow = sims.start(directory / "sim-slow.log", **SLOW_SIM)
        first = sims.real[0] if sims.real else good
        api = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig))
        remove_namespace(api)
        prepare_namespace(api, cluster, {8000: first, 8001: slow})
        back_to_simulator = None
        if sims.real is not None:
            sims.wait_real()
            kwoksim.set_namespace_logs(cluster, NAMESPACE, sims.real[1])

            def back_to_simulator() -> None:
                kwoksim.forward_ports(cluster, NAMESPACE, {8000: good, 8001: slow})
                kwoksim.set_namespace_logs(cluster, NAMESPACE, directory / "sim-good.log")

        paths = write_profiles(directory / "profiles")
        demo = Demo(sys.stdout, transcript, cluster.kubeconfig, directory)
        story(demo, paths, slow_port=slow, good_port=good, real=back_to_simulator)
    except DemoFailed as e:
        failure = str(e)
    except KeyboardInterrupt:
        failure = "interrupted"
    except (localcluster.ClusterError, kubernetes.client.ApiException, OSError) as e:
        failure = f"{type(e).__name__}: {e}"
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # let the teardown finish
        teardown = _teardown(keep, cluster_started, state_dir, api, sims)
        if teardown:  # said in the summary instead of "everything stopped"
            failure = (failure + "; " if failure else "") + teardown
    out = Demo(sys.stdout, transcript, Path(), directory)
    out.chapter(11, "Done" if failure is None else "The demo FAILED")
    steps = demo.steps if demo else []
    summary = "\n".join(f"  {'ok ' if s.ok else 'BAD'} {s.seconds:6.1f} s  {s.title}" for s in steps)
    if summary:
        out._write(summary + "\n\n")
    if failure is None:
        out.say(f"All {len(steps)} steps behaved as narrated, in {time.monotonic() - started:.0f} s.")
    else:
        out.say(f"Not as narrated: {failure}")
    where = _rel(directory)
    state = _rel(Path(state_dir) if Path(state_dir).is_absolute() else ROOT / state_dir)
    out.say(
        f"""
        Logs and reports:

          {where}/demo.log            this transcript
          {where}/profiles/           the profiles the demo applied
          {where}/audit-export.json   the release chain, as an auditor would keep it
          {where}/sim-*.log           the two simulators
          {where}/cluster.log         the cluster's start and stop
          {state}/logs/      each component's log (etcd, kube-apiserver, kwok, ...)
        """
    )
    if keep:
        out.say(
            f"""
            The cluster and the simulators are still running (DEMO_KEEP_CLUSTER=1). Explore with
            `export KUBECONFIG={state}/kubeconfig` and `deployctl status {RELEASE} -n {NAMESPACE}`;
            stop the cluster with `.venv/bin/python e2e/cluster/localcluster.py down --state-dir
            {state}` and the simulators with `kill {" ".join(str(p.pid) for p in sims.procs)}`.
            """
        )
    elif not teardown:
        out.say("Everything the demo started has been stopped. Next: README.md, docs/getting-started.md.")
    transcript.close()
    return 0 if failure is None else 1


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _teardown(
    keep: bool,
    cluster_started: bool,
    state_dir: str,
    api: kubernetes.client.ApiClient | None,
    sims: Simulators,
) -> str | None:
    """Stop what the demo started; a cluster it reused keeps running, without the demo's namespace."""
    if keep:
        return None
    problems = []
    if api is not None and not cluster_started:
        try:
            remove_namespace(api)
        except (DemoFailed, kubernetes.client.ApiException, OSError) as e:
            problems.append(f"could not remove namespace {NAMESPACE}: {e}")
    if api is not None:
        api.close()
    sims.stop()
    if cluster_started:
        try:
            localcluster.down(state_dir)
        except localcluster.ClusterError as e:
            problems.append(f"could not stop the cluster: {e}")
    return "; ".join(problems) or None


def _rel(path: Path) -> Path:
    try:
        return path.relative_to(ROOT)
    except ValueError:
        return path


if __name__ == "__main__":
    sys.exit(main())
