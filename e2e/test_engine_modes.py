"""Each engine's example profile, unchanged but for its namespace, through the whole pipeline on the
local control plane: apply → health gate → smoke gate → record, an upgrade that misses its SLO rolled
back, and a crash loop classified from that engine's own refusal.

The pods' port reaches the simulator in the engine's mode (`vllm-sim --engine KIND`: its routes,
health semantics, SSE framing, usage chunk and request validation, each following the engine's
source), and the pods' log is the engine's own start-up log from tests/data/engine_logs, so the
planner's loop reads what that engine prints. No GPU and no engine image are needed; what cannot be
tested here is said in docs/engines.md.
"""

from __future__ import annotations

import copy
import pathlib
import shutil
from collections.abc import Callable
from typing import Any

import kubernetes
import kwoksim
import localcluster
import pytest
import yaml
from deployhelpers import ReleaseEnv, create_models_volume

from orchestrator import engines

pytestmark = pytest.mark.kwok

ROOT = pathlib.Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "data" / "engine_logs"
# What each engine's start-up log fixture says its KV cache holds (read back into the record).
LOGGED_KV_TOKENS = {"tgi": 1_069_251, "trtllm": 86_720, "sglang": 91_749}


def example(kind: str, namespace: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "profiles" / f"{kind}-tp4.yaml").read_text())
    doc["metadata"]["namespace"] = namespace
    return doc


def serve_log(env: ReleaseEnv, name: str) -> None:
    """The engine log fixture ``name`` as every pod's log (copied: kwok reads a converted file beside it)."""
    log = env.tmp / name
    shutil.copyfile(LOGS / name, log)
    kwoksim.set_namespace_logs(env.cluster, env.namespace, log)


@pytest.fixture
def engine_env(
    cluster: localcluster.Cluster,
    namespace: str,
    api_client: kubernetes.client.ApiClient,
    tmp_path: pathlib.Path,
) -> ReleaseEnv:
    create_models_volume(api_client, namespace)
    return ReleaseEnv(cluster.kubeconfig, namespace, tmp_path, cluster, api_client, 0)


@pytest.mark.parametrize("kind", ["tgi", "trtllm", "sglang"])
def test_an_engines_example_profile_deploys_gates_and_rolls_back_on_its_simulator_mode(
    engine_env: ReleaseEnv, simulator: Callable[..., Any], api_client: kubernetes.client.ApiClient, kind: str
) -> None:
    env = engine_env
    doc = example(kind, env.namespace)
    name = doc["metadata"]["name"]
    engine = engines.get(kind)
    # The simulator lists the model under the id the real engine would: TGI its --model-id path,
    # TensorRT-LLM the model directory's name, SGLang the served name.
    served = engine.served_id(doc["model"]["name"], doc["model"]["source"]["path"])
    # 20 ms between tokens keeps the example's 16 streams within what one client core follows here.
    sim = simulator(model=served, engine=kind, ttft_ms=50, itl_ms=20)
    kwoksim.forward_ports(env.cluster, env.namespace, {8000: sim.port})
    serve_log(env, f"{kind}-startup.log")

    first = env.apply(doc)
    assert first.code == 0, first.stdout + first.stderr
    out = first.json
    assert out["result"] == "deployed" and out["gate"]["verdict"] == "pass", out["gate"]
    assert out["gate"]["metrics"]["completed"] == doc["gate"]["smoke"]["requests"]
    container = kubernetes.client.AppsV1Api(api_client).read_namespaced_deployment(name, env.namespace)
    assert container.spec.template.spec.containers[0].command == list(engine.command)
    (seen,) = env.record(1, name)["observed"]
    assert seen["kv_cache_tokens"] == LOGGED_KV_TOKENS[kind]  # the engine's own line, read back
    assert any(f"{engine.title} reports a KV cache" in w for w in out["warnings"]), out["warnings"]

    impossible = copy.deepcopy(doc)
    impossible["gate"]["smoke"]["slo"] = {"output_throughput": ">=1000000000"}
    # Four streams, not sixteen: an SLO no server meets must fail, and a client that falls behind
    # on a loaded CI machine would turn that fail into inconclusive (project CI, stop 35).
    impossible["gate"]["smoke"].update(concurrency=4, requests=16)
    second = env.apply(impossible)
    assert second.code == 6, second.stdout + second.stderr
    assert second.json["result"] == "rolled_back" and second.json["failure"]["class"] == "slo_failed"
    assert second.json["rolled_back_to"] == 1
    rows = env.history(name)
    assert [(r["revision"], r["status"]) for r in rows] == [(1, "superseded"), (2, "failed"), (3, "deployed")]


@pytest.mark.parametrize("kind", ["tgi", "trtllm", "sglang"])
def test_an_engines_own_refusal_in_a_crash_loop_is_named_and_rolled_back(
    engine_env: ReleaseEnv, simulator: Callable[..., Any], kind: str
) -> None:
    env = engine_env
    doc = example(kind, env.namespace)
    doc["gate"]["smoke"]["enabled"] = False
    engine = engines.get(kind)
    sim = simulator(model=engine.served_id(doc["model"]["name"], doc["model"]["source"]["path"]), engine=kind)
    kwoksim.forward_ports(env.cluster, env.namespace, {8000: sim.port})
    serve_log(env, f"{kind}-startup.log")
    assert env.apply(doc).code == 0
    serve_log(env, f"{kind}-bad-arg.log")
    crashing = copy.deepcopy(doc)
    crashing["engine"]["maxNumSeqs"] = 32
    crashing.setdefault("placement", {})["podAnnotations"] = {
        "sim.deployctl.dev/behavior": "crash-loop",
        "sim.deployctl.dev/backoff": "2s",
    }
    result = env.apply(crashing)
    assert result.code == 5, result.stdout + result.stderr
    failure = result.json["failure"]
    assert failure["class"] == "engine_args" and engine.title in failure["message"], failure
    assert result.json["rolled_back_to"] == 1
