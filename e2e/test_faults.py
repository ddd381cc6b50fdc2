"""Faults on the real control plane: deployctl killed, the API server gone, a broken inference server.

Each test injects one fault into a run of the real CLI and checks what is promised in
docs/reliability.md: a re-run converges, the lock recovers, no release record is lost or
duplicated, failures are explained with the right exit code within a bounded time, and nothing
hangs, spins or prints a traceback.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import faulthelpers
import kubernetes
import localcluster
import pytest
from deployhelpers import deployctl, profile, start_deployctl
from faulthelpers import DEPLOYMENTS, SERVICE_ACCOUNTS, Env, HoldingWebhook, wait_for

from orchestrator.profile import model as profile_mod
from orchestrator.render.manifests import PROFILE_HASH_ANNOTATION

pytestmark = pytest.mark.kwok

OUTAGE_S = 4.0  # how long the API server stays down mid-watch


@pytest.fixture
def env(
    cluster: localcluster.Cluster,
    namespace: str,
    api_client: kubernetes.client.ApiClient,
    simulator: Callable[..., Any],
    tmp_path: Path,
) -> Iterator[Env]:
    with faulthelpers.deploy_env(cluster, namespace, api_client, simulator, tmp_path) as deploy:
        yield deploy


@pytest.fixture
def control_plane(cluster: localcluster.Cluster) -> Iterator[Path]:
    """The local cluster's state directory; every component a test stopped is running again after it."""
    if cluster.state_dir is None:
        pytest.skip("stopping control-plane processes needs the local cluster (E2E_KUBECONFIG is set)")
    yield cluster.state_dir
    for name in localcluster.RESTARTABLE:
        localcluster.start_component(name, cluster.state_dir)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


def _assert_consistent(env: Env, expected: list[tuple[int, str]]) -> None:
    """History says ``expected``; records are 1..N, each once; the chain verifies; the lock is free."""
    assert env.history() == expected
    assert faulthelpers.record_revisions(env.api, env.namespace) == list(range(1, len(expected) + 1))
    verify = env.run("audit", "verify", "llm", "-n", env.namespace, "--output", "json")
    assert verify.code == 0 and verify.json["ok"] and verify.json["records"] == len(expected), verify.stdout
    assert not (faulthelpers.lease_spec(env.api, env.namespace) or {}).get("holderIdentity")


def _assert_live(env: Env, path: Path) -> None:
    """The Deployment carries ``path``'s profile and is rolled out."""
    dep = env.deployment()
    assert dep.metadata.annotations[PROFILE_HASH_ANNOTATION] == profile_mod.load(path).spec_hash()
    assert dep.status.observed_generation == dep.metadata.generation
    assert dep.status.ready_replicas == dep.status.updated_replicas == dep.spec.replicas


# --- deployctl killed (SIGKILL) at each step of apply ------------------------------------------


def _slow_sim_profile(env: Env) -> dict[str, Any]:
    """Pod port 8000 reaches a simulator slow enough (1.6 s per request) to be killed mid-smoke."""
    slow = env.simulator(model="sim-model", ttft_ms=20, itl_ms=100)
    env.forward({8000: slow.port})
    return profile(
        env.namespace,
        gate={
            "health": {"timeoutSeconds": 20},
            "smoke": {
                "concurrency": 4,
                "requests": 12,
                "warmup": 1,
                "inputTokens": 64,
                "outputTokens": 16,
                "minSamples": 8,
                "timeoutSeconds": 60,
                "slo": {"median_tpot_ms": "<=500", "error_rate": "<=0.05"},
            },
        },
    )


@pytest.mark.parametrize("phase", ["after_lock", "mid_apply", "mid_watch", "mid_smoke"])
def test_apply_killed_at_any_step_is_locked_until_expiry_then_a_rerun_converges(env: Env, phase: str) -> None:
    doc = profile(env.namespace)
    hold: HoldingWebhook | None = None
    if phase == "after_lock":  # the lock is taken; the first object's write is held
        hold = HoldingWebhook(env.cluster, env.api, env.namespace, SERVICE_ACCOUNTS)
    elif phase == "mid_apply":  # four objects written; the Deployment's write is held
        hold = HoldingWebhook(env.cluster, env.api, env.namespace, DEPLOYMENTS)
    elif phase == "mid_watch":
        doc = profile(env.namespace, placement={"podAnnotations": {"sim.deployctl.dev/ready-delay": "6s"}})
    else:
        doc = _slow_sim_profile(env)
    path = env.write(doc)
    log = env.tmp / "killed.log"
    with hold or contextlib.nullcontext():
        proc = env.start_apply(path)
        if hold is not None:
            wait_for(hold.held.is_set, 30, f"deployctl to write the held {hold.resource.plural}")
        elif phase == "mid_watch":
            wait_for(lambda: faulthelpers.log_has(log, "[rollout]"), 30, "the rollout watch")
        else:
            wait_for(lambda: faulthelpers.log_has(log, "smoke benchmark"), 60, "the smoke benchmark")
            time.sleep(1.0)  # requests in flight
        _kill(proc)
    holder = (faulthelpers.lease_spec(env.api, env.namespace) or {}).get("holderIdentity") or ""
    assert f"pid-{proc.pid}/" in holder, f"the dead process still holds the lock: {holder!r}"

    locked = env.apply(path)
    assert locked.code == 8, locked.stdout + locked.stderr
    assert f"pid-{proc.pid}/" in locked.json["error"] and "expires at" in locked.json["error"]

    if phase == "mid_smoke":  # the re-run need not wait for the slow server
        env.forward({8000: env.simulator(model="sim-model").port})
    faulthelpers.wait_until_lease_expires(env.api, env.namespace)
    rerun = env.apply(path)
    assert rerun.code == 0, rerun.stdout + rerun.stderr
    assert "taking over the lock" in rerun.stderr and rerun.json["revision"] == 1
    _assert_consistent(env, [(1, "deployed")])
    _assert_live(env, path)


def test_apply_killed_mid_rollback_rerun_rolls_back_again_and_keeps_every_record(env: Env) -> None:
    good = env.write(profile(env.namespace), "good.yaml")
    assert env.apply(good).code == 0
    crash = {"sim.deployctl.dev/behavior": "crash-loop", "sim.deployctl.dev/backoff": "2s"}
    bad = env.write(profile(env.namespace, engine={"maxNumSeqs": 31}, placement={"podAnnotations": crash}))

    def is_the_restore(deployment: dict[str, Any]) -> bool:  # revision 1's template, not the bad one
        annotations = deployment["spec"]["template"]["metadata"].get("annotations") or {}
        return "sim.deployctl.dev/behavior" not in annotations

    with HoldingWebhook(env.cluster, env.api, env.namespace, DEPLOYMENTS, ("UPDATE",), hold_if=is_the_restore) as hold:
        proc = env.start_apply(bad)
        wait_for(hold.held.is_set, 60, "the automatic rollback to write the Deployment")
        _kill(proc)
    assert "rolling back to revision 1" in (env.tmp / "killed.log").read_text()
    assert env.history() == [(1, "deployed"), (2, "failed")]  # the failure was recorded before the kill

    faulthelpers.wait_until_lease_expires(env.api, env.namespace)
    rerun = env.apply(bad)
    assert rerun.code == 5, rerun.stdout + rerun.stderr
    assert rerun.json["result"] == "rolled_back" and rerun.json["rolled_back_to"] == 1
    _assert_consistent(env, [(1, "superseded"), (2, "failed"), (3, "failed"), (4, "deployed")])
    _assert_live(env, good)  # revision 1's objects are live again


# --- the API server restarted mid-watch, or unreachable from the start --------------------------


def test_api_server_restarted_mid_watch_the_watch_resumes_without_spinning_and_apply_finishes(
    env: Env, control_plane: Path
) -> None:
    # The outage falls while deployctl watches a Running pod load its model. kwok's own status
    # patches must not fall into it: kwok drops a patch that fails with anything but "connection
    # refused" (an API server still starting answers otherwise) and backs off up to 32 minutes on
    # the rest, so the pod is only made Ready once the API server has long been back.
    path = env.write(profile(env.namespace, placement={"podAnnotations": {"sim.deployctl.dev/ready-delay": "30s"}}))
    log = env.tmp / "apply.log"
    proc = start_deployctl(env.kubeconfig, "apply", str(path), "--output", "json", log=log)
    wait_for(lambda: faulthelpers.log_has(log, "loading the model"), 60, "the pod to run and load its model")
    cpu_before = faulthelpers.cpu_seconds(proc.pid)
    localcluster.stop_component("kube-apiserver", control_plane, crash=True)
    time.sleep(OUTAGE_S)
    cpu_during = faulthelpers.cpu_seconds(proc.pid) - cpu_before
    localcluster.start_component("kube-apiserver", control_plane)
    print(f"deployctl used {cpu_during:.2f} s of CPU during a {OUTAGE_S:.0f} s API server outage")
    assert faulthelpers.exit_code(proc, timeout=120, log=log) == 0, log.read_text()
    assert cpu_during < 0.25 * OUTAGE_S, f"{cpu_during:.2f} s of CPU in a {OUTAGE_S} s outage: a busy loop"
    assert "Traceback" not in log.read_text()
    assert env.history() == [(1, "deployed")]
    _assert_live(env, path)


@pytest.mark.parametrize("fault", ["wrong_port", "wrong_ca", "expired_token", "invalid_token"])
def test_unreachable_or_rejecting_api_exits_4_in_seconds_naming_the_context_and_the_cause(env: Env, fault: str) -> None:
    base = env.kubeconfig
    bad = env.tmp / "bad-kubeconfig"
    context = "faulty-context"
    if fault == "wrong_port":
        server = f"https://127.0.0.1:{faulthelpers.closed_port()}"
        faulthelpers.kubeconfig_with(base, bad, server=server, context=context)
        cause = "connection refused"
    elif fault == "wrong_ca":
        faulthelpers.kubeconfig_with(base, bad, ca_pem=faulthelpers.foreign_ca_pem(), context=context)
        cause = "check the cluster CA"
    elif fault == "expired_token":
        token = faulthelpers.mint_token(env.api, env.namespace, "default")
        expired = faulthelpers.expired_token(env.cluster, token)
        faulthelpers.kubeconfig_with(base, bad, token=expired, context=context)
        cause = "401 Unauthorized"
    else:
        faulthelpers.kubeconfig_with(base, bad, token="not-a-token", context=context)
        cause = "401 Unauthorized"
    path = env.write(profile(env.namespace))
    for args in (("apply", str(path)), ("status", "llm", "-n", env.namespace), ("inventory",)):
        started = time.monotonic()
        result = deployctl(bad, *args, "--kubeconfig", str(bad), timeout=60)
        elapsed = time.monotonic() - started
        assert result.code == 4, f"{args}: {result.stdout}{result.stderr}"
        assert elapsed < 15, f"{args} took {elapsed:.1f} s"
        assert f"context '{context}'" in result.stderr and cause in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert env.deployment() is None


# --- the inference server misbehaving during the gate -------------------------------------------

# fault -> (failure class, gate verdict) of a first install whose server misbehaves that way.
GATE_FAULTS = {
    "refuse": ("health", None),  # nothing listens: the health gate cannot reach the pod
    "http500": ("slo_failed", "fail"),  # every request answered 500: error_rate 1.0
    "stall": ("gate_error", "error"),  # streams stall: nothing could be measured, retried
    "no-done": ("slo_failed", "fail"),  # streams cut short (no [DONE]): failed requests
    "error-event": ("slo_failed", "fail"),  # an error event mid-stream: failed requests
}


@pytest.mark.parametrize("fault", sorted(GATE_FAULTS))
def test_misbehaving_server_gets_the_right_verdict_and_the_install_is_removed(env: Env, fault: str) -> None:
    bad = env.simulator(model="sim-model", fault=fault)
    env.forward({8000: bad.port})
    doc = profile(env.namespace)
    doc["gate"]["health"] = {"timeoutSeconds": 5}
    doc["gate"]["smoke"] = {**doc["gate"]["smoke"], "timeoutSeconds": 4}  # a stalled attempt ends in 4 s
    started = time.monotonic()
    result = env.apply(env.write(doc), timeout=90)
    elapsed = time.monotonic() - started
    assert result.code == 6, result.stdout + result.stderr
    out = result.json
    cls, verdict = GATE_FAULTS[fault]
    assert out["result"] == "rolled_back" and out["failure"]["class"] == cls, out["failure"]
    assert (out["gate"] or {}).get("verdict") == verdict
    assert "Traceback" not in result.stderr
    assert elapsed < 60
    assert env.deployment() is None  # the failed first install was removed
    assert env.history() == [(1, "failed")]


# fault -> the failure kind every request of `deployctl bench` reports.
BENCH_FAULTS = {
    "refuse": "connect",
    "http500": "http_status",
    "stall": "timeout",
    "no-done": "protocol",
    "error-event": "stream_error",
}


@pytest.mark.parametrize("fault", sorted(BENCH_FAULTS))
def test_bench_against_a_misbehaving_server_classifies_every_failure_and_never_hangs(
    simulator: Callable[..., Any], fault: str
) -> None:
    sim = simulator(model="sim-model", fault=fault)
    args = ["--url", sim.url, "--model", "sim-model", "--requests", "4", "--concurrency", "2"]
    args += ["--input-tokens", "16", "--output-tokens", "8", "--warmup", "0", "--timeout", "2"]
    started = time.monotonic()
    result = deployctl(Path("/nonexistent"), "bench", *args, "--output", "json", timeout=30)
    assert time.monotonic() - started < 20
    # Nothing was measured: the report is still printed, and the exit says the run failed.
    assert result.code == 5, result.stdout + result.stderr
    assert result.stderr.startswith("error: ") and (
        "nothing was measured" in result.stderr or "no request" in result.stderr
    )
    report = result.json
    assert report["completed"] == 0 and report["failed"] == 4
    assert report["failures"] == {BENCH_FAULTS[fault]: 4}
    assert report["errors"] and "Traceback" not in result.stdout + result.stderr
    table = deployctl(Path("/nonexistent"), "bench", *args, timeout=30)
    assert table.code == 5 and "Failed requests:" in table.stdout and "4" in table.stdout


# --- the controller-manager stopped -----------------------------------------------------------


def test_stopped_controller_manager_is_detected_and_explained_not_waited_on(env: Env, control_plane: Path) -> None:
    path = env.write(profile(env.namespace))
    localcluster.stop_component("kube-controller-manager", control_plane)
    try:
        started = time.monotonic()
        result = env.apply(path, timeout=90)
        elapsed = time.monotonic() - started
    finally:
        localcluster.start_component("kube-controller-manager", control_plane)
    assert result.code == 5, result.stdout + result.stderr
    failure = result.json["failure"]
    assert failure["class"] == "controller_stalled"
    assert "kube-controller-manager running?" in failure["message"]
    assert elapsed < 30 + 20  # CONTROLLER_STALL_SECONDS, plus the apply and the clean-up
    assert env.deployment() is None
    assert env.history() == [(1, "failed")]


# --- concurrent applies -----------------------------------------------------------------------


def test_four_applies_of_one_release_started_together_one_proceeds_three_exit_8(env: Env) -> None:
    path = env.write(profile(env.namespace, placement={"podAnnotations": {"sim.deployctl.dev/ready-delay": "4s"}}))
    procs = [
        start_deployctl(env.kubeconfig, "apply", str(path), "--output", "json", log=env.tmp / f"apply-{i}.log")
        for i in range(4)
    ]
    codes = sorted(p.wait(timeout=120) for p in procs)
    logs = [(env.tmp / f"apply-{i}.log").read_text() for i in range(4)]
    assert codes == [0, 8, 8, 8], "\n".join(logs)
    assert sum("locked by" in log for log in logs) == 3  # each loser names the lock's holder
    assert env.history() == [(1, "deployed")]
    assert faulthelpers.record_revisions(env.api, env.namespace) == [1]


def test_applies_of_two_releases_in_one_namespace_do_not_block_each_other(env: Env) -> None:
    slow = {"podAnnotations": {"sim.deployctl.dev/ready-delay": "4s"}}
    paths = [env.write(profile(env.namespace, name, placement=slow), f"{name}.yaml") for name in ("llm", "chat")]
    procs = [
        start_deployctl(env.kubeconfig, "apply", str(p), "--output", "json", log=env.tmp / f"{p.stem}.log")
        for p in paths
    ]
    both_locked = False
    deadline = time.monotonic() + 60
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        holders = [_holder(env, name) for name in ("llm", "chat")]
        both_locked = both_locked or all(holders)
        time.sleep(0.2)
    codes = [p.wait(timeout=60) for p in procs]
    assert codes == [0, 0], "\n".join((env.tmp / f"{p.stem}.log").read_text() for p in paths)
    assert both_locked, "the two applies never held their locks at the same time"


def _holder(env: Env, release: str) -> str | None:
    holder: str | None = (faulthelpers.lease_spec(env.api, env.namespace, release) or {}).get("holderIdentity")
    return holder


# --- unknown names and revisions ----------------------------------------------------------------


def test_unknown_release_or_revision_exits_1_naming_what_there_is(env: Env) -> None:
    assert env.apply(env.write(profile(env.namespace))).code == 0
    ns = ("-n", env.namespace)
    for args in (
        ("history", "nosuch", *ns),
        ("status", "nosuch", *ns),
        ("rollback", "nosuch", *ns),
        ("audit", "export", "nosuch", *ns),
        ("audit", "verify", "nosuch", *ns),
        ("history", "llm", "-n", "no-such-namespace"),
    ):
        result = env.run(*args)
        assert result.code == 1, f"{args}: {result.code} {result.stderr}"
        assert "has no records in namespace" in result.stderr and "Traceback" not in result.stderr
    missing = env.run("rollback", "llm", *ns, "--to", "7")
    assert missing.code == 1 and "revision 7 is not in the history (it has revisions 1 to 1)" in missing.stderr
    assert env.history() == [(1, "deployed")]  # nothing was recorded by the refused commands
