"""Helpers of the deployctl end-to-end tests: profiles for the test cluster, running the CLI.

Profiles here are the example profiles' shape with test-sized settings (seconds, not minutes),
written per test into its namespace. The CLI runs as a real process, the way a CI step or an
on-call engineer runs it, so exit codes, output and signals are the real ones.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")
DEPLOYCTL = str(Path(sys.executable).parent / "deployctl")
IMAGE = "registry.internal/vllm/vllm-openai@sha256:" + "4f1c7b0d" * 8
MODEL = "sim-model"
# The healthy simulator's pace. A smoke request then lasts about 0.3 s (20 ms to the first token,
# 15 more at 20 ms): with 5 ms per token it lasted 95 ms, so the ~12 ms a loaded 2-core CI machine
# takes between one stream's end and the next send kept fewer than the gate's 90 % of the streams
# in flight, and the run was judged client-bound (inconclusive) instead of pass.
GOOD_TTFT_MS, GOOD_ITL_MS = 20, 20


def profile(namespace: str, name: str = "llm", *, tp: int = 2, port: int = 8000, **sections: Any) -> dict[str, Any]:
    """A profile dict for the test cluster; keyword sections are merged one level deep."""
    doc: dict[str, Any] = {
        "apiVersion": "deployctl/v1",
        "kind": "InferenceProfile",
        "metadata": {"name": name, "namespace": namespace},
        "model": {
            "name": MODEL,
            "architecture": "llama-3-8b",
            "source": {"pvc": "models", "path": "/models/llama3-8b"},
        },
        "engine": {
            "image": IMAGE,
            "tensorParallelSize": tp,
            "maxModelLen": 4096,
            "maxNumSeqs": 32,
            "port": port,
        },
        "hardware": {"gpu": "A100-80GB", "gpusPerNode": 4},
        "placement": {"podAnnotations": {"sim.deployctl.dev/ready-delay": "1s"}},
        "rollout": {"replicas": 1, "allowDowntime": True, "progressDeadlineSeconds": 120},
        "gate": {
            "health": {"timeoutSeconds": 20},
            "smoke": {
                "concurrency": 4,
                "requests": 16,
                "warmup": 1,
                "inputTokens": 64,
                "outputTokens": 16,
                "minSamples": 8,
                "timeoutSeconds": 60,
                "slo": {"p95_ttft_ms": "<=500", "median_tpot_ms": "<=50", "error_rate": "<=0.05"},
            },
        },
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key] = {**doc[key], **value}
        else:
            doc[key] = value
    return doc


def write_profile(directory: Path, doc: dict[str, Any], filename: str = "profile.yaml") -> Path:
    path = directory / filename
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)


def deployctl(kubeconfig: Path, *args: str, timeout: float = 180, env: dict[str, str] | None = None) -> Result:
    """Run the CLI to completion with the test cluster's kubeconfig."""
    cluster_args = ["--kubeconfig", str(kubeconfig)] if _takes_kubeconfig(args) else []
    proc = subprocess.run(
        [DEPLOYCTL, *args, *cluster_args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
        stdin=subprocess.DEVNULL,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def start_deployctl(kubeconfig: Path, *args: str, log: Path) -> subprocess.Popen[bytes]:
    """Start the CLI in the background (for kill and concurrency tests); output goes to ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [DEPLOYCTL, *args, "--kubeconfig", str(kubeconfig)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "NO_COLOR": "1"},
        )


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def exists(read: Callable[[], object]) -> bool:
    """Whether the object ``read`` fetches exists: False on 404, other API errors raise."""
    import kubernetes

    try:
        read()
    except kubernetes.client.ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


def _takes_kubeconfig(args: tuple[str, ...]) -> bool:
    offline = {"validate", "plan", "render", "bench", "version", "completion", "keygen"}
    return (
        bool(args)
        and (args[0] not in offline or "--calibrate-from" in args)
        and "--kubeconfig" not in args
        and not (args[:2] == ("audit", "verify") and "--file" in args)
    )


def models_volume(namespace: str) -> list[dict[str, Any]]:
    """A PersistentVolume and a bound claim named ``models``: the profiles' weights source.

    kwok has no storage, but the scheduler only places pods whose claims are bound.
    """
    return claim_volume(namespace, "models", "ReadOnlyMany", "1Ti")


def claim_volume(namespace: str, claim: str, access_mode: str, storage: str) -> list[dict[str, Any]]:
    """A PersistentVolume (a hostPath kwok never mounts) pre-bound to a claim named ``claim``."""
    pv_name = f"{claim}-{namespace}"[:63]
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv_name, "labels": {"deployctl.dev/e2e": "true"}},
            "spec": {
                "capacity": {"storage": storage},
                "accessModes": [access_mode],
                "storageClassName": "",
                "persistentVolumeReclaimPolicy": "Delete",
                "hostPath": {"path": f"/{claim}"},
                "claimRef": {"namespace": namespace, "name": claim},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {
                "accessModes": [access_mode],
                "storageClassName": "",
                "volumeName": pv_name,
                "resources": {"requests": {"storage": storage}},
            },
        },
    ]


def create_models_volume(api: Any, namespace: str, timeout: float = 60) -> None:
    """Create models_volume(namespace) and wait for the claim to be Bound.

    The PersistentVolume controller binds it a moment later; a pod created before that is
    unschedulable ("unbound immediate PersistentVolumeClaims"), and a loaded machine can take
    longer than apply's grace for an unschedulable pod to do so.
    """
    import kubernetes

    kubernetes.utils.create_from_yaml(api, yaml_objects=models_volume(namespace))
    core = kubernetes.client.CoreV1Api(api)
    wait_until(
        lambda: core.read_namespaced_persistent_volume_claim("models", namespace).status.phase == "Bound",
        timeout,
        f"claim {namespace}/models to be Bound",
    )


def read_or_none(read: Callable[[], T]) -> T | None:
    """What ``read`` (a kubernetes client read) returns, or None when the object is not there (404)."""
    import kubernetes

    try:
        return read()
    except kubernetes.client.ApiException as e:
        if e.status == 404:
            return None
        raise


@dataclass
class ReleaseEnv:
    """One test's namespace for `deployctl apply`: a bound `models` claim, and pod port 8000
    forwarded to a healthy simulator (8001 is free for whatever a bad revision should meet)."""

    kubeconfig: Path
    namespace: str
    tmp: Path
    cluster: Any  # localcluster.Cluster
    api: Any  # kubernetes.client.ApiClient
    good_port: int

    def apply(self, doc: dict[str, Any], *extra: str, filename: str = "profile.yaml", timeout: float = 240) -> Result:
        path = write_profile(self.tmp, doc, filename)
        return deployctl(self.kubeconfig, "apply", str(path), "--output", "json", *extra, timeout=timeout)

    def forward_8001(self, port: int) -> None:
        """Pod port 8001 reaches the simulator on ``port``; 8000 stays on the healthy one."""
        import kwoksim

        kwoksim.forward_ports(self.cluster, self.namespace, {8000: self.good_port, 8001: port})

    def history(self, name: str = "llm") -> list[dict[str, Any]]:
        result = deployctl(self.kubeconfig, "history", name, "-n", self.namespace, "--output", "json")
        assert result.code == 0, result.stderr
        rows: list[dict[str, Any]] = result.json
        return rows

    def status(self, name: str = "llm") -> dict[str, Any]:
        result = deployctl(self.kubeconfig, "status", name, "-n", self.namespace, "--output", "json")
        assert result.code == 0, result.stderr
        data: dict[str, Any] = result.json
        return data

    def record(self, revision: int, name: str = "llm") -> dict[str, Any]:
        """The stored release record (what `audit export` and the next gate read)."""
        import kubernetes

        cm = kubernetes.client.CoreV1Api(self.api).read_namespaced_config_map(
            f"deployctl.{name}.v{revision}", self.namespace
        )
        record: dict[str, Any] = json.loads(cm.data["record.json"])
        return record

    def deployment(self, name: str = "llm") -> Any:
        import kubernetes

        apps = kubernetes.client.AppsV1Api(self.api)
        return read_or_none(lambda: apps.read_namespaced_deployment(name, self.namespace))


def wait_until(done: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``done`` every 0.2 s; TimeoutError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def wait_for_settled_namespaces(api: Any, timeout: float = 120) -> None:
    """Wait until no earlier test's namespace is still being emptied, before a test that judges latency.

    The namespace controller deletes a finished test's objects for seconds after the test; on 2
    cores that churn (API server, etcd, controller-manager) measurably slows a port-forwarded
    smoke benchmark. Tests that gate on timing start on a settled cluster; after ``timeout`` they
    start anyway, since a slow deletion is not what they test.
    """
    import kubernetes

    core = kubernetes.client.CoreV1Api(api)

    def settled() -> bool:
        listed = core.list_namespace(label_selector="deployctl.dev/e2e=true").items
        return not any(ns.status.phase == "Terminating" for ns in listed)

    with contextlib.suppress(TimeoutError):
        wait_until(settled, timeout, "earlier tests' namespaces to be deleted")


class Traffic:
    """Live traffic in the background, from `deployctl bench` as an operator would send it: one run per
    server (the simulators behind the pods, as a Service spreading requests over both sides reaches
    them), an open loop of RATE requests/s, stopped by SIGTERM when the block ends. Each run's JSON
    report is kept; ``answered`` and ``failed`` are their sums, by the benchmark's own count."""

    RATE = 4

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self.reports: list[dict[str, Any]] = []
        self._runs: list[subprocess.Popen[str]] = []

    def __enter__(self) -> Traffic:
        for port in self.ports:
            argv = [DEPLOYCTL, "bench", "--url", f"http://127.0.0.1:{port}", "--model", MODEL, "-o", "json"]
            argv += ["--duration", "30m", "--requests", "1000000", "--request-rate", str(self.RATE)]
            argv += ["--concurrency", "4", "--processes", "1", "--warmup", "0"]
            argv += ["--input-tokens", "16", "--output-tokens", "4", "--timeout", "30s"]
            self._runs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        return self

    def __exit__(self, *exc: object) -> None:
        for run in self._runs:
            run.terminate()  # SIGTERM: the benchmark stops sending and reports what it measured
        for run in self._runs:
            try:
                out, err = run.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                run.kill()
                run.communicate()
                raise
            assert run.returncode == 0 and "Traceback" not in err, f"deployctl bench exited {run.returncode}: {err}"
            report = json.loads(out)
            assert (report["stopped_early"] or "").startswith("stopped by SIGTERM"), report["stopped_early"]
            self.reports.append(report)

    @property
    def answered(self) -> int:
        return sum(int(r["completed"]) for r in self.reports)

    @property
    def failed(self) -> int:
        return sum(int(r["failed"]) for r in self.reports)

    def __repr__(self) -> str:
        return f"Traffic(answered={self.answered}, failed={self.failed}, errors={[r['errors'] for r in self.reports]})"


def post(url: str) -> int:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "one two"}], "max_tokens": 4, "stream": False}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        answer.read()
        return int(answer.status)
