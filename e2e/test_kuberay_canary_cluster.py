"""rollout.canary for copies that span nodes, on the local control plane with KubeRay's real
ray-operator: each canary copy is a RayCluster of its own, judged on live traffic beside the stable
copies (metrics from each head through the API server), and a copy never mixes revisions.

The 405B at TP=8 x PP=2 of e2e/test_multinode.py: a copy is a head and a worker on two of the four
H100 nodes. The new revision serves on pod port 8001, where a simulator of its own answers, so the
two sides' metrics come from different servers.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from deployhelpers import (
    GOOD_TTFT_MS,
    MODEL,
    ReleaseEnv,
    Traffic,
    deployctl,
    start_deployctl,
    wait_until,
    write_profile,
)
from test_multinode import H100_NODES, Sampler, _ready, cordon, pods, rayclusters, two_node

TRACK = "deployctl.dev/track"


@pytest.fixture
def h100(env: ReleaseEnv) -> Iterator[kubernetes.client.CoreV1Api]:
    """The H100 nodes, uncordoned again after the test whatever it cordoned."""
    core = kubernetes.client.CoreV1Api(env.api)
    yield core
    for node in H100_NODES:
        core.patch_node(node, {"spec": {"unschedulable": None}})


def _canary(window: str = "20s", **rollout: Any) -> dict[str, Any]:
    analysis = {"window": window, "minRequests": 10}
    return {"canary": {"steps": [{"copies": 1, "analysis": analysis}], "metrics": {"interval": "5s"}}, **rollout}


def _names(env: ReleaseEnv) -> list[str]:
    return sorted(rc["metadata"]["name"] for rc in rayclusters(env))


def test_a_good_canary_copy_passes_beside_the_stable_copy_and_the_promotion_starts_the_new_copy_whole(
    env: ReleaseEnv, simulator: Any
) -> None:
    """Two of the four nodes hold the stable copy, so the canary copy starts beside it. `rollout
    status` reads the running canary from its RayCluster; the step passes, the canary copy goes, and
    the promotion surges the new revision's copy in and the old one out."""
    canary_server = simulator(model=MODEL)
    env.forward_8001(canary_server.port)
    assert env.apply(two_node(env.namespace)).code == 0
    (stable,) = rayclusters(env)
    changed = two_node(env.namespace, engine={"port": 8001, "maxNumSeqs": 16}, rollout=_canary())
    planned = env.apply(changed, "--dry-run")
    assert planned.code == 0 and "its canary beside the stable copies" in planned.json["message"], planned.json

    log = env.tmp / "apply.log"
    with Traffic([env.good_port, canary_server.port]) as traffic:
        path = write_profile(env.tmp, changed, "v2.yaml")
        running = start_deployctl(env.kubeconfig, "apply", str(path), "--output", "json", log=log)
        shown = _wait_for_analysis(env, running, log)
        canaries = [rc for rc in rayclusters(env) if rc["metadata"]["labels"].get(TRACK) == "canary"]
        assert running.wait(timeout=400) == 0, log.read_text()[-4000:]
    assert shown["canary"]["canary_copies"] == {"desired": 1, "ready": 1}, shown
    assert shown["canary"]["mode"] == "beside" and shown["canary"]["of"] == 1, shown
    (canary,) = canaries
    assert canary["metadata"]["name"].endswith("-c0"), canary["metadata"]["name"]
    assert traffic.failed == 0 and traffic.answered > 0, traffic

    evidence = env.record(2)["canary"]
    assert evidence["mode"] == "beside" and evidence["result"] == "passed", evidence
    (step,) = evidence["steps"]
    analysis = step["analysis"]
    assert step["gate"] == "pass" and analysis["verdict"] == "pass", step
    # Only the heads serve: one pod a side, each its copy's head.
    assert [p.split("-head-")[0] for p in analysis["canary"]["pods"]] == [canary["metadata"]["name"]], analysis
    assert [p.split("-head-")[0] for p in analysis["stable"]["pods"]] == [stable["metadata"]["name"]], analysis
    (promoted,) = rayclusters(env)
    assert promoted["metadata"]["name"] == canary["metadata"]["name"].removesuffix("-c0") + "-0"
    assert TRACK not in promoted["metadata"]["labels"], "the promoted copy is no canary"
    assert {p.metadata.labels["deployctl.dev/copy"] for p in pods(env)} == {promoted["metadata"]["name"]}
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "superseded"), (2, "deployed")]


def test_a_slower_canary_copy_is_removed_and_the_stable_copy_is_never_written(env: ReleaseEnv, simulator: Any) -> None:
    slow = simulator(model=MODEL, ttft_ms=GOOD_TTFT_MS * 10)
    env.forward_8001(slow.port)
    assert env.apply(two_node(env.namespace)).code == 0
    (before,) = rayclusters(env)
    with Traffic([env.good_port, slow.port]) as traffic:
        failed = env.apply(two_node(env.namespace, engine={"port": 8001}, rollout=_canary()), timeout=400)
    assert failed.code == 6, failed.stdout + failed.stderr
    out = failed.json
    assert out["result"] == "rolled_back" and out["failure"]["class"] == "canary_failed", out
    assert "p95_ttft_ms" in out["message"] and "never changed" in out["message"], out
    assert traffic.failed == 0, traffic
    (after,) = rayclusters(env)
    assert after["metadata"]["uid"] == before["metadata"]["uid"], "the stable copy was replaced"
    assert after["metadata"]["generation"] == before["metadata"]["generation"], "the stable copy was written"
    wait_until(lambda: len(pods(env)) == 2, 60, "the canary copy's pods to go")
    assert {p.metadata.labels["deployctl.dev/copy"] for p in pods(env)} == {before["metadata"]["name"]}
    evidence = env.record(2)["canary"]
    assert evidence["result"] == "failed" and evidence["removed"] == [], evidence
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "deployed"), (2, "failed")]


def test_without_room_beside_the_canary_copy_takes_the_stable_ones_place_and_an_abort_gives_it_back(
    env: ReleaseEnv, simulator: Any, h100: kubernetes.client.CoreV1Api
) -> None:
    """The two spare nodes cordoned: the canary copy takes the only stable copy's place (allowDowntime;
    with no stable copy left, only the absolute SLOs judge its window). `deployctl rollout abort`, sent
    through the canary's RayCluster mid-window, removes it, and the stable copy is applied again from
    revision 1's stored manifests, under its name, and serves again; the two never run at once."""
    env.forward_8001(simulator(model=MODEL).port)
    assert env.apply(two_node(env.namespace)).code == 0
    (before,) = rayclusters(env)
    cordon(h100, *[n for n in H100_NODES if n not in {p.spec.node_name for p in pods(env)}])
    changed = two_node(env.namespace, engine={"port": 8001}, rollout=_canary("10m", allowDowntime=True))
    planned = env.apply(changed, "--dry-run")
    assert "its canary in place of stable copies" in planned.json["message"], planned.json
    log = env.tmp / "apply.log"
    with Sampler(env) as sampler:
        running = start_deployctl(env.kubeconfig, "apply", str(write_profile(env.tmp, changed, "v2.yaml")), log=log)
        shown = _wait_for_analysis(env, running, log)
        aborted = deployctl(env.kubeconfig, "rollout", "abort", "llm", "-n", env.namespace, "-o", "json")
        assert aborted.code == 0, aborted.stdout + aborted.stderr
        assert running.wait(timeout=300) == 6, log.read_text()[-4000:]
    assert shown["canary"]["mode"] == "replace" and shown["canary"]["canary_copies"]["desired"] == 1, shown
    text = log.read_text()
    assert "aborted the canary in step 1" in text and "their copies given back" in text, text[-3000:]
    assert all(len(s["copies_with_pods"]) <= 1 for s in sampler.samples), "the canary and the stable copy ran at once"
    alone = [s["copies_with_pods"] for s in sampler.samples if len(s["copies_with_pods"]) == 1]
    assert any(next(iter(seen)).endswith("-c0") for seen in alone), f"the canary copy never ran: {alone}"
    (after,) = rayclusters(env)
    assert after["metadata"]["name"] == before["metadata"]["name"], "given back under its name"
    assert after["metadata"]["uid"] != before["metadata"]["uid"], "the canary took the stable copy's place"
    assert TRACK not in after["metadata"]["labels"]
    assert len(pods(env)) == 2 and all(_ready(p) for p in pods(env)), "the apply returned once the copy served"
    evidence = env.record(2)["canary"]
    assert evidence["removed"] == [] and evidence["aborted_by"]["command"] == "abort", evidence
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "deployed"), (2, "failed")]


def _wait_for_analysis(env: ReleaseEnv, running: subprocess.Popen[bytes], log: Any) -> dict[str, Any]:
    """`deployctl rollout status -o json` once the canary's first window is analysing."""
    shown: dict[str, Any] = {}

    def analysing() -> bool:
        nonlocal shown
        assert running.poll() is None, log.read_text()[-3000:]
        shown = deployctl(env.kubeconfig, "rollout", "status", "llm", "-n", env.namespace, "-o", "json").json
        return bool(shown["canary"]) and shown["canary"].get("state") == "analysing"

    wait_until(analysing, 180, "the canary to be analysing")
    return shown
