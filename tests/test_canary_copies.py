"""Where a canary of copies across nodes runs (orchestrator.apply.canary_copies), over the tests'
stand-in cluster: which stable RayClusters a replacing canary takes and how they come back, stale
canary copies of an interrupted run, and what is removed. e2e/test_kuberay_canary_cluster.py runs the
same against KubeRay's real ray-operator."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from test_canary_workload import across_nodes
from test_confine import ApplyingKube

from orchestrator import conventions, errors
from orchestrator.apply import canary_copies
from orchestrator.render import canary as canary_workload

ROLLOUT = {"replicas": 3, "canary": {"steps": [{"copies": 1}, {"copies": 2}]}, "allowDowntime": True}


def setup() -> tuple[canary_copies.Copies, list[dict[str, Any]], ApplyingKube]:
    """The live revision's three copies running, and the new revision (another engine flag) rendered."""
    _, live_objects = across_nodes(ROLLOUT)
    prof, objects = across_nodes(ROLLOUT)
    objects = copy.deepcopy(objects)
    for group in (o for o in objects if o["kind"] == "RayCluster"):  # the new revision's copy names
        group["metadata"]["name"] = group["metadata"]["name"].replace("-", "-n", 1)
    kube = ApplyingKube()
    stable = [o for o in live_objects if o["kind"] == "RayCluster"]
    for group in stable:
        kube.apply(group)
    kube.applied.clear()
    c = canary_copies.of(kube, prof, objects, yaml.safe_dump_all(live_objects).encode())
    return c, stable, kube


def names(kube: ApplyingKube, **labels: str) -> list[str]:
    found, _ = kube.list("RayCluster", "inference")
    return sorted(
        o["metadata"]["name"]
        for o in found
        if all(o["metadata"].get("labels", {}).get(k) == v for k, v in labels.items())
    )


def test_the_stable_side_is_the_live_revisions_stored_copies() -> None:
    c, stable, _ = setup()
    assert c.spans_nodes and c.stable_replicas == 3
    assert [g["metadata"]["name"] for g in c.stable_groups] == [g["metadata"]["name"] for g in stable]


def test_a_replacing_canary_takes_the_last_stable_copies_and_gives_them_back_from_the_stored_manifests() -> None:
    c, stable, kube = setup()
    canary_copies.take_stable(c, 2, timeout=5)
    assert names(kube) == [stable[0]["metadata"]["name"]], "step 2 of 3 copies leaves one stable copy"
    canary_copies.start(c, 2, timeout=5)
    canaries = names(kube, **{conventions.TRACK_LABEL: "canary"})
    assert len(canaries) == 2 and all(n.rsplit("-", 1)[1] in ("c0", "c1") for n in canaries), canaries
    assert canary_copies.free(c, timeout=5) == [] and canary_copies.gone(c)
    assert canary_copies.give_back(c, wait=False, timeout=5, engine="vllm") == []
    assert names(kube) == sorted(g["metadata"]["name"] for g in stable)
    for group in stable:  # given back as the live revision stored it, nothing of the canary in it
        assert kube.get("RayCluster", group["metadata"]["name"], "inference") == group


def test_the_first_step_deletes_canary_copies_an_interrupted_run_left_and_nothing_else() -> None:
    c, stable, kube = setup()
    stale = copy.deepcopy(stable[0])
    stale["metadata"]["name"] = canary_workload.canary_copy_name(stale["metadata"]["name"])
    stale["metadata"]["labels"][conventions.TRACK_LABEL] = "canary"
    foreign = copy.deepcopy(stale)
    foreign["metadata"].update(name="someone-elses-c0", labels={conventions.TRACK_LABEL: "canary"})
    kube.apply(stale)
    kube.apply(foreign)
    canary_copies.start(c, 1, timeout=5)
    ours = names(kube, **{conventions.RELEASE_LABEL: c.name, conventions.TRACK_LABEL: "canary"})
    (canary,) = canary_workload.group_copies(c.objects, 1)
    assert ours == [canary["metadata"]["name"]], "the stale canary copy went, this run's started"
    assert "someone-elses-c0" in names(kube), "an object without the release's label is never deleted"
    assert len(names(kube)) == 5  # three stable copies, the canary copy, the foreign object
    canary_copies.start(c, 2, timeout=5)
    assert len(names(kube, **{conventions.TRACK_LABEL: "canary", conventions.RELEASE_LABEL: c.name})) == 2
    assert canary_copies.remove(c) == []
    assert names(kube) == sorted([*(g["metadata"]["name"] for g in stable), "someone-elses-c0"])


def test_stored_copies_that_are_not_the_releases_are_refused_before_any_write() -> None:
    c, stable, kube = setup()
    tampered = copy.deepcopy(stable)
    tampered[0]["metadata"]["namespace"] = "kube-system"
    prof, _ = across_nodes(ROLLOUT)
    with pytest.raises(errors.OutsideRelease):
        canary_copies.of(kube, prof, c.objects, yaml.safe_dump_all(tampered).encode())
    assert kube.applied == []


def test_a_rerun_after_a_run_killed_in_step_2_starts_from_step_1_whole() -> None:
    """A replacing run killed in step 2 of 3 copies left two canary copies and one stable copy: the
    rerun's step 1 gives the stable side its second copy back and deletes the second canary copy, which
    would otherwise take live traffic ungated."""
    c, stable, kube = setup()
    canary_copies.take_stable(c, 2, timeout=5)
    canary_copies.start(c, 2, timeout=5)  # then killed: nothing given back
    canary_copies.take_stable(c, 1, timeout=5)
    canary_copies.start(c, 1, timeout=5)
    (canary,) = canary_workload.group_copies(c.objects, 1)
    assert names(kube, **{conventions.TRACK_LABEL: "canary"}) == [canary["metadata"]["name"]]
    assert names(kube, **{conventions.RELEASE_LABEL: c.name}) == sorted(
        [canary["metadata"]["name"], *(g["metadata"]["name"] for g in stable[:2])]
    )


def test_a_taken_copy_whose_pods_never_go_stops_the_step_naming_them() -> None:
    """The canary starts only once the taken copy's pods are gone (their GPUs free): pods that stay are
    an error naming them, not a canary started on GPUs still held."""
    c, stable, kube = setup()
    last = stable[-1]["metadata"]["name"]
    labels = {conventions.RELEASE_LABEL: c.name, conventions.COPY_LABEL: last}
    kube.apply({"kind": "Pod", "metadata": {"name": f"{last}-head-x", "namespace": "inference", "labels": labels}})
    with pytest.raises(errors.ClusterError, match=f"{last}-head-x"):
        canary_copies.take_stable(c, 1, timeout=0.1)
    assert names(kube, **{conventions.TRACK_LABEL: "canary"}) == []
