"""rollout.canary on the local control plane: preflight places the canary beside the stable copies
(the kwok GPU nodes have room), `apply --dry-run` says so, and `apply` runs its steps on live traffic,
read from each pod's metrics through the API server (source `pods`): a good canary is promoted, a
slower one removed with the stable copies untouched, and too little traffic follows the policy."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
from deployhelpers import (
    GOOD_TTFT_MS,
    MODEL,
    ReleaseEnv,
    Traffic,
    deployctl,
    post,
    profile,
    start_deployctl,
    wait_until,
    write_profile,
)

from orchestrator import kube as orchestrator_kube
from orchestrator.apply import pod_metrics
from orchestrator.engines import metric_table
from orchestrator.gate import live_metrics


def test_a_good_canary_passes_its_step_on_live_traffic_and_is_promoted(
    env: ReleaseEnv, simulator: Callable[..., Any]
) -> None:
    """Preflight places the canary beside the stable copies, the canary's pod passes the gate alone,
    a window of live traffic judges it against the stable pods, and the promotion moves every copy.
    The new revision serves on pod port 8001, a simulator of its own as fast as the stable one: the
    two sides' metrics come from different servers."""
    canary_server = simulator(model=MODEL)
    env.forward_8001(canary_server.port)
    first = env.apply(profile(env.namespace, rollout={"replicas": 2}))
    assert first.code == 0, first.stdout + first.stderr
    changed = profile(env.namespace, port=8001, rollout=_canary_rollout(), engine={"maxNumSeqs": 16})
    planned = env.apply(changed, "--dry-run")
    assert planned.code == 0, planned.stdout + planned.stderr
    assert "its canary beside the stable copies" in planned.json["message"], planned.json

    with Traffic([env.good_port, canary_server.port]) as traffic:
        promoted = env.apply(changed, timeout=400)
    assert promoted.code == 0, promoted.stdout + promoted.stderr
    assert promoted.json["result"] == "deployed" and promoted.json["revision"] == 2, promoted.json
    assert traffic.failed == 0 and traffic.answered > 0, traffic
    evidence = env.record(2)["canary"]
    assert evidence["mode"] == "beside" and evidence["result"] == "passed", evidence
    (step,) = evidence["steps"]
    assert step["copies"] == 1 and step["gate"] == "pass" and step["decision"] == "pass", step
    analysis = step["analysis"]
    assert analysis["verdict"] == "pass" and analysis["canary"]["requests"] >= MIN_REQUESTS, analysis
    assert len(analysis["canary"]["pods"]) == 1 and len(analysis["stable"]["pods"]) == 2, analysis
    assert {c["metric"] for c in analysis["checks"]} >= {"p95_ttft_ms", "error_rate"}, analysis
    assert env.deployment("llm-canary") is None, "the promotion left the canary Deployment"
    args = env.deployment().spec.template.spec.containers[0].args
    assert "16" in args[args.index("--max-num-seqs") + 1], args


def test_a_slower_canary_is_removed_and_the_stable_copies_never_change(
    env: ReleaseEnv, simulator: Callable[..., Any]
) -> None:
    """The new revision serves on pod port 8001, where a simulator answers ten times slower: its smoke
    run meets the SLO, but live traffic beside the stable copies fails the canary, which is removed.
    The stable Deployment is never written and its traffic never fails."""
    slow = simulator(model=MODEL, ttft_ms=GOOD_TTFT_MS * 10)
    env.forward_8001(slow.port)
    first = env.apply(profile(env.namespace, rollout={"replicas": 2}))
    assert first.code == 0, first.stdout + first.stderr
    before = env.deployment()

    with Traffic([env.good_port, slow.port]) as traffic:
        failed = env.apply(profile(env.namespace, port=8001, rollout=_canary_rollout()), timeout=400)
    assert failed.code == 6, failed.stdout + failed.stderr
    assert failed.json["result"] == "rolled_back" and failed.json["rolled_back_to"] == 1, failed.json
    assert failed.json["failure"]["class"] == "canary_failed", failed.json
    assert "p95_ttft_ms" in failed.json["message"] and "never changed" in failed.json["message"], failed.json
    assert "Traceback" not in failed.stderr
    assert traffic.failed == 0, traffic  # no request to the stable side's server (nor the canary's) failed
    after = env.deployment()
    assert after.metadata.generation == before.metadata.generation, "the failed canary changed the stable copies"
    assert env.deployment("llm-canary") is None, "the failed canary was left running"
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "deployed"), (2, "failed")]
    evidence = env.record(2)["canary"]
    assert evidence["result"] == "failed" and evidence["failed_step"] == 1 and evidence["removed"] == [], evidence
    analysed = evidence["steps"][0]["analysis"]["checks"]
    checks = {c["metric"]: c for c in analysed if c["source"].startswith("ratio")}  # not the absolute SLOs
    assert checks["p95_ttft_ms"]["passed"] is False, checks
    stable_p95 = checks["p95_ttft_ms"]["limit"] / 1.2  # the default maxRatio
    assert checks["p95_ttft_ms"]["canary"] > 3 * stable_p95, checks


def test_without_room_beside_a_failed_canary_gives_the_stable_copies_back(
    env: ReleaseEnv, simulator: Callable[..., Any]
) -> None:
    """TP 4 needs an NVLink node, and the two the kwok cluster has hold the two stable copies: the
    canary replaces one stable copy (`replace`), and when live traffic fails it, the stable Deployment
    gets its two copies back, with its pod template never written."""
    slow = simulator(model=MODEL, ttft_ms=GOOD_TTFT_MS * 10)
    env.forward_8001(slow.port)
    first = env.apply(profile(env.namespace, tp=4, rollout={"replicas": 2}))
    assert first.code == 0, first.stdout + first.stderr
    before = env.deployment()
    changed = profile(env.namespace, tp=4, port=8001, rollout=_canary_rollout())
    planned = env.apply(changed, "--dry-run")
    assert "its canary in place of stable copies" in planned.json["message"], planned.json

    with Traffic([env.good_port, slow.port]) as traffic:
        failed = env.apply(changed, timeout=400)
    assert failed.code == 6, failed.stdout + failed.stderr
    assert "their copies given back" in failed.json["message"], failed.json
    assert traffic.failed == 0, traffic
    evidence = env.record(2)["canary"]
    assert evidence["mode"] == "replace" and evidence["removed"] == [], evidence
    after = env.deployment()
    assert after.spec.replicas == 2 and after.status.ready_replicas == 2, after.status
    assert after.spec.template == before.spec.template, "the failed canary wrote the stable pod template"
    assert env.deployment("llm-canary") is None


def test_too_little_traffic_follows_the_inconclusive_policy(env: ReleaseEnv) -> None:
    """No live traffic in the window: inconclusive, and with `inconclusive: fail` the canary is removed."""
    first = env.apply(profile(env.namespace, rollout={"replicas": 2}))
    assert first.code == 0, first.stdout + first.stderr
    rollout = _canary_rollout()
    rollout["canary"]["inconclusive"] = "fail"
    failed = env.apply(profile(env.namespace, rollout=rollout, engine={"maxNumSeqs": 16}), timeout=400)
    assert failed.code == 6, failed.stdout + failed.stderr
    assert "inconclusive" in failed.json["failure"]["message"], failed.json
    assert "fewer than minRequests" in failed.json["failure"]["message"], failed.json
    step = env.record(2)["canary"]["steps"][0]
    assert step["decision"] == "fail" and step["analysis"]["verdict"] == "inconclusive", step
    assert env.deployment("llm-canary") is None


def test_pause_resume_and_promote_by_hand_mid_step(env: ReleaseEnv) -> None:
    """`deployctl rollout pause`, `resume` and `promote` reach the apply running the canary in the middle
    of a window far longer than the test: the promotion comes from the person, the record says who."""
    with _canary_applying(env) as (running, log):
        asked = _rollout(env, "pause")
        assert asked["command"] == "pause" and asked["by"], asked
        _wait_for_state(env, "paused", running, log)
        text = deployctl(env.kubeconfig, "rollout", "status", "llm", "-n", env.namespace)
        assert text.code == 0 and "paused" in text.stdout and "last command: pause" in text.stdout, text.stdout
        _rollout(env, "resume")
        _wait_for_state(env, "analysing", running, log)
        _rollout(env, "promote")
        running.wait(timeout=240)
    assert running.returncode == 0, log.read_text()[-3000:]
    assert [r["status"] for r in env.history()] == ["superseded", "deployed"], env.history()
    evidence = env.record(2)["canary"]
    assert evidence["result"] == "promoted" and evidence["promoted_by"]["command"] == "promote", evidence
    assert evidence["steps"][0]["decision"] == "promote", evidence
    assert env.deployment("llm-canary") is None
    nothing = deployctl(env.kubeconfig, "rollout", "status", "llm", "-n", env.namespace, "-o", "json")
    assert nothing.code == 0 and nothing.json["canary"] is None, nothing.stdout


def test_abort_by_hand_removes_the_canary_and_records_who(env: ReleaseEnv) -> None:
    with _canary_applying(env) as (running, log):
        before = env.deployment()
        _rollout(env, "abort")
        running.wait(timeout=120)
    assert running.returncode == 6, log.read_text()[-3000:]
    assert "aborted the canary in step 1" in log.read_text(), log.read_text()[-3000:]
    assert env.deployment("llm-canary") is None
    assert env.deployment().metadata.generation == before.metadata.generation
    evidence = env.record(2)["canary"]
    assert evidence["result"] == "failed" and evidence["aborted_by"]["command"] == "abort", evidence
    refused = deployctl(env.kubeconfig, "rollout", "promote", "llm", "-n", env.namespace)
    assert refused.code == 1 and "has no canary running" in refused.stderr and "Traceback" not in refused.stderr


def test_a_lock_lost_mid_window_ends_the_canary_without_a_promotion(env: ReleaseEnv) -> None:
    """Another holder takes the release's Lease while the canary's window runs: the window judges
    nothing, no promotion runs, the canary is removed and the revision recorded failed (exit 4)."""
    with _canary_applying(env, "--lock-ttl", "6") as (running, log):
        leases = kubernetes.client.CoordinationV1Api(env.api)
        lease = leases.read_namespaced_lease("deployctl-llm", env.namespace)
        lease.spec.holder_identity = "someone-else"
        leases.replace_namespaced_lease("deployctl-llm", env.namespace, lease)
        running.wait(timeout=120)
    assert running.returncode == 4, log.read_text()[-3000:]
    assert "someone-else" in log.read_text() and "Traceback" not in log.read_text()
    assert env.deployment("llm-canary") is None
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "deployed"), (2, "failed")]
    assert env.record(2)["failure"]["class"] == "lock_lost"
    assert env.record(2)["canary"]["steps"][0]["decision"] != "pass"


@contextlib.contextmanager
def _canary_applying(env: ReleaseEnv, *extra: str) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """Revision 1 deployed, then `deployctl apply` of a canary with a 10-minute window running in the
    background, yielded once its first window is analysing; killed afterwards if it still runs."""
    first = env.apply(profile(env.namespace, rollout={"replicas": 2}))
    assert first.code == 0, first.stdout + first.stderr
    path = write_profile(env.tmp, profile(env.namespace, rollout=_canary_rollout("10m"), engine={"maxNumSeqs": 16}))
    log = env.tmp / "apply.log"
    running = start_deployctl(env.kubeconfig, "apply", str(path), *(extra or ("--output", "json")), log=log)
    try:
        _wait_for_state(env, "analysing", running, log)
        yield running, log
    finally:
        if running.poll() is None:
            running.kill()


def _rollout(env: ReleaseEnv, verb: str) -> dict[str, Any]:
    result = deployctl(env.kubeconfig, "rollout", verb, "llm", "-n", env.namespace, "-o", "json")
    assert result.code == 0, result.stdout + result.stderr
    answer: dict[str, Any] = result.json
    return answer


def _wait_for_state(env: ReleaseEnv, state: str, running: Any, log: Any) -> None:
    def there() -> bool:
        assert running.poll() is None, log.read_text()[-3000:]
        shown = deployctl(env.kubeconfig, "rollout", "status", "llm", "-n", env.namespace, "-o", "json").json
        return bool(shown["canary"]) and shown["canary"].get("state") == state

    wait_until(there, 120, f"the canary to be {state}")


MIN_REQUESTS = 10


def _canary_rollout(window_length: str = "20s") -> dict[str, Any]:
    window = {"window": window_length, "minRequests": MIN_REQUESTS}
    return {"replicas": 2, "canary": {"steps": [{"copies": 1, "analysis": window}], "metrics": {"interval": "5s"}}}


def test_the_pods_source_reads_a_windows_traffic_through_the_api_server(env: ReleaseEnv) -> None:
    """The air-gap metrics source: each pod's /metrics through a port-forward of the API server, two
    rounds around live traffic, and the window's requests and latency from their difference. Both
    kwok pods forward to the same simulator, so each side sees all of the traffic."""
    deployed = env.apply(profile(env.namespace, rollout={"replicas": 2}))
    assert deployed.code == 0, deployed.stdout + deployed.stderr
    pods = sorted(
        p.metadata.name
        for p in kubernetes.client.CoreV1Api(env.api)
        .list_namespaced_pod(env.namespace, label_selector="deployctl.dev/release=llm")
        .items
    )
    assert len(pods) == 2, pods
    table = metric_table.table("vllm", metric_table.versions("vllm")[-1])
    kube = orchestrator_kube.connect(str(env.kubeconfig))
    targets = {pods[0]: pod_metrics.Target("canary", 8000), pods[1]: pod_metrics.Target("stable", 8000)}
    with pod_metrics.Reader(kube, env.namespace, targets, table.path) as reader:
        start = reader.read()
        for _ in range(REQUESTS):
            assert post(f"http://127.0.0.1:{env.good_port}/v1/chat/completions") == 200
        end = reader.read()
    assert start.unanswered == {} and end.unanswered == {}, (start.unanswered, end.unanswered)
    for track in ("canary", "stable"):
        seen = live_metrics.window(table, start.scrapes, end.scrapes, track)
        assert seen.requests == REQUESTS and seen.error_rate == 0, (track, seen)
        p95 = seen.latency_ms("p95", "ttft")
        # The simulator's first token comes after GOOD_TTFT_MS; vLLM's buckets are coarse above 10 ms.
        assert GOOD_TTFT_MS * 0.5 <= p95 <= 4 * GOOD_TTFT_MS + 50, (track, p95)


REQUESTS = 24
