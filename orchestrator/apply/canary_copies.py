"""Where a canary's copies run: started and grown step by step, removed when the canary ends, and the
stable copies a replacing canary (mode `replace`) takes away and gives back.

Single-pod copies: the canary is one Deployment, `<release>-canary`, and a replacing canary scales the
stable Deployment down and back up; its pod template is never written. Copies that span nodes
(KubeRay): each canary copy is a RayCluster of its own (``orchestrator.render.canary``), and a
replacing canary deletes whole stable RayClusters, a copy never mixing revisions, then gives them back
by re-applying them from the live revision's stored manifests. Either way no stable object is changed
otherwise, so no stable pod restarts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml

from orchestrator import conventions, errors
from orchestrator.apply import confine, group_rollout, rollout, verify, watching
from orchestrator.kube import Kube
from orchestrator.kube import status as kube_status
from orchestrator.profile.model import Profile
from orchestrator.render import canary as canary_workload


@dataclasses.dataclass(frozen=True)
class Copies:
    """A release's two sides for one canary run: the new revision's rendered objects (the canary's
    source) and the live revision's stable copies as it applied them."""

    kube: Kube
    name: str
    namespace: str
    objects: list[dict[str, Any]]
    stable_replicas: int  # the stable copies before the canary: what `replace` gives back
    # The live revision's RayClusters from its stored manifests, in order; empty for a Deployment.
    stable_groups: tuple[dict[str, Any], ...] = ()
    join_seconds: float = 0.0

    @property
    def spans_nodes(self) -> bool:
        return any(o.get("kind") == canary_workload.GROUP_KIND for o in self.objects)


def of(kube: Kube, profile: Profile, objects: list[dict[str, Any]], live_manifests: bytes) -> Copies:
    """The two sides of ``profile``'s canary, the stable one from the live revision's stored manifests;
    ``errors.OutsideRelease`` (exit 9, before any write) when the stored RayClusters are not the release's
    own, which giving them back would write."""
    name, namespace, join = profile.metadata.name, profile.metadata.namespace, float(profile.rollout.groupJoinSeconds)
    if not any(o.get("kind") == canary_workload.GROUP_KIND for o in objects):
        return Copies(kube, name, namespace, objects, _deployment_replicas(live_manifests, profile))
    source = "the live revision's stored manifests"
    stored = confine.stored_objects(live_manifests, source, name, namespace)
    groups = [o for o in stored if o.get("kind") == canary_workload.GROUP_KIND]
    confine.check(name, namespace, groups, source)
    return Copies(kube, name, namespace, objects, len(groups), tuple(groups), join)


def _deployment_replicas(live_manifests: bytes, profile: Profile) -> int:
    """The stable Deployment's copies as the live revision applied them (not as the cluster has them:
    an earlier run killed mid-step may have left it short)."""
    for doc in yaml.safe_load_all(live_manifests):
        replicas = (doc.get("spec") or {}).get("replicas") if isinstance(doc, dict) else None
        if isinstance(doc, dict) and doc.get("kind") == "Deployment" and isinstance(replicas, int):
            return replicas
    return profile.rollout.replicas


def start(c: Copies, copies: int, *, timeout: float) -> None:
    """Apply the canary on ``copies`` copies. Canary RayClusters beyond them (an earlier, interrupted run's,
    of this revision or another) are deleted first, and their pods awaited: they would take live traffic
    ungated, and they hold GPUs."""
    workloads = canary_workload.workloads(c.objects, c.name, copies)
    if c.spans_nodes:
        ours = {o["metadata"]["name"] for o in workloads if o["kind"] == canary_workload.GROUP_KIND}
        stale = {n for n in _canary_groups(c) if n not in ours}
        for stale_name in sorted(stale):
            c.kube.delete(canary_workload.GROUP_KIND, stale_name, c.namespace)
        if stale:
            group_rollout.wait_copies_gone(c.kube, c.namespace, c.name, _keep(c, stale), timeout=timeout)
    for obj in workloads:
        c.kube.apply(obj)


def gate_spec(c: Copies, spec: verify.GateSpec, copies: int) -> verify.GateSpec:
    """The gate of the canary's own pods: the canary Deployment, or the canary's RayClusters."""
    if c.spans_nodes:
        group = verify.group_watch(canary_workload.group_copies(c.objects, copies), c.join_seconds)
        return dataclasses.replace(spec, endpoint=None, endpoint_own=False, group=group)
    workload = canary_workload.workload_name(c.name)
    return dataclasses.replace(spec, workload=workload, endpoint=None, endpoint_own=False, group=None)


def take_stable(c: Copies, copies: int, timeout: float) -> None:
    """Leave ``stable_replicas - copies`` stable copies (``replace``): the Deployment scaled down, or
    the last stable RayClusters deleted and their pods awaited, so that their GPUs are free."""
    keep = max(c.stable_replicas - copies, 0)
    if not c.spans_nodes:
        _scale_stable(c, keep)
        return
    for group in c.stable_groups[:keep]:  # an interrupted run may have taken more; unchanged ones stay as they are
        c.kube.apply(group)
    taken = {g["metadata"]["name"] for g in c.stable_groups[keep:]}
    for name in sorted(taken):
        c.kube.delete(canary_workload.GROUP_KIND, name, c.namespace)
    group_rollout.wait_copies_gone(c.kube, c.namespace, c.name, _keep(c, taken), timeout=timeout)


def remove(c: Copies) -> list[str]:
    """Delete the canary's objects; what could not be deleted (empty when all went). For copies across
    nodes: every canary name this revision may run, and any other canary RayCluster the cluster lists."""
    kinds = ["NetworkPolicy"] if canary_workload.network_policy(c.objects, c.name) else []
    left: list[str] = []
    targets = [(kind, canary_workload.workload_name(c.name)) for kind in kinds]
    if c.spans_nodes:
        names = {canary_workload.canary_copy_name(o["metadata"]["name"]) for o in _new_groups(c)}
        try:
            names |= set(_canary_groups(c))
        except errors.DeployctlError as e:
            left.append(f"the canary's RayClusters could not be listed: {e.message}")
        targets += [(canary_workload.GROUP_KIND, n) for n in sorted(names)]
    else:
        targets.append(("Deployment", canary_workload.workload_name(c.name)))
    for kind, name in targets:
        try:
            c.kube.delete(kind, name, c.namespace)
        except errors.DeployctlError as e:
            left.append(f"the canary {kind} {name} could not be deleted: {e.message}")
    return left


def free(c: Copies, timeout: float) -> list[str]:
    """After a passed canary of copies across nodes: delete its RayClusters and wait until their pods
    are gone, so that the promotion's copies find the GPUs; what is left (empty when all went)."""
    left = remove(c)
    if left or not c.spans_nodes:
        return left
    try:
        going = _copies_of_pods(c, canary=True)
        group_rollout.wait_copies_gone(c.kube, c.namespace, c.name, _copies_of_pods(c) - going, timeout=timeout)
    except errors.DeployctlError as e:
        left.append(e.message)
    return left


def give_back(c: Copies, *, wait: bool, timeout: float, engine: str) -> list[str]:
    """Give the stable side the copies a replacing canary took and, with ``wait``, wait until they serve
    again; what is left to a person (empty when all came back)."""
    left: list[str] = []
    try:
        if c.spans_nodes:
            for group in c.stable_groups:  # an untouched one is unchanged by the apply
                c.kube.apply(group)
        else:
            _scale_stable(c, c.stable_replicas)
    except errors.DeployctlError as e:
        return [f"the stable copies could not be given back: {e.message}"]
    if not wait:
        return left
    quiet = watching.Wait(timeout, lambda m: None, lambda: None)
    if c.spans_nodes:
        names = tuple(g["metadata"]["name"] for g in c.stable_groups)
        size = verify.group_watch(list(c.stable_groups), c.join_seconds)
        watch = group_rollout.GroupWatch(names, size.size if size else 1, c.join_seconds)
        back = group_rollout.watch_groups(c.kube, c.namespace, c.name, watch, quiet)
    else:
        back = rollout.watch_rollout(c.kube, c.namespace, c.name, quiet, engine=engine)
    if not back.ok and back.failure is not None:
        left.append(f"the stable copies did not come back: {back.failure.message}")
    return left


def gone(c: Copies) -> bool:
    """Whether the canary's workload was deleted while its steps ran (False when the API could not say)."""
    try:
        if c.spans_nodes:
            return not _canary_groups(c)
        return c.kube.get("Deployment", canary_workload.workload_name(c.name), c.namespace) is None
    except errors.DeployctlError:
        return False


def _scale_stable(c: Copies, replicas: int) -> None:
    """The stable Deployment on ``replicas`` copies; its pod template is left as it is."""
    c.kube.merge_patch("Deployment", c.name, c.namespace, {"spec": {"replicas": replicas}})


def _canary_groups(c: Copies) -> list[str]:
    """The release's canary RayClusters in the cluster, this run's or an earlier one's; the API's error
    when it cannot say (never "none": that would pass for a deleted canary)."""
    labels = f"{conventions.RELEASE_LABEL}={c.name},{conventions.TRACK_LABEL}={canary_workload.CANARY}"
    found, _ = c.kube.list(canary_workload.GROUP_KIND, c.namespace, labels=labels)
    return sorted(kube_status.name_of(o) for o in found)


def _keep(c: Copies, going: set[str]) -> set[str]:
    """The copies whose pods may stay while ``going`` go: every copy with pods now, but those."""
    return _copies_of_pods(c) - going


def _copies_of_pods(c: Copies, *, canary: bool = False) -> set[str]:
    """The copies the release's pods belong to now (with ``canary``: its canary pods only)."""
    labels = f"{conventions.RELEASE_LABEL}={c.name}"
    if canary:
        labels += f",{conventions.TRACK_LABEL}={canary_workload.CANARY}"
    pods, _ = c.kube.list("Pod", c.namespace, labels=labels)
    return {kube_status.labels_of(p).get(conventions.COPY_LABEL, "") for p in pods} - {""}


def _new_groups(c: Copies) -> list[dict[str, Any]]:
    return [o for o in c.objects if o.get("kind") == canary_workload.GROUP_KIND]
