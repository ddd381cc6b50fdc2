"""Copies across nodes: the RayCluster (KubeRay) and LeaderWorkerSet renders, and the Ray head's script.

No KubeRay or LWS controller runs here (the e2e suite runs the real ray-operator; no LWS controller
can be built on our machines): these tests hold the objects to the fields KubeRay and LWS document,
and run the head's start script with stand-ins for `ray`, `python3` and `vllm`.
"""

from __future__ import annotations

import itertools
import os
import pathlib
import shlex
import stat
import subprocess
from typing import Any

import pydantic
import pytest

from orchestrator import conventions
from orchestrator.apply import rollout
from orchestrator.plan import planner
from orchestrator.profile import model as profile
from orchestrator.render import manifests as render
from orchestrator.render import resolve

ROOT = pathlib.Path(__file__).resolve().parent.parent
TWO_NODE = ROOT / "profiles" / "llama31-405b-2node.yaml"
LWS = ROOT / "tests" / "golden" / "lws.profile.yaml"


def _render(prof: profile.Profile) -> list[dict[str, Any]]:
    return render.render(prof, planner.plan(prof))


def _kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def _changed(prof: profile.Profile, section: str, **fields: Any) -> profile.Profile:
    """``prof`` with fields of one section replaced (validated, as a loaded profile is)."""
    data = prof.model_dump(mode="json")
    data[section] = {**data[section], **fields}
    return profile.Profile.model_validate(data)


def test_a_two_node_copy_is_one_raycluster_with_a_head_and_one_worker_of_8_gpus() -> None:
    prof = profile.load(TWO_NODE)
    objects = _render(prof)
    assert not _kind(objects, "Deployment")
    (cluster,) = _kind(objects, "RayCluster")
    spec = cluster["spec"]
    assert cluster["apiVersion"] == "ray.io/v1" and spec["enableInTreeAutoscaling"] is False
    (workers,) = spec["workerGroupSpecs"]
    assert workers["replicas"] == workers["minReplicas"] == workers["maxReplicas"] == 1
    head, worker = spec["headGroupSpec"]["template"], workers["template"]
    name = cluster["metadata"]["name"]
    for template, role in ((head, "leader"), (worker, "worker")):
        labels = template["metadata"]["labels"]
        assert labels[conventions.COPY_LABEL] == name and labels[conventions.GROUP_ROLE_LABEL] == role
        container = template["spec"]["containers"][0]
        assert container["resources"]["limits"][conventions.GPU_RESOURCE] == "8"
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["dshm"] == "/dev/shm" and mounts["model"] == "/models"
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["HF_HUB_OFFLINE"] == "1" and env["RAY_USAGE_STATS_ENABLED"] == "0", "air gap for Ray too"
    # KubeRay runs `ray start` itself in the workers; the head runs our script instead.
    assert head["metadata"]["annotations"][render.RAY_OVERWRITE_CMD_ANNOTATION] == "true"
    assert "command" not in worker["spec"]["containers"][0]
    assert "readinessProbe" not in worker["spec"]["containers"][0], "KubeRay injects the raylet probes"
    assert head["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/health"


def test_a_copy_keeps_one_pod_per_node_inside_one_topology_domain_on_the_right_gpus() -> None:
    prof = profile.load(TWO_NODE)
    (cluster,) = _kind(_render(prof), "RayCluster")
    name = cluster["metadata"]["name"]
    for template in (cluster["spec"]["headGroupSpec"]["template"], cluster["spec"]["workerGroupSpecs"][0]["template"]):
        affinity = template["spec"]["affinity"]
        same_copy = {"matchLabels": {conventions.COPY_LABEL: name}}
        (apart,) = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert apart == {"labelSelector": same_copy, "topologyKey": "kubernetes.io/hostname"}
        (together,) = affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert together == {"labelSelector": same_copy, "topologyKey": "network.deployctl.dev/fabric"}
        terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        keys = {e["key"] for e in terms[0]["matchExpressions"]}
        assert keys == {conventions.GPU_PRODUCT_LABEL, "deployctl.dev/nvlink"}
    no_domain = _changed(prof, "placement", topologyKey=None)
    (cluster,) = _kind(_render(no_domain), "RayCluster")
    assert "podAffinity" not in cluster["spec"]["headGroupSpec"]["template"]["spec"]["affinity"]


def test_the_service_routes_to_the_heads_and_the_copy_reaches_itself_through_the_network_policy() -> None:
    objects = _render(profile.load(TWO_NODE))
    (service,) = _kind(objects, "Service")
    assert service["spec"]["selector"][conventions.GROUP_ROLE_LABEL] == "leader"
    (policy,) = _kind(objects, "NetworkPolicy")
    release = policy["spec"]["podSelector"]
    assert {"from": [{"podSelector": release}]} in policy["spec"]["ingress"]
    assert {"to": [{"podSelector": release}]} in policy["spec"]["egress"]
    (budget,) = _kind(objects, "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1, "a drain takes one pod, so at most one copy, at a time"


def test_copies_are_named_by_their_pod_templates_so_a_change_makes_new_copies_and_an_slo_change_does_not() -> None:
    prof = profile.load(TWO_NODE)

    def names(p: profile.Profile) -> list[str]:
        return [o["metadata"]["name"] for o in _kind(_render(p), "RayCluster")]

    (first,) = names(prof)
    assert first.startswith("llama31-405b-") and first.endswith("-0")
    assert names(prof) == [first], "deterministic"
    assert names(_changed(prof, "engine", maxNumSeqs=16)) != [first]
    gate = prof.gate.model_dump(mode="json")
    gate["smoke"]["slo"] = {"p95_ttft_ms": "<=2500"}
    assert names(_changed(prof, "gate", **gate)) == [first], "a gate change must not restart the copies"
    # Scaling adds copies and keeps the running one: the copy count is not part of a copy's template.
    assert names(_changed(prof, "rollout", replicas=2)) == [first, first.removesuffix("-0") + "-1"]


def test_leaderworkerset_has_the_fields_lws_documents_and_vllms_multiprocessing_rendezvous() -> None:
    prof = profile.load(LWS)
    (lws,) = _kind(_render(prof), "LeaderWorkerSet")
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1" and lws["metadata"]["name"] == prof.metadata.name
    spec = lws["spec"]
    assert spec["replicas"] == prof.rollout.replicas == 2
    template = spec["leaderWorkerTemplate"]
    assert template["size"] == 2
    # A restarted pod recreates its whole group: a group never runs mixed revisions.
    assert template["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert spec["rolloutStrategy"]["type"] == "RollingUpdate"
    assert set(spec["rolloutStrategy"]["rollingUpdateConfiguration"]) == {"maxSurge", "maxUnavailable"}
    leader = template["leaderTemplate"]["spec"]["containers"][0]["command"]
    worker = template["workerTemplate"]["spec"]["containers"][0]["command"]
    for command in (leader, worker):
        flags = dict(itertools.pairwise(command))
        assert flags["--nnodes"] == "$(LWS_GROUP_SIZE)" and flags["--master-addr"] == "$(LWS_LEADER_ADDRESS)"
        assert flags["--node-rank"] == "$(LWS_WORKER_INDEX)" and flags["--distributed-executor-backend"] == "mp"
    assert "--headless" in worker and "--headless" not in leader
    anti = template["workerTemplate"]["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert anti[0]["matchLabelKeys"] == [resolve.LWS_GROUP_KEY_LABEL], "one pod per node within each group"


# --- the Ray head's start script ----------------------------------------------------------------


def _stand_ins(tmp: pathlib.Path, joined_after: int) -> dict[str, str]:
    """`python3` reporting how many Ray nodes joined (1 until its ``joined_after``-th call, then 2),
    `vllm` printing its arguments, `sleep` that does not sleep."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    scripts = {
        "python3": f"n=$(cat {tmp}/calls 2>/dev/null || echo 0); n=$((n+1)); echo $n > {tmp}/calls\n"
        f"if [ $n -ge {joined_after} ]; then echo 2; else echo 1; fi\n",
        "vllm": 'echo "VLLM $*"\n',
        "sleep": "exit 0\n",
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text("#!/bin/bash\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "KUBERAY_GEN_RAY_START_CMD": f"touch {tmp}/ray-started"}


def _head_script(prof: profile.Profile) -> list[str]:
    (cluster,) = _kind(_render(prof), "RayCluster")
    command: list[str] = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["command"]
    return command


def test_the_head_starts_ray_waits_for_every_node_then_serves_with_the_ray_backend(tmp_path: pathlib.Path) -> None:
    prof = profile.load(TWO_NODE)
    done = subprocess.run(
        _head_script(prof), env=_stand_ins(tmp_path, joined_after=3), capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ray-started").exists()
    assert (tmp_path / "calls").read_text().strip() == "3", "it waited until both nodes had joined"
    served = next(line for line in done.stdout.splitlines() if line.startswith("VLLM "))
    args = shlex.split(served)[1:]
    assert args[:2] == ["serve", "/models/llama-3.1-405b-instruct"]
    assert args[args.index("--tensor-parallel-size") + 1] == "8"
    assert args[args.index("--pipeline-parallel-size") + 1] == "2"
    assert args[-2:] == ["--distributed-executor-backend", "ray"]


def test_a_head_whose_workers_never_join_exits_with_a_line_classified_group_incomplete(
    tmp_path: pathlib.Path,
) -> None:
    prof = profile.load(TWO_NODE)
    quick = prof.model_copy(update={"rollout": prof.rollout.model_copy(update={"groupJoinSeconds": 1})})
    done = subprocess.run(
        _head_script(quick), env=_stand_ins(tmp_path, joined_after=10**9), capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 1 and "VLLM" not in done.stdout
    assert "1 of 2 Ray nodes joined within 1s" in done.stderr
    classified = rollout.classify_log(done.stderr)
    assert classified is not None and classified[0] == "group_incomplete"


@pytest.mark.parametrize("flag", ["--distributed-executor-backend", "--nnodes", "--node-rank", "--headless"])
def test_multi_node_flags_are_set_by_deployctl_and_refused_in_extra_args(flag: str) -> None:
    data = profile.load(TWO_NODE).model_dump(mode="json")
    data["engine"]["extraArgs"] = [flag] if flag == "--headless" else [flag, "1"]
    with pytest.raises(pydantic.ValidationError, match=r"set by deployctl from placement\."):
        profile.Profile.model_validate(data)


def test_render_to_a_folder_drops_an_earlier_revisions_copies_and_keeps_other_files(tmp_path: pathlib.Path) -> None:
    prof = profile.load(TWO_NODE)
    render.write(_render(prof), tmp_path)
    (first,) = [p.name for p in tmp_path.glob("*-raycluster-*")]
    (tmp_path / "99-raycluster-other-release-0123abcd-0.yaml").write_text("kind: RayCluster\n")
    render.write(_render(_changed(prof, "engine", maxNumSeqs=16)), tmp_path)
    clusters = sorted(p.name for p in tmp_path.glob("*-raycluster-*"))
    assert first not in clusters and len(clusters) == 2, "the old copy's file went; another release's stayed"
    assert "99-raycluster-other-release-0123abcd-0.yaml" in clusters
