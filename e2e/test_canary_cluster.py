"""rollout.canary on the local control plane, as far as this deployctl runs it: preflight places the
canary (beside the stable copies when the kwok GPU nodes have room), `apply --dry-run` says so, and a
real apply refuses, before any write, a canary it would not run. The analysis' metrics source `pods`
reads a window of live traffic through the API server."""

from __future__ import annotations

import json
import urllib.request

import kubernetes
from deployhelpers import GOOD_TTFT_MS, MODEL, ReleaseEnv, profile

from orchestrator import kube as orchestrator_kube
from orchestrator.apply import pod_metrics
from orchestrator.engines import metric_table
from orchestrator.gate import live_metrics


def test_preflight_places_the_canary_beside_and_apply_refuses_to_ignore_it(env: ReleaseEnv) -> None:
    first = env.apply(profile(env.namespace, rollout={"replicas": 2}))
    assert first.code == 0, first.stdout + first.stderr
    before = env.deployment()

    canary = {"replicas": 2, "canary": {"steps": [{"copies": 1, "analysis": {"window": "1m"}}]}}
    changed = profile(env.namespace, rollout=canary, engine={"maxNumSeqs": 16})  # a new pod template
    planned = env.apply(changed, "--dry-run")
    assert planned.code == 0, planned.stdout + planned.stderr
    assert "its canary beside the stable copies" in planned.json["message"], planned.json

    refused = env.apply(changed)
    assert refused.code == 5, refused.stdout + refused.stderr
    assert refused.json["result"] == "refused"
    message = refused.json["message"]
    assert "does not run canary steps yet" in message and "Nothing was written" in message, message
    assert "Traceback" not in refused.stderr
    after = env.deployment()
    assert after.metadata.generation == before.metadata.generation, "the refused apply changed the Deployment"
    assert [r["revision"] for r in env.history()] == [1], "the refusal wrote no record"


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
    tracks = {pods[0]: "canary", pods[1]: "stable"}
    with pod_metrics.Reader(kube, env.namespace, tracks, 8000, table.path) as reader:
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


def post(url: str) -> int:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "one two"}], "max_tokens": 4, "stream": False}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        answer.read()
        return int(answer.status)
